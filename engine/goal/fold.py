"""The goal machine's pure core: replay and transitions (docs/goals.md).

``fold_goal(events)`` rebuilds :class:`GoalState` from a log; ``decide(state, command, ...)``
returns the events a command appends, or a :class:`GoalRefusal` with a stable code. Nothing here
does IO: :mod:`engine.goal.service` applies these under a lock and appends the events, and the
event log's compare-and-set on ``(goal id, revision)`` turns a lost race into ``stale-revision``.

Transitions (every mutation presents a :class:`GoalRef`; a stale one is refused first):

    create                       -> active r1 (fresh id; refused while a non-complete
                                    user/model goal exists; replaces a task or complete goal)
    edit      active|paused|blocked -> same phase r+1
    pause     active             -> paused r+1
    block     active             -> blocked r+1 {code, message}
    complete  active|paused|blocked -> complete r+1
    check     active|paused|blocked + a check run -> goal/check (no revision); a passing run
                                    also completes r+1 in the same append
    resume    active|paused|blocked, rounds left -> active r+1 (refused at the cap)
    clear     any                -> tombstone r+1
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal, assert_never

from engine.checks.types import CheckRun, check_problem
from engine.errors import CorruptState
from engine.events import GoalChange, GoalCheck, SessionEvent
from engine.goal.types import (
    GoalBlocked,
    GoalRef,
    GoalSnapshot,
    GoalTombstone,
)
from engine.projections import apply_goal_event as _apply_snapshot_event

GoalRefusalCode = Literal[
    "stale-revision",
    "no-goal",
    "goal-exists",
    "goal-complete",
    "wrong-phase",
    "no-capacity",
    "empty-objective",
    "invalid-max-rounds",
    "invalid-schedule",
    "invalid-budget",
    "task-goal",
    "not-allowed",
    "invalid-checks",
    "checks-failed",
]

# One fixed text per code, so tests check codes and the owner always reads the same words.
REFUSAL_TEXT: dict[GoalRefusalCode, str] = {
    "stale-revision": "the goal changed since this was drawn (stale revision); nothing was changed",
    "no-goal": "there is no goal in this session",
    "goal-exists": "a goal is already set in this session; complete or clear it first",
    "goal-complete": "the goal is complete; create a new one instead",
    "wrong-phase": "that is not possible in the goal's current phase",
    "no-capacity": "no rounds remain: raise the cap first",
    "empty-objective": "the objective is empty",
    "invalid-max-rounds": "max rounds must be a whole number of at least 1",
    "invalid-schedule": "the schedule must be a whole number of seconds, at least 1",
    "invalid-budget": "the token budget must be a whole number of tokens, at least 1",
    "task-goal": "a task goal is a label and cannot run rounds",
    "not-allowed": "an autonomous goal round may only complete or block the goal",
    "invalid-checks": "a check is one non-empty line of at most 1000 characters, at most 20 checks",
    "checks-failed": "the goal's checks failed, so the goal stays active; fix the cause and "
    "report complete again",
}


@dataclass(frozen=True, slots=True)
class GoalRefusal:
    """A refused goal command: a stable ``code`` and its fixed text."""

    code: GoalRefusalCode
    message: str

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


def refusal(code: GoalRefusalCode) -> GoalRefusal:
    """The refusal for ``code`` with its fixed text."""
    return GoalRefusal(code=code, message=REFUSAL_TEXT[code])


@dataclass(frozen=True, slots=True)
class GoalState:
    """The goal fold: the current goal, how many goals this session has created, and the
    last check run of the current goal (docs/checks.md)."""

    goal: GoalSnapshot | None = None
    created: int = 0
    last_check: GoalCheck | None = None


def empty_goal_state() -> GoalState:
    """The state before any goal event."""
    return GoalState()


def check_goal_snapshot(snapshot: GoalSnapshot) -> list[str]:
    """The invariants a stored snapshot must hold; ``[]`` when it is sound."""
    problems: list[str] = []
    if snapshot.revision < 1:
        problems.append("revision below 1")
    if snapshot.max_goal_rounds < 1:
        problems.append("max_goal_rounds below 1")
    if snapshot.rounds_started < 0:
        problems.append("negative rounds_started")
    if (snapshot.phase == "blocked") != (snapshot.blocked is not None):
        problems.append("blocked must be set in phase blocked and only there")
    if not snapshot.objective.strip():
        problems.append("empty objective")
    if snapshot.token_budget is not None and snapshot.token_budget < 1:
        problems.append("token_budget below 1")
    if check_problem(snapshot.checks) is not None:
        problems.append(f"checks: {check_problem(snapshot.checks)}")
    return problems


def apply_goal_event(state: GoalState, event: SessionEvent) -> GoalState:
    """One step of the goal fold; raises ``CorruptState`` on a goal event that cannot be."""
    if isinstance(event, GoalCheck):
        if state.goal is None or state.goal.id != event.goal_id:
            return state  # a late run of a replaced or cleared goal
        return GoalState(goal=state.goal, created=state.created, last_check=event)
    if isinstance(event, GoalChange):
        if (event.snapshot is None) == (event.tombstone is None):
            raise CorruptState("goal/change must carry exactly one of snapshot and tombstone")
        if event.snapshot is not None:
            problems = check_goal_snapshot(event.snapshot)
            if problems:
                raise CorruptState(f"goal {event.snapshot.id}: {'; '.join(problems)}")
        created = state.created + (
            1 if event.snapshot is not None and event.snapshot.revision == 1 else 0
        )
        goal = _apply_snapshot_event(state.goal, event)
        last = state.last_check if goal is not None and state.last_check is not None else None
        if last is not None and goal is not None and last.goal_id != goal.id:
            last = None
        return GoalState(goal=goal, created=created, last_check=last)
    goal = _apply_snapshot_event(state.goal, event)
    if goal is state.goal:
        return state
    return GoalState(goal=goal, created=state.created, last_check=state.last_check)


def fold_goal(events: Iterable[SessionEvent]) -> GoalState:
    """Replay a whole log from empty."""
    state = empty_goal_state()
    for event in events:
        state = apply_goal_event(state, event)
    return state


def goal_id_for(session_id: str, generation: int) -> str:
    """The id of the session's ``generation``-th goal (0-based).

    Deterministic on purpose: two processes creating a goal from the same log state mint the same
    id at revision 1, so the event log's compare-and-set lets exactly one of them win.
    """
    return uuid.uuid5(uuid.NAMESPACE_URL, f"plangate:goal:{session_id}:{generation}").hex


# --- commands ------------------------------------------------------------------------------


class _Unchanged:
    """Sentinel type: an edit that leaves a field as it is."""

    def __repr__(self) -> str:
        return "UNCHANGED"


UNCHANGED = _Unchanged()


@dataclass(frozen=True, slots=True)
class CreateGoal:
    objective: str
    max_rounds: int | None = None
    source: Literal["user", "model"] = "user"
    schedule_s: int | None = None
    token_budget: int | None = None
    checks: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class EditGoal:
    ref: GoalRef
    objective: str | None = None
    max_rounds: int | None = None
    schedule_s: int | _Unchanged | None = UNCHANGED
    token_budget: int | _Unchanged | None = UNCHANGED
    checks: tuple[str, ...] | _Unchanged = UNCHANGED


@dataclass(frozen=True, slots=True)
class PauseGoal:
    ref: GoalRef


@dataclass(frozen=True, slots=True)
class BlockGoal:
    ref: GoalRef
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class CompleteGoal:
    ref: GoalRef


@dataclass(frozen=True, slots=True)
class CheckedComplete:
    """The model's "complete" on a goal with checks, with plangate's run of them: recorded
    as ``goal/check``; a passing run of exactly the goal's checks also completes it."""

    ref: GoalRef
    run: CheckRun


@dataclass(frozen=True, slots=True)
class ResumeGoal:
    ref: GoalRef


@dataclass(frozen=True, slots=True)
class ClearGoal:
    ref: GoalRef


@dataclass(frozen=True, slots=True)
class SetTaskGoal:
    """A started plan task's criteria as the session's label goal (``source: task``)."""

    task_id: str
    title: str
    criteria: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ClearTaskGoal:
    """Clear the task goal, if the session's goal is one (a user goal stays)."""


GoalCommand = (
    CreateGoal
    | EditGoal
    | PauseGoal
    | BlockGoal
    | CompleteGoal
    | CheckedComplete
    | ResumeGoal
    | ClearGoal
    | SetTaskGoal
    | ClearTaskGoal
)


@dataclass(frozen=True, slots=True)
class GoalStep:
    """What a command does: the events to append (possibly none) and the state after them."""

    state: GoalState
    events: list[SessionEvent] = field(default_factory=list)

    @property
    def goal(self) -> GoalSnapshot | None:
        return self.state.goal


def _is_live_user_goal(goal: GoalSnapshot | None) -> bool:
    return goal is not None and goal.source != "task" and goal.phase != "complete"


def _valid_schedule(value: int | None) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 1)


def _valid_max(value: int | None) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 1)


def _apply(state: GoalState, events: list[SessionEvent]) -> GoalStep:
    new = state
    for event in events:
        new = apply_goal_event(new, event)
    return GoalStep(state=new, events=events)


def _create_events(
    state: GoalState,
    *,
    session_id: str,
    objective: str,
    max_rounds: int,
    source: Literal["user", "model", "task"],
    schedule_s: int | None,
    now: float,
    token_budget: int | None = None,
    checks: tuple[str, ...] = (),
) -> list[SessionEvent]:
    events: list[SessionEvent] = []
    if state.goal is not None:
        # Replacing a task or complete goal tombstones it in the same append, so a racing
        # mutation of the old goal (its revision r+1) conflicts instead of landing after.
        events.append(
            GoalChange(tombstone=GoalTombstone(id=state.goal.id, revision=state.goal.revision + 1))
        )
    snapshot = GoalSnapshot(
        id=goal_id_for(session_id, state.created),
        revision=1,
        objective=objective,
        phase="active",
        max_goal_rounds=max_rounds,
        rounds_started=0,
        source=source,
        schedule_s=schedule_s,
        token_budget=token_budget,
        checks=checks,
        created_at=now,
        updated_at=now,
    )
    events.append(GoalChange(snapshot=snapshot))
    return events


def _revise(goal: GoalSnapshot, now: float, **changes: object) -> list[SessionEvent]:
    snapshot = goal.model_copy(update={**changes, "revision": goal.revision + 1, "updated_at": now})
    return [GoalChange(snapshot=snapshot)]


def task_objective(title: str, criteria: Iterable[str]) -> str:
    """A task goal's objective: the title, then the acceptance criteria as bullets."""
    lines = [title.strip() or "task"]
    lines.extend(f"- {c.strip()}" for c in criteria if c.strip())
    return "\n".join(lines)


def decide(
    state: GoalState,
    command: GoalCommand,
    *,
    session_id: str,
    now: float,
    default_max_rounds: int,
) -> GoalStep | GoalRefusal:
    """Apply one command to ``state``: the events to append, or why not. Pure."""
    goal = state.goal
    match command:
        case CreateGoal():
            objective = command.objective.strip()
            if not objective:
                return refusal("empty-objective")
            if not _valid_max(command.max_rounds):
                return refusal("invalid-max-rounds")
            if not _valid_schedule(command.schedule_s):
                return refusal("invalid-schedule")
            if not _valid_max(command.token_budget):
                return refusal("invalid-budget")
            if check_problem(command.checks) is not None:
                return refusal("invalid-checks")
            if _is_live_user_goal(goal):
                return refusal("goal-exists")
            return _apply(
                state,
                _create_events(
                    state,
                    session_id=session_id,
                    objective=objective,
                    max_rounds=command.max_rounds or default_max_rounds,
                    source=command.source,
                    schedule_s=command.schedule_s,
                    now=now,
                    token_budget=command.token_budget,
                    checks=tuple(c.strip() for c in command.checks),
                ),
            )
        case SetTaskGoal():
            objective = task_objective(command.title, command.criteria)
            if _is_live_user_goal(goal):
                return GoalStep(state=state)  # a live user goal wins; the task is no label
            if goal is not None and goal.source == "task" and goal.phase != "complete":
                if goal.objective == objective:
                    return GoalStep(state=state)
                return _apply(state, _revise(goal, now, objective=objective))
            return _apply(
                state,
                _create_events(
                    state,
                    session_id=session_id,
                    objective=objective,
                    max_rounds=default_max_rounds,
                    source="task",
                    schedule_s=None,
                    now=now,
                ),
            )
        case ClearTaskGoal():
            if goal is None or goal.source != "task":
                return GoalStep(state=state)
            tomb = GoalTombstone(id=goal.id, revision=goal.revision + 1)
            return _apply(state, [GoalChange(tombstone=tomb)])
        case (
            EditGoal()
            | PauseGoal()
            | BlockGoal()
            | CompleteGoal()
            | CheckedComplete()
            | ResumeGoal()
            | ClearGoal()
        ):
            if goal is None or goal.ref != command.ref:
                return refusal("stale-revision")
            return _decide_on_current(goal, state, command, now=now)
        case _:
            assert_never(command)


def _decide_on_current(
    goal: GoalSnapshot,
    state: GoalState,
    command: EditGoal
    | PauseGoal
    | BlockGoal
    | CompleteGoal
    | CheckedComplete
    | ResumeGoal
    | ClearGoal,
    *,
    now: float,
) -> GoalStep | GoalRefusal:
    phase = goal.phase
    match command:
        case ClearGoal():
            tomb = GoalTombstone(id=goal.id, revision=goal.revision + 1)
            return _apply(state, [GoalChange(tombstone=tomb)])
        case EditGoal():
            if phase == "complete":
                return refusal("goal-complete")
            changes: dict[str, object] = {}
            if command.objective is not None:
                objective = command.objective.strip()
                if not objective:
                    return refusal("empty-objective")
                changes["objective"] = objective
            if command.max_rounds is not None:
                if not _valid_max(command.max_rounds):
                    return refusal("invalid-max-rounds")
                changes["max_goal_rounds"] = command.max_rounds
            if not isinstance(command.schedule_s, _Unchanged):
                if not _valid_schedule(command.schedule_s):
                    return refusal("invalid-schedule")
                changes["schedule_s"] = command.schedule_s
            if not isinstance(command.token_budget, _Unchanged):
                if not _valid_max(command.token_budget):
                    return refusal("invalid-budget")
                changes["token_budget"] = command.token_budget
            if not isinstance(command.checks, _Unchanged):
                if check_problem(command.checks) is not None:
                    return refusal("invalid-checks")
                changes["checks"] = tuple(c.strip() for c in command.checks)
            return _apply(state, _revise(goal, now, **changes))
        case PauseGoal():
            if phase != "active":
                return refusal("goal-complete" if phase == "complete" else "wrong-phase")
            return _apply(state, _revise(goal, now, phase="paused"))
        case BlockGoal():
            if phase != "active":
                return refusal("goal-complete" if phase == "complete" else "wrong-phase")
            blocked = GoalBlocked(code=command.code, message=command.message)
            return _apply(state, _revise(goal, now, phase="blocked", blocked=blocked))
        case CompleteGoal():
            if phase == "complete":
                return refusal("goal-complete")
            return _apply(state, _revise(goal, now, phase="complete", blocked=None))
        case CheckedComplete():
            if phase == "complete":
                return refusal("goal-complete")
            ran = [r.command for r in command.run.results] + command.run.not_run
            # Only a run of exactly the goal's checks counts; an edit meanwhile made it stale.
            passed = command.run.passed and ran == list(goal.checks)
            check = GoalCheck(
                goal_id=goal.id, revision=goal.revision, run=command.run, passed=passed
            )
            events: list[SessionEvent] = [check]
            if passed:
                events += _revise(goal, now, phase="complete", blocked=None)
            return _apply(state, events)
        case ResumeGoal():
            if phase == "complete":
                return refusal("goal-complete")
            if goal.source == "task":
                return refusal("task-goal")
            if goal.rounds_left <= 0:
                return refusal("no-capacity")
            return _apply(state, _revise(goal, now, phase="active", blocked=None))
        case _:
            assert_never(command)


__all__ = [
    "REFUSAL_TEXT",
    "UNCHANGED",
    "BlockGoal",
    "CheckedComplete",
    "ClearGoal",
    "ClearTaskGoal",
    "CompleteGoal",
    "CreateGoal",
    "EditGoal",
    "GoalCommand",
    "GoalRefusal",
    "GoalRefusalCode",
    "GoalState",
    "GoalStep",
    "PauseGoal",
    "ResumeGoal",
    "SetTaskGoal",
    "apply_goal_event",
    "check_goal_snapshot",
    "decide",
    "empty_goal_state",
    "fold_goal",
    "goal_id_for",
    "refusal",
    "task_objective",
]
