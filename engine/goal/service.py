"""GoalService: the goal machine's async shell (docs/goals.md).

Each verb refreshes the session's goal fold from the log, decides with the pure
:func:`engine.goal.fold.decide` under a per-session lock, appends, then notifies listeners. The
log's ``AppendConflict`` on ``(goal id, revision)`` is the compare-and-set, so two services (two
processes) on one database still let exactly one of two racing mutations win; the loser gets the
``stale-revision`` refusal and nothing changes.

Activation ("armed") is process-local and never logged: a new service starts disarmed, resume and
an owner's ``/goal <objective>`` arm, and session start or an uncertain failure disarm.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Literal

from engine.approval.policy import ApprovalView
from engine.checks.types import CheckRun
from engine.errors import AppendConflict
from engine.events import GoalCheck, GoalRoundSource, MessageSource
from engine.goal.fold import (
    UNCHANGED,
    BlockGoal,
    CheckedComplete,
    ClearGoal,
    ClearTaskGoal,
    CompleteGoal,
    CreateGoal,
    EditGoal,
    GoalCommand,
    GoalRefusal,
    GoalState,
    GoalStep,
    PauseGoal,
    ResumeGoal,
    SetTaskGoal,
    _Unchanged,
    apply_goal_event,
    decide,
    empty_goal_state,
    refusal,
)
from engine.goal.types import NEEDS_APPROVAL, GoalRef, GoalSnapshot, GoalTombstone
from engine.ports import Clock, EventLog

log = logging.getLogger("plangate.goal.service")

# Called after every committed change and every arm/disarm: (session_id, current goal or None).
GoalListener = Callable[[str, GoalSnapshot | None], Awaitable[None] | None]

DEFAULT_MAX_GOAL_ROUNDS = 20
# The goal fold reads snapshots and the goal-source messages that admit rounds, nothing else.
GOAL_EVENT_TYPES = frozenset({"goal/change", "goal/check", "user/message"})


class GoalService:
    """The goal verbs for every session, over one :class:`engine.ports.EventLog`.

    Also implements :class:`engine.plan.criteria.TaskCriteriaSink` (``set_task_criteria``,
    ``clear_task_criteria``).
    """

    def __init__(
        self,
        log: EventLog,
        *,
        clock: Clock = time.time,
        default_max_rounds: int = DEFAULT_MAX_GOAL_ROUNDS,
    ) -> None:
        self._log = log
        self._clock = clock
        self.default_max_rounds = default_max_rounds
        self._cache: dict[str, tuple[int, GoalState]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._armed: dict[str, str] = {}  # session id -> armed goal id
        self._listeners: list[GoalListener] = []

    # --- reading -------------------------------------------------------------------------

    def add_listener(self, listener: GoalListener) -> None:
        """Call ``listener(session_id, goal)`` after each change and each arm/disarm."""
        self._listeners.append(listener)

    async def get(self, session_id: str) -> GoalSnapshot | None:
        """The current goal, folded from the log as it is now (other processes included)."""
        return (await self._refresh(session_id)).goal

    async def round_goal(self, session_id: str, source: GoalRoundSource) -> GoalSnapshot | None:
        """The goal a round of ``source`` worked for, while it is still the active goal
        (``None`` once it was cleared, replaced, paused, blocked or completed)."""
        goal = await self.get(session_id)
        if goal is None or goal.id != source.goal_id or goal.phase != "active":
            return None
        return goal

    async def last_check(self, session_id: str) -> GoalCheck | None:
        """The current goal's last check run (docs/checks.md), if its checks ever ran."""
        return (await self._refresh(session_id)).last_check

    def peek(self, session_id: str) -> GoalSnapshot | None:
        """The current goal as this service last read it (no IO; may lag other processes)."""
        cached = self._cache.get(session_id)
        return cached[1].goal if cached else None

    def is_armed(self, session_id: str) -> bool:
        """Whether this process may run rounds for the session's current goal."""
        goal = self.peek(session_id)
        return (
            goal is not None
            and self._armed.get(session_id) == goal.id
            and goal.phase == "active"
            and goal.source != "task"
        )

    # --- verbs ---------------------------------------------------------------------------

    async def create(
        self,
        session_id: str,
        objective: str,
        *,
        max_rounds: int | None = None,
        schedule_s: int | None = None,
        source: Literal["user", "model"] = "user",
        arm: bool = False,
        token_budget: int | None = None,
        checks: tuple[str, ...] = (),
    ) -> GoalSnapshot | GoalRefusal:
        """Create a goal at r1 with a fresh id; ``arm`` for an owner's ``/goal <objective>``;
        ``checks`` must pass before the model's "complete" stands (docs/checks.md).

        Refused (``goal-exists``) while a user or model goal that is not complete exists; a task
        goal or a complete goal is replaced.
        """
        command = CreateGoal(
            objective=objective,
            max_rounds=max_rounds,
            source=source,
            schedule_s=schedule_s,
            token_budget=token_budget,
            checks=checks,
        )
        result = await self._run(session_id, command, arm=arm)
        return self._snapshot_result(result)

    async def edit(
        self,
        session_id: str,
        ref: GoalRef,
        *,
        objective: str | None = None,
        max_rounds: int | None = None,
        schedule_s: int | _Unchanged | None = UNCHANGED,
        token_budget: int | _Unchanged | None = UNCHANGED,
        checks: tuple[str, ...] | _Unchanged = UNCHANGED,
    ) -> GoalSnapshot | GoalRefusal:
        """Change objective, cap, schedule, token budget or checks; keeps the phase (that is
        how a cap or a budget is raised: Resume then continues a blocked goal)."""
        command = EditGoal(
            ref=ref,
            objective=objective,
            max_rounds=max_rounds,
            schedule_s=schedule_s,
            token_budget=token_budget,
            checks=checks,
        )
        return self._snapshot_result(await self._run(session_id, command))

    async def pause(self, session_id: str, ref: GoalRef) -> GoalSnapshot | GoalRefusal:
        """active -> paused."""
        return self._snapshot_result(await self._run(session_id, PauseGoal(ref=ref)))

    async def block(
        self, session_id: str, ref: GoalRef, *, code: str, message: str
    ) -> GoalSnapshot | GoalRefusal:
        """active -> blocked {code, message}."""
        command = BlockGoal(ref=ref, code=code, message=message)
        return self._snapshot_result(await self._run(session_id, command))

    async def block_round(
        self, session_id: str, source: GoalRoundSource, *, code: str, message: str
    ) -> None:
        """Block the goal a round of ``source`` worked for, while it is still active (the
        stuck detector stopped the round); a goal changed meanwhile is left alone."""
        goal = await self.round_goal(session_id, source)
        if goal is None:
            return
        result = await self.block(session_id, goal.ref, code=code, message=message)
        if isinstance(result, GoalRefusal):
            log.info("plangate.goal.service.block_round_refused code=%s", result.code)

    async def approval_needed(
        self, session_id: str, source: MessageSource, view: ApprovalView
    ) -> None:
        """A call in an unattended turn needed a person's approval and was denied.

        A goal round never waits on a person: its goal is blocked ``needs-approval`` until the
        owner allows the call (the Allow button) and resumes it. Any other unattended turn's
        denial leaves the goal alone."""
        if not isinstance(source, GoalRoundSource):
            return
        what = view.command or view.tool
        if view.why == "network":
            what += " (with the network)"
        await self.block_round(
            session_id,
            source,
            code=NEEDS_APPROVAL,
            message=f"{view.tool} needs your approval: {what}",
        )

    async def complete(self, session_id: str, ref: GoalRef) -> GoalSnapshot | GoalRefusal:
        """active|paused|blocked -> complete."""
        return self._snapshot_result(await self._run(session_id, CompleteGoal(ref=ref)))

    async def complete_checked(
        self, session_id: str, ref: GoalRef, run: CheckRun
    ) -> GoalSnapshot | GoalRefusal:
        """The model's "complete" with plangate's run of the goal's checks: the run is logged
        (``goal/check``); it completes the goal only when it passed (else ``checks-failed``,
        and the goal stays as it was)."""
        result = await self._run(session_id, CheckedComplete(ref=ref, run=run))
        if isinstance(result, GoalRefusal):
            return result
        if result.goal is None or result.goal.phase != "complete":
            return refusal("checks-failed")
        return result.goal

    async def resume(self, session_id: str, ref: GoalRef) -> GoalSnapshot | GoalRefusal:
        """active|paused|blocked -> active r+1, armed; ``no-capacity`` when no rounds remain."""
        return self._snapshot_result(await self._run(session_id, ResumeGoal(ref=ref), arm=True))

    async def clear(self, session_id: str, ref: GoalRef) -> GoalTombstone | GoalRefusal:
        """Any goal -> tombstone at r+1."""
        result = await self._run(session_id, ClearGoal(ref=ref))
        if isinstance(result, GoalRefusal):
            return result
        return GoalTombstone(id=ref.id, revision=ref.revision + 1)

    async def arm(self, session_id: str, ref: GoalRef) -> GoalSnapshot | GoalRefusal:
        """The Start button: arm the current active goal without a new revision."""
        async with self._lock(session_id):
            goal = (await self._refresh(session_id)).goal
            if goal is None or goal.ref != ref:
                return refusal("stale-revision")
            if goal.source == "task":
                return refusal("task-goal")
            if goal.phase != "active":
                return refusal("goal-complete" if goal.phase == "complete" else "wrong-phase")
            if goal.rounds_left <= 0:
                return refusal("no-capacity")
            self._armed[session_id] = goal.id
        await self._notify(session_id, goal)
        return goal

    async def disarm(self, session_id: str) -> None:
        """Stop autonomous rounds here (no new revision): /stop, session start, a failure."""
        if self._armed.pop(session_id, None) is not None:
            await self._notify(session_id, self.peek(session_id))

    async def on_session_start(self, session_id: str) -> None:
        """A session (re)started in this process: it comes up disarmed."""
        await self.disarm(session_id)

    async def validate_round(self, session_id: str, source: GoalRoundSource) -> bool:
        """The agent's pre-step check: is this round's reservation still current and armed?

        True only when id and revision are the live goal's, the goal is active and armed here,
        and ``source.round`` is the round being admitted or the one already admitted.
        """
        goal = await self.get(session_id)
        if goal is None or not self.is_armed(session_id):
            return False
        if goal.id != source.goal_id or goal.revision != source.revision:
            return False
        if source.round > goal.max_goal_rounds:
            return False
        return source.round in (goal.rounds_started, goal.rounds_started + 1)

    # --- TaskCriteriaSink ------------------------------------------------------------------

    async def set_task_criteria(
        self, session_id: str, *, task_id: str, title: str, criteria: list[str]
    ) -> None:
        """Show a started task's criteria as the session goal (``source: task``).

        A no-op while a user or model goal that is not complete exists.
        """
        command = SetTaskGoal(task_id=task_id, title=title, criteria=tuple(criteria))
        result = await self._run(session_id, command)
        if isinstance(result, GoalRefusal):
            log.info("plangate.goal.service.task_criteria_skipped code=%s", result.code)

    async def clear_task_criteria(self, session_id: str) -> None:
        """Clear the task goal, if that is what the session's goal is; a user goal stays."""
        await self._run(session_id, ClearTaskGoal())

    # --- internals ------------------------------------------------------------------------

    def _lock(self, session_id: str) -> asyncio.Lock:
        lock = self._locks.get(session_id)
        if lock is None:
            lock = self._locks[session_id] = asyncio.Lock()
        return lock

    async def _refresh(self, session_id: str) -> GoalState:
        last_seq, state = self._cache.get(session_id, (0, empty_goal_state()))
        for stored in await self._log.read(session_id, after_seq=last_seq, types=GOAL_EVENT_TYPES):
            state = apply_goal_event(state, stored.event)
            last_seq = stored.seq
        self._cache[session_id] = (last_seq, state)
        return state

    async def _run(
        self, session_id: str, command: GoalCommand, *, arm: bool = False
    ) -> GoalStep | GoalRefusal:
        async with self._lock(session_id):
            state = await self._refresh(session_id)
            result = decide(
                state,
                command,
                session_id=session_id,
                now=self._clock(),
                default_max_rounds=self.default_max_rounds,
            )
            if isinstance(result, GoalRefusal) or not result.events:
                return result
            try:
                await self._log.append(session_id, result.events)
            except AppendConflict:
                # Another writer took this revision first: our ref is stale and nothing of
                # ours was committed.
                await self._refresh(session_id)
                return refusal("stale-revision")
            await self._refresh(session_id)
            goal = result.goal
            if arm and goal is not None:
                self._armed[session_id] = goal.id
            elif goal is None or goal.phase != "active" or goal.id != self._armed.get(session_id):
                self._armed.pop(session_id, None)
        await self._notify(session_id, goal)
        return result

    @staticmethod
    def _snapshot_result(result: GoalStep | GoalRefusal) -> GoalSnapshot | GoalRefusal:
        if isinstance(result, GoalRefusal):
            return result
        if result.goal is None:  # only task commands clear without a refusal
            return refusal("no-goal")
        return result.goal

    async def _notify(self, session_id: str, goal: GoalSnapshot | None) -> None:
        for listener in list(self._listeners):
            try:
                outcome = listener(session_id, goal)
                if inspect.isawaitable(outcome):
                    await outcome
            except Exception as exc:  # a listener's failure must not undo a committed change
                log.warning("plangate.goal.service.listener_failed error=%s", type(exc).__name__)


if TYPE_CHECKING:
    from engine.plan.criteria import TaskCriteriaSink

    def _implements_task_criteria_sink(goals: GoalService) -> TaskCriteriaSink:
        return goals  # mypy checks that GoalService satisfies the plan's criteria port


__all__ = ["DEFAULT_MAX_GOAL_ROUNDS", "GoalListener", "GoalService"]
