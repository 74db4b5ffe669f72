"""RoundDriver: keeps an armed goal working, one round at a time (docs/goals.md).

Per session there is at most one attempt, which moves queued -> claimed -> submitted:

    tick (scheduler) -> queued: wait until the target is idle (RoundTarget.is_idle; woken by
        notify_idle) -> claimed: reserve {goal id, revision, rounds_started + 1}; at the cap
        write blocked {round-limit} instead -> submitted: RoundTarget.submit_round(prompt,
        source) -> settled when the target is idle again and the round was admitted or its turn
        ended (it may be refused before admission), or the reservation went stale, or the goal
        was disarmed.

Ticks come from the one :class:`engine.scheduler.Scheduler`: a continuous goal gets a "now" job
after each settled round; a goal with ``schedule_s`` gets an interval job (coalesced, one
instance), and a tick while an attempt exists is dropped. Jobs exist only while the goal is armed.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

from engine.checks.report import failure_report
from engine.events import GoalCheck, GoalRoundSource
from engine.goal.fold import GoalRefusal
from engine.goal.service import GoalService
from engine.goal.types import GoalSnapshot
from engine.plan.service import PlanChange
from engine.plan.types import PlanState, is_editing
from engine.scheduler import Scheduler
from engine.tasks import BackgroundTasks

log = logging.getLogger("plangate.goal.driver")

# Turn outcomes after which nobody knows how far the round got: the goal is disarmed.
UNCERTAIN_OUTCOMES = frozenset({"cancelled", "failed", "interrupted"})


class RoundTarget(Protocol):
    """The agent as the driver sees it (the agent registry implements it)."""

    def is_idle(self, session_id: str) -> bool:
        """No running turn and no queued human message."""
        ...

    async def submit_round(self, session_id: str, text: str, source: GoalRoundSource) -> None:
        """Queue the round prompt as a ``user/message`` with goal source."""
        ...

    def listen_idle(self, listener: IdleListener) -> None:
        """Call ``listener.notify_idle`` whenever a session's turn ends or it goes idle."""
        ...


class IdleListener(Protocol):
    """What the target wakes (the driver)."""

    def notify_idle(
        self, session_id: str, *, outcome: str | None = None, goal_id: str | None = None
    ) -> object: ...


class PlanWatch(Protocol):
    """The plan service as the driver reads it: no round is dispatched while Editing."""

    async def state(self, session_id: str) -> PlanState:
        """The plan's derived state now."""
        ...

    def add_listener(self, listener: Callable[[PlanChange], Awaitable[None]]) -> None:
        """Be told after every committed plan change."""
        ...


def round_prompt(goal: GoalSnapshot, round_no: int, last_check: GoalCheck | None = None) -> str:
    """The text of a goal round: the JSON-quoted objective, round/max and how to verify; with
    checks, which must pass, and the output of the last failed run (docs/checks.md)."""
    text = (
        f"<goal_round>\nGoal objective: {json.dumps(goal.objective, ensure_ascii=False)}\n"
        f"Round {round_no}/{goal.max_goal_rounds}.\n"
        "Continue working toward the objective. Verify progress against the current workspace, "
        "tool results and durable state (plan, todos) rather than assuming earlier rounds "
        'succeeded. When the objective is met, call update_goal with status "complete"; if '
        'you cannot make progress without help, call update_goal with status "blocked" and '
        "a reason.\n"
    )
    if goal.checks:
        listed = ", ".join(f"`{c}`" for c in goal.checks)
        text += f"The goal is done only when these checks pass (plangate runs them): {listed}.\n"
    if last_check is not None and last_check.goal_id == goal.id and not last_check.passed:
        text += (
            "The last time the goal was reported complete its checks failed, so it stayed "
            f"active. plangate ran:\n{failure_report(last_check.run)}\n"
        )
    return text + "</goal_round>"


@dataclass(slots=True)
class _Attempt:
    state: Literal["queued", "claimed", "submitted"] = "queued"
    source: GoalRoundSource | None = None
    task: asyncio.Task[None] | None = None
    # A turn ended after the round was submitted: the round ran, or was refused before its
    # admission (the agent validates a round before logging its user/message).
    turn_ended: bool = False


@dataclass(slots=True)
class _Session:
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    attempt: _Attempt | None = None
    # What the scheduler holds for this session: None, "soon" or the interval in seconds.
    job: Literal["soon"] | int | None = None


class RoundDriver:
    """Dispatches goal rounds to a :class:`RoundTarget` through one :class:`Scheduler`.

    Construct it once per process; it listens to ``goals`` for changes and arm/disarm. The
    agent calls :meth:`notify_idle` when a turn ends and :meth:`validate_round` before each step
    of a goal-round turn.
    """

    def __init__(
        self,
        goals: GoalService,
        target: RoundTarget,
        scheduler: Scheduler,
        *,
        plans: PlanWatch | None = None,
        hold: Callable[[str], Awaitable[bool]] | None = None,
        after_round: Callable[[str, GoalRoundSource], Awaitable[None]] | None = None,
    ) -> None:
        """``plans``: no round is dispatched while the plan is being edited, and a round held
        back for that goes once planning ends (docs/goals.md). ``hold(session_id)`` True keeps
        a queued round waiting for any other reason; call :meth:`notify_idle` when it goes
        away. ``after_round(session_id, source)`` runs once an admitted round has ended,
        before the next one is asked for (the no-progress detector).

        The driver subscribes itself to the goals, the target's idle signal and the plans."""
        self._goals = goals
        self._target = target
        self._scheduler = scheduler
        self._plans = plans
        self._hold = hold
        self._after_round = after_round
        self._sessions: dict[str, _Session] = {}
        self._background = BackgroundTasks(log, event="disarm_failed")
        goals.add_listener(self._on_goal_change)
        target.listen_idle(self)
        if plans is not None:
            plans.add_listener(self._on_plan_change)

    async def _held(self, session_id: str) -> bool:
        """A queued round waits: the plan is being edited, or ``hold`` says so."""
        if self._plans is not None and is_editing(await self._plans.state(session_id)):
            return True
        return self._hold is not None and await self._hold(session_id)

    async def _on_plan_change(self, change: PlanChange) -> None:
        if change.after is None or change.after.status == "Active":
            # Planning ended: a goal round held back while Editing may go now.
            self.notify_idle(change.session_id)

    # --- the agent's side -----------------------------------------------------------------

    def notify_idle(
        self, session_id: str, *, outcome: str | None = None, goal_id: str | None = None
    ) -> None:
        """A turn ended or the session went idle: wake the session's attempt.

        ``outcome`` is how a goal round's turn ended (as in ``turn/end``) and ``goal_id`` the
        goal it was a round of (``None`` for any other turn). A round that ended failed or
        interrupted disarms its goal, also when the goal was edited meanwhile and a newer
        round is already queued; a goal that replaced it (another id) is left armed.
        """
        session = self._session(session_id)
        attempt = session.attempt
        if attempt is not None and attempt.state == "submitted":
            attempt.turn_ended = True
        current = self._goals.peek(session_id)
        same_goal = goal_id is None or (current is not None and current.id == goal_id)
        if outcome in UNCERTAIN_OUTCOMES and same_goal:
            failed = self._round_failed(session_id, f"turn {outcome}")
            self._background.spawn(failed, name=f"round_failed:{session_id}")
        session.wake.set()

    async def validate_round(self, session_id: str, source: GoalRoundSource) -> bool:
        """The agent's pre-step check (see :meth:`GoalService.validate_round`)."""
        return await self._goals.validate_round(session_id, source)

    def has_attempt(self, session_id: str) -> bool:
        """Whether a round is queued, claimed or submitted for the session."""
        return self._session(session_id).attempt is not None

    async def close(self) -> None:
        """Cancel every job and attempt (the scheduler itself is the caller's to shut down)."""
        for session_id, session in self._sessions.items():
            self._scheduler.cancel(_job_id(session_id))
            session.job = None
            if session.attempt is not None and session.attempt.task is not None:
                session.attempt.task.cancel()
        tasks = [
            s.attempt.task
            for s in self._sessions.values()
            if s.attempt is not None and s.attempt.task is not None
        ]
        await asyncio.gather(*tasks, return_exceptions=True)

    # --- scheduling ----------------------------------------------------------------------

    def _session(self, session_id: str) -> _Session:
        session = self._sessions.get(session_id)
        if session is None:
            session = self._sessions[session_id] = _Session()
        return session

    async def _on_goal_change(self, session_id: str, goal: GoalSnapshot | None) -> None:
        self._sync_jobs(session_id)

    def _sync_jobs(self, session_id: str) -> None:
        session = self._session(session_id)
        goal = self._goals.peek(session_id)
        job_id = _job_id(session_id)
        if goal is None or not self._goals.is_armed(session_id):
            if session.job is not None:
                self._scheduler.cancel(job_id)
                session.job = None
            session.wake.set()  # a queued attempt re-checks and drops itself
            return
        if goal.schedule_s is not None:
            if session.job != goal.schedule_s:
                self._scheduler.run_every(job_id, goal.schedule_s, self._tick_fn(session_id))
                session.job = goal.schedule_s
            return
        if session.job not in (None, "soon"):
            self._scheduler.cancel(job_id)
            session.job = None
        if session.attempt is None:
            self._scheduler.run_soon(job_id, self._tick_fn(session_id))
            session.job = "soon"

    def _tick_fn(self, session_id: str) -> _Tick:
        return _Tick(self._tick, session_id)

    async def _tick(self, session_id: str) -> None:
        session = self._session(session_id)
        if session.job == "soon":
            session.job = None  # a date job is gone once it fired
        if session.attempt is not None:
            log.info("plangate.goal.driver.tick_dropped session=%s", session_id)
            return
        if not self._goals.is_armed(session_id):
            return
        attempt = _Attempt()
        session.attempt = attempt
        attempt.task = asyncio.get_running_loop().create_task(self._run_attempt(session_id))

    # --- one attempt ---------------------------------------------------------------------

    async def _wait_idle(self, session_id: str) -> bool:
        """Wait until the target is idle; False when the goal was disarmed meanwhile."""
        session = self._session(session_id)
        while True:
            session.wake.clear()
            if not self._goals.is_armed(session_id):
                return False
            if self._target.is_idle(session_id) and not await self._held(session_id):
                return True
            await session.wake.wait()

    async def _run_attempt(self, session_id: str) -> None:
        session = self._session(session_id)
        attempt = session.attempt
        assert attempt is not None
        try:
            if not await self._wait_idle(session_id):
                return
            goal = await self._goals.get(session_id)
            if goal is None or not self._goals.is_armed(session_id):
                return
            attempt.state = "claimed"
            if goal.rounds_started >= goal.max_goal_rounds:
                # Reserving round N+1 would pass the cap: the goal ends blocked, no dispatch.
                result = await self._goals.block(
                    session_id,
                    goal.ref,
                    code="round-limit",
                    message=f"all {goal.max_goal_rounds} rounds used; raise the cap to go on",
                )
                if isinstance(result, GoalRefusal):
                    log.info("plangate.goal.driver.round_limit_refused code=%s", result.code)
                return
            source = GoalRoundSource(
                goal_id=goal.id, revision=goal.revision, round=goal.rounds_started + 1
            )
            attempt.source = source
            prompt = round_prompt(goal, source.round, await self._goals.last_check(session_id))
            await self._target.submit_round(session_id, prompt, source)
            attempt.state = "submitted"
            await self._wait_settled(session_id, source, attempt)
            if self._after_round is not None:
                await self._after_round(session_id, source)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # worker boundary: an unclassified failure never re-runs
            log.warning("plangate.goal.driver.attempt_failed error=%s", type(exc).__name__)
            await self._round_failed(session_id, type(exc).__name__)
        finally:
            if session.attempt is attempt:
                session.attempt = None
        self._after_attempt(session_id)

    async def _wait_settled(
        self, session_id: str, source: GoalRoundSource, attempt: _Attempt
    ) -> None:
        session = self._session(session_id)
        while True:
            session.wake.clear()
            goal = await self._goals.get(session_id)
            current = (
                goal is not None
                and goal.id == source.goal_id
                and goal.revision == source.revision
                and self._goals.is_armed(session_id)
            )
            admitted = (
                goal is not None
                and goal.id == source.goal_id
                and (goal.rounds_started >= source.round)
            )
            if not current:
                return  # the round's own pre-step will end it; nothing more to wait for here
            # A round refused before admission never counts, so its turn's end settles it too.
            if (admitted or attempt.turn_ended) and self._target.is_idle(session_id):
                return
            await session.wake.wait()

    async def _round_failed(self, session_id: str, why: str) -> None:
        # The one rule: after a failed round nobody knows how far it got, so the goal stops
        # here (disarmed, no new revision) and waits for the owner's Resume.
        log.info("plangate.goal.driver.round_failed session=%s why=%s", session_id, why)
        await self._goals.disarm(session_id)

    def _after_attempt(self, session_id: str) -> None:
        # A continuous goal asks for the next round right away; a scheduled one waits for its
        # next tick.
        goal = self._goals.peek(session_id)
        if goal is not None and goal.schedule_s is None:
            self._sync_jobs(session_id)


class _Tick:
    """A scheduler job for one session (a callable object, so job ids stay readable)."""

    def __init__(self, tick: Callable[[str], Awaitable[None]], session_id: str) -> None:
        self._tick = tick
        self._session_id = session_id

    async def __call__(self) -> None:
        await self._tick(self._session_id)


def _job_id(session_id: str) -> str:
    return f"goal-round:{session_id}"


__all__ = ["UNCERTAIN_OUTCOMES", "RoundDriver", "RoundTarget", "round_prompt"]
