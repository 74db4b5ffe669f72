"""Projections: pure folds over a session's log (docs/architecture.md).

A cold start, a resume and a fork rebuild state by the same fold. Each machine owns its fold
(``fold_plan_mode``, ``fold_goal``, ``fold_todos``); :func:`fold_session` runs all three in one
pass. The folds read only the event types in :data:`PROJECTION_EVENT_TYPES` and pass every other
event through unchanged, so :func:`replay_projections` folds a log read with that type filter
and gets the same state without decoding messages' tool output.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from engine.events import (
    CommandRun,
    GoalChange,
    GoalRoundSource,
    PlanMode,
    SessionEvent,
    TodoItem,
    TodoWrite,
    TurnStart,
    UserMessage,
)
from engine.goal.types import GoalSnapshot
from engine.ports import EventLog

# Every event type a fold below looks at. A new case in an ``apply_*`` function must add its
# type here, or a cold replay would skip it (tests/engine/test_projection_replay.py checks the
# filtered fold against the full one).
PROJECTION_EVENT_TYPES: frozenset[str] = frozenset(
    {
        PlanMode.model_fields["type"].default,
        CommandRun.model_fields["type"].default,
        GoalChange.model_fields["type"].default,
        UserMessage.model_fields["type"].default,
        TodoWrite.model_fields["type"].default,
        TurnStart.model_fields["type"].default,
    }
)


# The owner's commands that take back a pending ``/plan`` or approval: once one is logged, the
# pending switch never commits (the controller forgets it; a restart must not revive it).
TAKE_BACK_COMMANDS: frozenset[str] = frozenset({"keep_planning", "discard", "new", "revise"})


@dataclass(frozen=True, slots=True)
class PlanModeState:
    """``active``: last committed ``plan/mode``; ``pending``: a switch not yet committed."""

    active: bool = False
    pending: bool | None = None


def apply_plan_mode_event(state: PlanModeState, event: SessionEvent) -> PlanModeState:
    """``command/run(name="plan")`` derives a wanted target; ``plan/mode`` commits and clears it.

    A take-back command (:data:`TAKE_BACK_COMMANDS`) clears it uncommitted.
    """
    if isinstance(event, PlanMode):
        return PlanModeState(active=event.active, pending=None)
    if isinstance(event, CommandRun) and event.name in TAKE_BACK_COMMANDS:
        return PlanModeState(active=state.active, pending=None)
    if isinstance(event, CommandRun) and event.name == "plan":
        wanted = event.data.get("target")
        if isinstance(wanted, bool) and wanted != state.active:
            return PlanModeState(active=state.active, pending=wanted)
    return state


def apply_goal_event(state: GoalSnapshot | None, event: SessionEvent) -> GoalSnapshot | None:
    """The current goal: the last snapshot, ``None`` after its tombstone, plus admitted rounds.

    A goal-source ``user/message`` of the current goal at its current revision IS the admission
    of a round: it adds one to ``rounds_started`` without a new revision (docs/goals.md). A
    tombstone clears only the goal it names, so a late clear of a replaced goal cannot erase its
    successor.
    """
    if isinstance(event, GoalChange):
        snapshot = event.snapshot
        if snapshot is not None:
            # Rounds only grow: a snapshot written from a fold that had not yet seen the latest
            # admission must not take that round back.
            if (
                state is not None
                and state.id == snapshot.id
                and state.rounds_started > snapshot.rounds_started
            ):
                return snapshot.model_copy(update={"rounds_started": state.rounds_started})
            return snapshot
        if event.tombstone is not None and state is not None and event.tombstone.id != state.id:
            return state
        return None
    if (
        isinstance(event, UserMessage)
        and isinstance(event.source, GoalRoundSource)
        and state is not None
        and event.source.goal_id == state.id
        # A round reserved at an older revision was not validly admitted (the goal was paused
        # or edited in between), so it must not use up a round of the cap.
        and event.source.revision == state.revision
    ):
        return state.model_copy(update={"rounds_started": state.rounds_started + 1})
    return state


def apply_todo_event(
    state: tuple[TodoItem, ...] | None, event: SessionEvent
) -> tuple[TodoItem, ...] | None:
    """Null before the first write, replaced on each write, cleared on ``turn/start``."""
    if isinstance(event, TodoWrite):
        return tuple(event.todos)
    if isinstance(event, TurnStart):
        return None
    return state


@dataclass(frozen=True, slots=True)
class SessionProjections:
    plan_mode: PlanModeState = PlanModeState()
    goal: GoalSnapshot | None = None
    todos: tuple[TodoItem, ...] | None = None


def apply_session_event(state: SessionProjections, event: SessionEvent) -> SessionProjections:
    """One step of the session fold."""
    return SessionProjections(
        plan_mode=apply_plan_mode_event(state.plan_mode, event),
        goal=apply_goal_event(state.goal, event),
        todos=apply_todo_event(state.todos, event),
    )


def fold_session(events: Iterable[SessionEvent]) -> SessionProjections:
    """Fold a whole log from empty."""
    state = SessionProjections()
    for event in events:
        state = apply_session_event(state, event)
    return state


async def replay_projections(log: EventLog, session_id: str) -> SessionProjections:
    """A cold fold of a session's log, reading only :data:`PROJECTION_EVENT_TYPES`.

    Equal to ``fold_session`` over the whole log; it does not close an interrupted turn
    (``engine.recovery.load_session_events`` does), which changes no projection.
    """
    stored = await log.read(session_id, types=PROJECTION_EVENT_TYPES)
    return fold_session(item.event for item in stored)
