"""Projections: pure folds over a session's log (DESIGN.md §3).

A cold start, a resume and a fork rebuild state by the same fold. Each machine owns its fold
(``fold_plan_mode``, ``fold_goal``, ``fold_todos``); :func:`fold_session` runs all three in one
pass.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from engine.events import (
    CommandRun,
    GoalChange,
    PlanMode,
    SessionEvent,
    TodoItem,
    TodoWrite,
    TurnStart,
)
from engine.goal.types import GoalSnapshot


@dataclass(frozen=True, slots=True)
class PlanModeState:
    """``active``: last committed ``plan/mode``; ``pending``: a switch not yet committed."""

    active: bool = False
    pending: bool | None = None


def apply_plan_mode_event(state: PlanModeState, event: SessionEvent) -> PlanModeState:
    """``command/run(name="plan")`` derives a wanted target; ``plan/mode`` commits and clears it."""
    if isinstance(event, PlanMode):
        return PlanModeState(active=event.active, pending=None)
    if isinstance(event, CommandRun) and event.name == "plan":
        wanted = event.data.get("target")
        if isinstance(wanted, bool) and wanted != state.active:
            return PlanModeState(active=state.active, pending=wanted)
    return state


def apply_goal_event(state: GoalSnapshot | None, event: SessionEvent) -> GoalSnapshot | None:
    """The current goal: the last snapshot, or ``None`` after a tombstone."""
    if isinstance(event, GoalChange):
        return event.snapshot
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
