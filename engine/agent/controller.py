"""Per-session controllers and their registry (docs/agent.md).

One :class:`SessionController` per session owns an inbox of queued messages, at most one
running turn (an ``asyncio.Task`` that drains the inbox) and the process-local state: the
pending plan-mode switch and the pending approval ``{revision, actor}``. Handlers never wait for
a turn: :meth:`SessionController.submit` enqueues and returns.

:class:`AgentRegistry` maps session ids to controllers and is the goal round driver's
``RoundTarget`` (``is_idle``, ``submit_round``); it tells the driver ``notify_idle`` when a
session's inbox drains.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

from engine.agent import checklist
from engine.agent.checklist import ChecklistRun, PauseReason
from engine.agent.config import AgentDeps
from engine.agent.ports import IdleListener
from engine.agent.turn import InboundMessage, StepDone, TurnResult, run_turn
from engine.approval.service import describe_timeout
from engine.errors import LeaseLost
from engine.events import (
    Attachment,
    FeedbackSource,
    GoalRoundSource,
    HumanSource,
    MessageSource,
    ProgressMade,
    RunPaused,
    SeedSource,
    is_attended,
)
from engine.goal.types import BUDGET_LIMIT, NO_PROGRESS
from engine.keys import MessageKey, PersonKey
from engine.plan.gate import PlanGateView, check_gate
from engine.plan.types import PlanPause, PlanTask
from engine.progress import workspace as workspace_snapshot
from engine.progress.rule import changes_goal, may_change_files, step_progress
from engine.progress.stuck import Step, StuckWatch, Verdict, call_record
from engine.tasks import BackgroundTasks, safe_call
from engine.text import clip
from engine.tools.base import ToolContext
from engine.tools.effects import effects_of
from engine.tools.runtime import ToolCallRequest, ToolRuntime

CHECKLIST_DONE_TEXT = "✅ The checklist is done."

_log = logging.getLogger("plangate.agent.controller")

ApprovalRequest = Literal["committed", "pending", "stale"]
# Told after every turn: (session id, the message that opened it, how it ended).
TurnListener = Callable[[str, InboundMessage, TurnResult], Awaitable[None]]
# Told when a session's work hit ``LeaseLost``: this replica no longer owns its chat.
LeaseLostListener = Callable[[str], None]


@dataclass(slots=True)
class Listeners:
    """Who hears about a session's turns: the goal driver (idle) and the cards (turn end).

    One record, shared by the registry and all its controllers. Each listener subscribes
    itself when it is built (:meth:`AgentRegistry.listen_idle`, :meth:`AgentRegistry.listen_turns`),
    so the engine is composed in one pass and no one sets a listener on the agent later."""

    idle: list[IdleListener] = field(default_factory=list)
    turn_end: list[TurnListener] = field(default_factory=list)
    lease_lost: list[LeaseLostListener] = field(default_factory=list)


# The card's line when the daily cap pauses the run (the UTC day ends at midnight).
DAILY_CAP_TEXT = "Paused: daily token cap reached (resets 00:00 UTC)"

LAPSED_TEXT = (
    "The approval lapsed: the plan changed before it took effect. "
    "The card shows the new version for review."
)


@dataclass(frozen=True, slots=True)
class PendingApproval:
    revision: int
    actor: PersonKey | None


class SessionController:
    """The agent of one session. Create through :meth:`AgentRegistry.controller`."""

    def __init__(
        self,
        session_id: str,
        deps: AgentDeps,
        runtime: ToolRuntime,
        *,
        listeners: Listeners | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.session_id = session_id
        self._deps = deps
        self._runtime = runtime
        self._listeners = listeners if listeners is not None else Listeners()
        self._clock = clock
        self._run = ChecklistRun()
        # The stuck detector over the steps of unattended work since the owner's last word.
        self._watch = StuckWatch(deps.settings.stuck)
        # The workspace digest before the next bash step (None: take one first).
        self._baseline: str | None = None
        # A turn is running now (run_turn entered and not yet returned).
        self._working = False
        # A quiet continuation's closing words, posted when the run pauses or ends.
        self._held = ""
        # The last turn asked the owner a question (ask_user) that is not answered yet.
        self._asked = False
        self._inbox: deque[InboundMessage] = deque()
        self._task: asyncio.Task[None] | None = None
        self._current: InboundMessage | None = None
        self._pending_mode: bool | None = None
        self._pending_approval: PendingApproval | None = None
        self._background = BackgroundTasks(_log, event="notify_idle_failed")
        # Set when the process shuts down: nothing new may start a turn after that.
        self.closed = False

    # --- state ----------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        """A turn is running or about to run (the drain task exists)."""
        return self._task is not None and not self._task.done()

    def is_idle(self) -> bool:
        """No running turn and no queued message (a checklist run waiting on the owner's
        answer to its question is not idle: a goal round must not go in between)."""
        return not self.busy and not self._inbox and not (self._run.armed and self._asked)

    @property
    def queued(self) -> list[InboundMessage]:
        """The messages waiting behind the running turn, oldest first."""
        return list(self._inbox)

    @property
    def pending_approval(self) -> PendingApproval | None:
        return self._pending_approval

    @property
    def pending_plan_mode(self) -> bool | None:
        return self._pending_mode

    @property
    def awaiting_answer(self) -> bool:
        """A question (``ask_user``) waits for the owner: set by the turn that asked, cleared
        by the owner's next message or ``/stop``."""
        return self._asked

    @property
    def working(self) -> bool:
        """A turn is running right now. Unlike :attr:`busy` it is False while the drain task
        closes a turn (the card is drawn from it: a stopped run never shows "Working")."""
        return self._working

    @property
    def checklist(self) -> ChecklistRun:
        """The checklist run: armed (it continues by itself), its progress, why it paused."""
        return self._run

    # --- input ----------------------------------------------------------------------------

    def submit(
        self,
        text: str,
        *,
        source: MessageSource | None = None,
        message_id: MessageKey | None = None,
        attachments: tuple[Attachment, ...] = (),
    ) -> None:
        """Queue a message and make sure a drain task runs; returns at once.

        ``message_id`` is the chat message the turn's final text replies to. After
        shutdown began the message is dropped (and logged): no turn may outlive the stores.
        """
        if self.closed:
            _log.warning("plangate.agent.controller.closed_drop session=%s", self.session_id)
            return
        source = source or HumanSource()
        if isinstance(source, HumanSource | FeedbackSource):
            # The owner spoke: a question is answered, and the stuck count starts afresh.
            self._asked = False
            self._reset_watch()
            self._new_approval_run()
        self._inbox.append(InboundMessage(text, source, message_id, attachments))
        if not self.busy:
            self._task = asyncio.create_task(self._drain(), name=f"agent:{self.session_id}")

    def request_plan_mode(self, active: bool) -> None:
        """Record a plan-mode switch to commit at the next step boundary (or the turn's end).

        Call only while :attr:`busy`; when idle the command plane commits it directly.
        """
        self._pending_mode = active

    async def request_approval(self, *, revision: int, actor: PersonKey | None) -> ApprovalRequest:
        """Approve the plan at ``revision``: pending while a turn runs, else committed now.

        While busy the batch in flight stays under Editing rules; the next step runs Active.
        When idle it commits and, on success, queues one execution turn.
        """
        if self.busy:
            self._pending_approval = PendingApproval(revision, actor)
            return "pending"
        self._pending_approval = PendingApproval(revision, actor)
        committed = await self._commit_approval(queue_execution=True)
        return "committed" if committed else "stale"

    def restore_pause(self, reason: PauseReason) -> None:
        """A new process found the checklist run stopped: keep why (read back from the log,
        not logged again), so the card says it. Only when nothing runs or is armed here."""
        if not self.busy and not self._run.armed and self._run.paused is None:
            self._run = checklist.pause(self._run, reason)

    def cancel_pending(self) -> None:
        """Forget a pending plan-mode switch and approval, uncommitted.

        Keep planning, ``/discard`` and ``/new`` call it: an approval or ``/plan`` the owner
        has since taken back must never commit later.
        """
        self._pending_mode = None
        self._pending_approval = None

    async def stop(self) -> list[InboundMessage]:
        """Cancel the running turn, kill its bash, drop and return the queued messages.

        The turn is closed with ``turn/end {cancelled}`` before this returns, and the goal is
        disarmed (as ``/stop`` does). Pending plan switches still commit.
        """
        dropped = list(self._inbox)
        self._inbox.clear()
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            # The cancellation reaches bash through the runtime; the hooks (bash's
            # kill_session) make sure its process group dies even if a layer swallowed it.
            for hook in self._deps.stop_hooks:
                await hook(self.session_id)
            try:
                await task
            except asyncio.CancelledError:
                if _cancelling(asyncio.current_task()):
                    raise  # our caller was cancelled too, not only the turn
        self._task = None
        await self._commit_pending(queue_execution=False)
        was_armed, self._run = self._run.armed, checklist.disarm(self._run)
        held, self._held = self._held, ""
        self._asked = False
        if held:  # what the stopped run last said, kept for its end
            await safe_call("reply", self._deps.channel.reply(self.session_id, held, reply_to=None))
        if was_armed:
            # The cancelled turn's redraw may have read the run as armed: draw it paused.
            await safe_call("plan_changed", self._deps.channel.plan_changed(self.session_id))
        if self._deps.goals is not None:
            await self._deps.goals.disarm(self.session_id)
        return dropped

    async def abandon(self) -> None:
        """This replica lost the session's chat (its lease): cancel the turn, kill its bash
        processes (the hooks ``/stop`` uses), drop what was queued or pending, disarm the run.

        Unlike :meth:`stop`, nothing is logged or said: the log and the chat belong to the
        replica that took the chat over (an append would raise ``LeaseLost`` anyway). No turn
        starts here afterwards.
        """
        self.closed = True
        self._inbox.clear()
        self._pending_mode = None
        self._pending_approval = None
        task = self._task
        if task is not None and not task.done():
            task.cancel()
        # Run the hooks even when no turn runs: a process must not outlive the lease.
        for hook in self._deps.stop_hooks:
            await safe_call("stop_hook", hook(self.session_id))
        if task is not None:
            try:
                await task
            except asyncio.CancelledError:
                if _cancelling(asyncio.current_task()):
                    raise
            except Exception as exc:  # the turn's own closing append may fail: the lease is gone
                _log.info("plangate.agent.controller.abandoned %s", type(exc).__name__)
        self._task = None
        self._run = checklist.disarm(self._run)
        self._held = ""
        self._asked = False

    async def run_checklist(self, prompt: str | None = None) -> None:
        """The owner's consent to run the checklist to its end (``/execute``, Resume).

        Arms the run and queues its next turn unless one is running (it continues then).
        """
        await self._arm()
        if not self.busy:
            self.submit(prompt or self._deps.settings.continue_prompt, source=SeedSource())

    async def wait_idle(self) -> None:
        """Wait until the inbox is drained (tests, shutdown)."""
        while self._task is not None and not self._task.done():
            task = self._task
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:
                if task.cancelled():
                    continue
                raise

    # --- the worker -----------------------------------------------------------------------

    async def _drain(self) -> None:
        try:
            # Pending switches that arrive while the last turn closes are committed here too,
            # so nothing recorded as pending is left behind once the task ends.
            while self._inbox or self._has_pending():
                if self._inbox:
                    message = self._inbox.popleft()
                    self._current = message
                    # A continuation's closing words wait for the end of the run: in a group
                    # each would be a message, and the card already shows the progress.
                    quiet = self._run.armed and isinstance(message.source, SeedSource)
                    if isinstance(message.source, GoalRoundSource) and not self._run.armed:
                        # A goal round's steps are watched within the round; across rounds
                        # the goal's idle-rounds rule is the bound (engine.goal.progress).
                        self._reset_watch()
                    self._working = True
                    try:
                        result = await run_turn(
                            self._deps,
                            self._runtime,
                            self.session_id,
                            message,
                            pre_step=self._pre_step,
                            post_step=self._post_step,
                            quiet=quiet,
                            # An armed run goes on after the step cap: no "send a message".
                            runs_on=self._run.armed,
                        )
                    finally:
                        self._working = False
                    self._current = None
                    await self._after_turn(message, result)
                    # The driver owns "a failed goal round disarms the goal": it is told how
                    # a round ended, and for which goal, and only for a round.
                    if isinstance(message.source, GoalRoundSource):
                        self._notify_idle(outcome=result.outcome, goal_id=message.source.goal_id)
                    else:
                        self._notify_idle()
                await self._commit_pending(queue_execution=True)
        except asyncio.CancelledError:
            self._current = None
            raise
        except LeaseLost as exc:
            # Another replica owns the chat now: nothing more may be written here (not even
            # the pause), and the session's sessions are let go (Sessions.chat_lost).
            _log.warning("plangate.agent.controller.lease_lost session=%s %s", self.session_id, exc)
            self._current = None
            for listener in self._listeners.lease_lost:
                listener(self.session_id)
        except Exception as exc:  # worker boundary: log the type, keep the process alive
            _log.exception("plangate.agent.controller.drain_failed %s", type(exc).__name__)
            self._current = None
            if self._run.armed:
                # No continuation is queued after a failure here: an armed run would wait
                # for a turn that never comes. It pauses, says why, and Resume goes on.
                reason = PauseReason(
                    "failed", f"Paused: an internal error stopped the run ({type(exc).__name__})"
                )
                await safe_call("pause", self._pause(reason))
        finally:
            self._notify_idle()

    def _has_pending(self) -> bool:
        return self._pending_mode is not None or self._pending_approval is not None

    async def _tasks(self) -> tuple[bool, list[PlanTask]]:
        """Whether the plan is Active, and its tasks (the sidecar, read at this moment)."""
        plan = self._deps.plan
        if plan is None:
            return False, []
        view = await plan.prompt_view(self.session_id)
        return view.phase == "active", list(view.tasks)

    async def _arm(self) -> None:
        _, tasks = await self._tasks()
        self._run = checklist.arm(self._run, tasks, now=self._clock())
        self._reset_watch()
        self._new_approval_run()

    def _reset_watch(self) -> None:
        self._watch.reset(now=self._clock())
        self._baseline = None

    def _new_approval_run(self) -> None:
        """A person acted: a request denied before may be asked about again."""
        if self._deps.approvals is not None:
            self._deps.approvals.new_run(self.session_id)

    async def _observe_approvals(self) -> str | None:
        """An approval nobody answered in time pauses the checklist run (the card says so).

        A turn outside a run (a message in NoPlan) goes on: the model read the denial.
        """
        approvals = self._deps.approvals
        if approvals is None:
            return None
        timed_out = approvals.take_timeout(self.session_id)
        if timed_out is None or not self._run.armed:
            return None
        shown = clip(timed_out.command or timed_out.tool, 80, one_line=True)
        waited = describe_timeout(approvals.timeout_s)
        _, tasks = await self._tasks()
        task = checklist.current_task(tasks)
        await self._pause(
            PauseReason(
                "approval-timeout",
                f"Paused: nobody answered the approval of `{shown}` within {waited}. "
                "Resume asks again.",
                evidence=timed_out.command,
                task_id=task.id if task is not None else None,
            )
        )
        return f"checklist paused: the approval of {shown} timed out"

    async def _observe_disk(self) -> str | None:
        """Below the disk reserve (engine/tools/disk.py) nothing unattended goes on: an
        armed checklist run pauses with the reason on the card, a goal round blocks its goal
        (``budget-limit``, the reason as its message). A turn a person started goes on (bash
        refuses with the reason; the chat keeps answering)."""
        disk = self._deps.disk
        message = self._current
        round_source = (
            message.source
            if message is not None and isinstance(message.source, GoalRoundSource)
            else None
        )
        if disk is None or not (self._run.armed or round_source is not None):
            return None
        low = await asyncio.to_thread(disk.low)
        if low is None:
            return None
        if round_source is not None:
            if self._deps.goals is not None:
                # Blocked, not retried round after round: Resume once there is room.
                await self._deps.goals.block_round(
                    self.session_id, round_source, code=BUDGET_LIMIT, message=low
                )
            else:
                await safe_call("notice", self._deps.channel.notice(self.session_id, low))
            return f"goal round stopped: {low}"
        _, tasks = await self._tasks()
        task = checklist.current_task(tasks)
        await self._pause(PauseReason("disk", low, task_id=task.id if task is not None else None))
        return f"checklist paused: {low}"

    async def _after_turn(self, message: InboundMessage, result: TurnResult) -> None:
        """Tell the listener; keep an armed checklist run going while it makes progress."""
        # ``result.asked`` was noted at its step (_post_step): an answer given since must not
        # reopen the question.
        for on_turn_end in self._listeners.turn_end:
            await safe_call("turn_end", on_turn_end(self.session_id, message, result))
        continued = False
        tasks_left = False
        finished = False
        was_armed = self._run.armed
        if self._run.armed or self._held:
            active, tasks = await self._tasks()
            tasks_left = active and checklist.tasks_left(tasks)
        refusal = result.refusal
        if self._run.armed and refusal is not None and refusal.kind == "daily-cap":
            # Each continuation would be refused again: pause with the reason at once.
            task = checklist.current_task(tasks)
            await self._pause(
                PauseReason(
                    "daily-cap",
                    DAILY_CAP_TEXT,
                    evidence=refusal.message,
                    task_id=task.id if task is not None else None,
                )
            )
        if self._run.armed and result.outcome == "failed":
            # Nobody knows how far the failed turn got: the run pauses and says why.
            task = checklist.current_task(tasks)
            await self._pause(
                PauseReason(
                    "failed",
                    f"Paused: the turn failed ({clip(result.detail, 160, one_line=True)})",
                    evidence=result.detail,
                    task_id=task.id if task is not None else None,
                )
            )
        if self._run.armed:
            failed = result.outcome in ("failed", "cancelled")
            if failed or not checklist.should_continue(self._run, tasks, active=active):
                self._run = checklist.disarm(self._run)
                # Ended, not halted: the plan was completed (archived), or every task is done.
                finished = not failed and not tasks_left and (not active or bool(tasks))
            # A question waits for the owner, or the owner spoke: their turn goes first, and
            # the run goes on after it.
            elif not (result.asked or self._inbox or self.closed):
                self.submit(self._deps.settings.continue_prompt, source=SeedSource())
                continued = True
        if continued:
            self._held = result.held or self._held
            return
        if was_armed or self._run.paused is not None:
            # The turn-end redraw ran while the turn was still open: draw the stopped run now.
            await safe_call("plan_changed", self._deps.channel.plan_changed(self.session_id))
        # The run paused or ended: say the last thing it said (an earlier turn's words only
        # while tasks are left; a finished plan's card says Done).
        text = result.held or (self._held if tasks_left else "")
        self._held = ""
        if finished and not text and isinstance(message.source, SeedSource):
            # The last turn, a quiet continuation, ended with no words (at the step cap,
            # say): an edited card notifies nobody, so the chat still hears the run is over.
            # An owner's turn already said its own words.
            text = CHECKLIST_DONE_TEXT
        if text:
            await safe_call("reply", self._deps.channel.reply(self.session_id, text, reply_to=None))

    def _watching(self) -> GoalRoundSource | bool:
        """Whether the stuck detector reads this turn's steps: an armed checklist run (True)
        or a goal round (its source); False for a turn the owner watches."""
        message = self._current
        if message is not None and isinstance(message.source, GoalRoundSource):
            return message.source
        return self._run.armed

    async def _post_step(self, step: StepDone) -> str | None:
        """Feed the step to the stuck detector; a verdict stops the turn (and the run) here."""
        declared = self._runtime.registry.effects
        if any("ask" in declared(c.name, c.arguments) and not r.is_error for c, r in step.calls):
            # The question is open from the moment it is on screen: its answer may come
            # before this turn ends (and closes it, once: engine.commands).
            self._asked = True
        watching = self._watching()
        if watching is False:
            return None
        now = self._clock()
        active, tasks = await self._tasks()
        self._run, tasks_moved = checklist.observe_tasks(self._run, tasks, now=now)
        pairs = [(c.name, c.arguments, r.content, r.is_error) for c, r in step.calls]
        # Progress is work (engine.progress.rule), judged from what each call's tool declares.
        registry = self._runtime.registry
        effects = [(registry.effects(name, args), err) for name, args, _, err in pairs]
        moved = (
            await self._workspace_moved() if any(may_change_files(d) for d, _ in effects) else False
        )
        if moved is None:
            # No snapshot to compare with: a write that went through is taken at its word.
            moved = any("write" in does and not err for does, err in effects)
        kinds = step_progress(
            task=tasks_moved,
            workspace=moved,
            goal=any(changes_goal(does, is_error=err) for does, err in effects),
        )
        if kinds:
            # In the log, so the goal's idle-rounds count reads the same rule.
            await self._deps.log.append(self.session_id, [ProgressMade(kinds=list(kinds))])
        progress = bool(kinds)
        record = Step(
            calls=tuple(call_record(n, a, c, is_error=e) for n, a, c, e in pairs),
            compacted=step.compacted,
            progress=progress,
        )
        task = checklist.current_task(tasks) if active else None
        verdict = self._watch.observe(
            record, now=now, task_id=task.id if task is not None else None, tokens=step.tokens
        )
        if progress and self._run.armed:
            self._run = dataclasses.replace(self._run, last_progress_at=now)
        if verdict is None:
            return None
        return await self._stuck(verdict, task, watching)

    async def _workspace_moved(self) -> bool | None:
        """Whether the workspace changed since the last snapshot (then it is the new one);
        ``None`` when there is nothing to compare (no snapshot before, or this one failed)."""
        before = self._baseline
        try:
            workspace = await self._deps.workspace_for(self.session_id)
            self._baseline = await workspace_snapshot.snapshot(workspace)
        except OSError as exc:
            _log.warning("plangate.agent.controller.snapshot_failed %s", type(exc).__name__)
            self._baseline = None
            return None
        return None if before is None else before != self._baseline

    async def _take_baseline(self) -> None:
        if self._baseline is not None or self._watching() is False:
            return
        try:
            workspace = await self._deps.workspace_for(self.session_id)
            self._baseline = await workspace_snapshot.snapshot(workspace)
        except OSError as exc:
            _log.warning("plangate.agent.controller.snapshot_failed %s", type(exc).__name__)

    async def _stuck(
        self, verdict: Verdict, task: PlanTask | None, watching: GoalRoundSource | bool
    ) -> str:
        """Stop what the detector caught: pause the checklist run, block the goal."""
        _log.info(
            "plangate.agent.controller.stuck session=%s pattern=%s evidence=%s",
            self.session_id,
            verdict.pattern,
            verdict.evidence,
        )
        label = checklist.task_label(task)
        task_id = task.id if task is not None else None
        self._reset_watch()
        if self._run.armed:
            reason = PauseReason(
                "stuck",
                f"Stuck on {label}: {verdict.text}",
                pattern=verdict.pattern,
                evidence=verdict.evidence,
                task_id=task_id,
            )
            await self._pause(reason)
        if isinstance(watching, GoalRoundSource):
            text = f"Stuck: {verdict.text}"
            event = RunPaused(
                kind="stuck",
                text=text,
                pattern=verdict.pattern,
                evidence=verdict.evidence,
                task_id=task_id,
                goal_id=watching.goal_id,
            )
            await self._deps.log.append(self.session_id, [event])
            goals = self._deps.goals
            if goals is not None:
                message = (
                    f"stuck: {verdict.text}; give it a hint or change the objective, then Resume"
                )
                await goals.block_round(
                    self.session_id, watching, code=NO_PROGRESS, message=message
                )
            return f"goal round stuck: {verdict.text}"
        return f"checklist stuck on {label}: {verdict.text}"

    async def _pause(self, reason: PauseReason) -> None:
        """The run stops by itself: disarmed with its reason, logged, kept in the sidecar."""
        self._run = checklist.pause(self._run, reason)
        event = RunPaused(
            kind=reason.kind,
            text=reason.text,
            pattern=reason.pattern,
            evidence=reason.evidence,
            task_id=reason.task_id,
        )
        await self._deps.log.append(self.session_id, [event])
        plan = self._deps.plan
        if plan is not None:
            pause = PlanPause(
                kind=reason.kind,
                text=reason.text,
                pattern=reason.pattern,
                evidence=reason.evidence,
                task_id=reason.task_id,
            )
            await safe_call("record_pause", plan.record_pause(self.session_id, pause))
        await safe_call("plan_changed", self._deps.channel.plan_changed(self.session_id))

    async def _pre_step(self, step: int) -> str | None:
        message = self._current
        switching_to_plan = self._pending_mode is True
        await self._commit_pending(queue_execution=False)
        await self._take_baseline()
        paused = await self._observe_approvals()
        if paused is not None:
            return paused
        disk_low = await self._observe_disk()
        if disk_low is not None:
            return disk_low
        if message is not None and isinstance(message.source, GoalRoundSource):
            if switching_to_plan:
                return "goal round ended: plan mode was entered"
            goals = self._deps.goals
            if goals is not None and not await goals.validate_round(
                self.session_id, message.source
            ):
                return "goal round no longer valid"
        return await self._prepare(message)

    async def _prepare(self, message: InboundMessage | None) -> str | None:
        """The project's setup runs before the approved run's (or a goal round's) first step
        in its worktree; a failure pauses the run (Retry) or blocks the goal."""
        prepare = self._deps.prepare
        if prepare is None or message is None:
            return None
        round_source = message.source if isinstance(message.source, GoalRoundSource) else None
        if not self._run.armed and round_source is None:
            return None  # a turn the owner watches, outside the run: the environment as it is
        hold = await prepare(self.session_id, message.source)
        if hold is None:
            return None
        if self._run.armed:
            _, tasks = await self._tasks()
            task = checklist.current_task(tasks)
            await self._pause(
                PauseReason(
                    "setup",
                    hold.text,
                    evidence=hold.evidence,
                    task_id=task.id if task is not None else None,
                )
            )
        if round_source is not None and self._deps.goals is not None:
            await self._deps.goals.block_round(
                self.session_id, round_source, code=hold.code, message=hold.text
            )
        return f"setup: {hold.text}"

    async def _commit_pending(self, *, queue_execution: bool) -> None:
        plan = self._deps.plan
        if self._pending_mode is not None:
            target, self._pending_mode = self._pending_mode, None
            if plan is not None:
                # The plan service tells the channel about its own commits.
                await plan.commit_plan_mode(self.session_id, target)
        if self._pending_approval is not None:
            await self._commit_approval(queue_execution=queue_execution)

    async def _commit_approval(self, *, queue_execution: bool) -> bool:
        pending, self._pending_approval = self._pending_approval, None
        plan = self._deps.plan
        if pending is None or plan is None:
            return False
        # Armed before the commit, which redraws the card: on its way from review to work the
        # card reads "In progress", never "Paused". Undone when nothing was committed.
        before, self._run = self._run, checklist.arm(self._run, [], now=self._clock())
        outcome = await plan.commit_approval(
            self.session_id, revision=pending.revision, actor=pending.actor
        )
        if not outcome.committed:
            self._run = before
            # Nothing was committed, so the plan service said nothing: redraw the card here.
            await safe_call("plan_changed", self._deps.channel.plan_changed(self.session_id))
            text = outcome.message or LAPSED_TEXT
            await safe_call("notice", self._deps.channel.notice(self.session_id, text))
            return False
        # Approval is consent to the whole checklist: a commit mid-turn lets that turn end,
        # then the run goes on by itself (_after_turn).
        await self._arm()
        # A re-approval that carried every task over as done finished the plan at once:
        # there is nothing to execute.
        if queue_execution and (await self._tasks())[0]:
            self.submit(self._deps.settings.execution_prompt, source=SeedSource())
        return True

    def _notify_idle(self, *, outcome: str | None = None, goal_id: str | None = None) -> None:
        """Wake the goal driver; it checks :meth:`is_idle` itself when it runs."""
        for on_idle in self._listeners.idle:
            try:
                result = on_idle.notify_idle(self.session_id, outcome=outcome, goal_id=goal_id)
                if inspect.isawaitable(result):
                    self._background.spawn(_awaited(result), name=f"notify_idle:{self.session_id}")
            except Exception as exc:  # the driver's failure must not kill the agent worker
                _log.warning("plangate.agent.controller.notify_idle_failed %s", type(exc).__name__)


async def _awaited(result: Awaitable[object]) -> None:
    await result


def _cancelling(task: asyncio.Task[object] | None) -> bool:
    return task is not None and task.cancelling() > 0


class AgentRegistry:
    """All session controllers of this process; the driver's ``RoundTarget``.

    Build one with :func:`engine.agent.build.build_agent`.
    """

    def __init__(self, deps: AgentDeps, *, driver: IdleListener | None = None) -> None:
        self.deps = deps
        self._listeners = Listeners(idle=[driver] if driver is not None else [])
        self._controllers: dict[str, SessionController] = {}
        self.runtime = ToolRuntime(deps.tools, gate=self._gate, paths=deps.boundary)
        self._closed = False

    def listen_idle(self, listener: IdleListener) -> None:
        """Wake ``listener`` whenever a session's turn ends or its inbox drains (the goal
        round driver subscribes itself so when it is built: it needs this registry first)."""
        self._listeners.idle.append(listener)

    def listen_lease_lost(self, listener: LeaseLostListener) -> None:
        """Tell ``listener`` (synchronously: it schedules what it does) when a session's work
        raised ``LeaseLost`` (the sessions subscribe so when they are built)."""
        self._listeners.lease_lost.append(listener)

    async def drop(self, session_id: str) -> None:
        """Let the session go from this process (its chat's lease was lost): abandon its
        controller (:meth:`SessionController.abandon`) and forget it and its cached history,
        so a later takeover starts from the log."""
        found = self._controllers.pop(session_id, None)
        if found is not None:
            await found.abandon()
        self.deps.history.forget(session_id)

    def listen_turns(self, listener: TurnListener) -> None:
        """Tell ``listener`` after every turn of every session (the cards subscribe so)."""
        self._listeners.turn_end.append(listener)

    def controller(self, session_id: str) -> SessionController:
        """The session's controller, created on first use."""
        found = self._controllers.get(session_id)
        if found is None:
            found = self._controllers[session_id] = SessionController(
                session_id,
                self.deps,
                self.runtime,
                listeners=self._listeners,
            )
            found.closed = self._closed
        return found

    def submit(
        self,
        session_id: str,
        text: str,
        *,
        source: MessageSource | None = None,
        message_id: MessageKey | None = None,
    ) -> None:
        """Queue a message for the session's agent; returns at once."""
        self.controller(session_id).submit(text, source=source, message_id=message_id)

    async def stop(self, session_id: str) -> list[InboundMessage]:
        """``/stop``: see :meth:`SessionController.stop`."""
        return await self.controller(session_id).stop()

    def is_busy(self, session_id: str) -> bool:
        found = self._controllers.get(session_id)
        return found is not None and found.busy

    # RoundTarget (engine.goal.driver)
    def is_idle(self, session_id: str) -> bool:
        """No running turn and no queued message in that session."""
        found = self._controllers.get(session_id)
        return found is None or found.is_idle()

    async def submit_round(self, session_id: str, text: str, source: GoalRoundSource) -> None:
        """Queue a goal round prompt as a goal-source ``user/message``."""
        self.submit(session_id, text, source=source)

    async def wait_idle(self, session_id: str) -> None:
        """Wait until that session's inbox is drained."""
        await self.controller(session_id).wait_idle()

    async def shutdown(self) -> dict[str, list[InboundMessage]]:
        """Cancel every running turn (each is closed ``cancelled``); no new turn starts after.

        Returns, per session that was working, the queued messages that were dropped (an
        empty list when only the running turn was stopped).
        """
        self._closed = True
        for controller in self._controllers.values():
            controller.closed = True
        stopped: dict[str, list[InboundMessage]] = {}
        for session_id, controller in list(self._controllers.items()):
            if controller.busy:
                stopped[session_id] = await controller.stop()
        return stopped

    async def _gate(self, request: ToolCallRequest, ctx: ToolContext) -> str | None:
        """The plan gate, then the owner's approval (which may wait for a press); both read
        what the tool declares it does (engine.tools.effects), never its name."""
        plan = self.deps.plan
        declared = self.runtime.registry.declaration(request.name)
        goal_round = not is_attended(ctx.source)
        if plan is not None:
            denied = await plan.check_tool(
                ctx.session_id,
                declared,
                request.arguments,
                workspace=ctx.workspace,
                goal_round=goal_round,
            )
        else:
            view = PlanGateView(state="none")
            denied = check_gate(
                declared, request.arguments, view, workspace=ctx.workspace, goal_round=goal_round
            )
        if denied is not None:
            return denied
        approvals = self.deps.approvals
        effects = effects_of(declared, request.arguments)
        if approvals is None or not approvals.may_ask(effects):
            return None
        phase = (await plan.prompt_view(ctx.session_id)).phase if plan is not None else "none"
        return await approvals.check(request, ctx, phase=phase, declared=declared)


__all__ = [
    "LAPSED_TEXT",
    "AgentRegistry",
    "ApprovalRequest",
    "InboundMessage",
    "Listeners",
    "PendingApproval",
    "SessionController",
    "TurnListener",
]
