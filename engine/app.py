"""The engine facade: composition of the machines and the command plane (docs/architecture.md).

:class:`Engine` implements :class:`engine.api.EngineApi`. It owns one of each service (plan,
goal, agent registry, round driver, scheduler) for the whole process and decides every
command and button press; the decisions live in :mod:`engine.commands`.

Front ends build one with :func:`build_engine` from ports (the event log, the session store,
the plan store, a model, a channel) and never reach into the services themselves.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from engine.agent.adapters import PlanServiceAdapter
from engine.agent.build import build_agent, workspace_from_store
from engine.agent.channel import Channel, safe_call
from engine.agent.checklist import DEFAULT_STALL_STEPS
from engine.agent.config import AgentSettings
from engine.agent.controller import AgentRegistry, InboundMessage
from engine.agent.turn import TurnResult
from engine.api import (
    CommandName,
    GoalCardData,
    Outcome,
    PlanCardData,
    PlanCardState,
    PressKind,
    RestoredGoal,
)
from engine.approval.policy import ApprovalView, Rule
from engine.approval.service import DEFAULT_TIMEOUT_S, ToolApprovals
from engine.cards import CardChoices, plan_card_state
from engine.commands import CommandPlane
from engine.events import (
    CommandRun,
    FeedbackSource,
    GoalRoundSource,
    MessageSource,
    PlanChanged,
    PlanMode,
    SessionEvent,
)
from engine.goal.driver import RoundDriver
from engine.goal.progress import IdleRoundWatch
from engine.goal.service import GoalService
from engine.goal.tools import goal_tools
from engine.goal.types import NEEDS_APPROVAL, GoalSnapshot
from engine.model.types import ModelProvider
from engine.plan.extract import validate_template_b
from engine.plan.service import PlanChange, PlanService
from engine.plan.store import PlanStore
from engine.plan.tool import PlanTool
from engine.plan.types import PlanFlow, PlanSidecar
from engine.ports import Clock, EventLog, SessionStore
from engine.projections import TAKE_BACK_COMMANDS
from engine.recovery import close_interrupted_turn
from engine.scheduler import ApsScheduler, Scheduler
from engine.text import clean_text
from engine.todo.tool import TodoWriteTool
from engine.tools.base import Tool
from engine.tools.files import FileLimits
from engine.tools.sandbox import SandboxSettings
from engine.usage.meter import UsageConfig, UsageMeter

_log = logging.getLogger("plangate.engine")

PlanEnding = Literal["completed", "discarded", "abandoned"]
# The store's archive reasons that end a plan in a way its card names; anything else discards.
_ENDINGS: dict[str, PlanEnding] = {"completed": "completed", "abandoned": "abandoned"}

INTERRUPTED_NOTICE = (
    "The last turn was interrupted when plangate stopped; it will not be re-run. "
    "Send a message to continue."
)


# How long shutdown waits for one chat's notice before it goes on.
NOTICE_WAIT_S = 5.0
SHUTDOWN_NOTICE = "plangate is stopping: the running turn was stopped and will not be re-run."
PLAN_RESUMED_NOTICE = "Planning, asked for before plangate stopped, is on now."
STALE_APPROVAL_NOTICE = (
    "An approval given before plangate stopped was for an older version of the plan; "
    "the plan is back in review."
)


def _undecided(events: Sequence[SessionEvent], name: str) -> CommandRun | None:
    """The last ``command/run`` called ``name`` if nothing decided or took it back since.

    A plan change (``plan/mode``, ``plan/changed``) decides it; a take-back command cancels it.
    """
    for event in reversed(events):
        if isinstance(event, PlanChanged | PlanMode):
            return None
        if isinstance(event, CommandRun):
            if event.name == name:
                return event
            if event.name in TAKE_BACK_COMMANDS:
                return None
    return None


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """The settings the engine itself reads."""

    workspace: Path
    profile: str | None = None
    max_goal_rounds: int = 20
    todo_parallel: bool = True
    max_steps: int = 50
    # Steps without checklist progress after which an approved checklist stops, stalled.
    stall_steps: int = DEFAULT_STALL_STEPS
    # How bash is confined; the default is the full sandbox with no hidden paths named.
    sandbox: SandboxSettings = field(default_factory=SandboxSettings)
    usage: UsageConfig = field(default_factory=UsageConfig)
    # Idle goal rounds in a row after which the goal is blocked no-progress.
    goal_idle_rounds: int = 3
    # Command prefixes bash may run without asking (PLANGATE_ALLOW_BASH), and how long a
    # request waits for the owner before it is denied (PLANGATE_APPROVAL_TIMEOUT).
    allow_bash: tuple[Rule, ...] = ()
    approval_timeout_s: float = DEFAULT_TIMEOUT_S
    # File writes in NoPlan and Active ask the owner too, with a diff (PLANGATE_ASK_WRITES).
    ask_writes: bool = False
    # Caps of the file tools (grep's deadline among them); the defaults suit a real bot.
    file_limits: FileLimits | None = None


class Engine:
    """One process's plangate: sessions, plans, goals, the agent and the command plane."""

    def __init__(
        self,
        *,
        log: EventLog,
        sessions: SessionStore,
        plans: PlanService,
        goals: GoalService,
        agents: AgentRegistry,
        driver: RoundDriver,
        scheduler: Scheduler,
        channel: Channel,
        config: EngineConfig,
        approvals: ToolApprovals,
        usage: UsageMeter | None = None,
    ) -> None:
        self.log = log
        self.sessions = sessions
        self.plans = plans
        self.goals = goals
        self.agents = agents
        self.driver = driver
        self.scheduler = scheduler
        self.channel = channel
        self.config = config
        self.usage = usage or UsageMeter(log, goals=goals, config=config.usage)
        self.usage.is_private = self._is_private
        self.approvals = approvals
        self._loaded: set[str] = set()
        # Bound sessions that start-up found unmarked (no open turn, nothing undecided): their
        # first load skips those reads.
        self._quiet: set[str] = set()
        self._bindings: dict[tuple[int, int], str] = {}
        # The last plan of a session that just ended, so its card can say how it ended.
        self._ended: dict[str, tuple[PlanSidecar, PlanEnding]] = {}
        # The one owner of what the cards show besides plan, goal and agent state.
        self.cards = CardChoices()
        self.commands = CommandPlane(self)
        plans.add_listener(self._on_plan_change)
        goals.add_listener(self._on_goal_change)
        agents.set_turn_listener(self._on_turn_end)

    # --- sessions ---------------------------------------------------------------------------

    async def session_for_chat(self, chat_id: int, thread_id: int) -> str:
        """The session bound to the chat key, created and bound on first use."""
        # Bindings change only through this engine (/new), so a hit needs no database trip.
        session_id = self._bindings.get((chat_id, thread_id))
        if session_id is not None:
            return session_id
        session_id = await self.sessions.session_for_chat(chat_id, thread_id)
        if session_id is None:
            record = await self.sessions.create_session(
                workspace=str(self.config.workspace), profile=self.config.profile
            )
            await self.sessions.bind_chat(chat_id, thread_id, record.id)
            session_id = record.id
            self._loaded.add(session_id)  # a new session: its log is empty, nothing to close
        await self.ensure_loaded(session_id)
        self._bindings[(chat_id, thread_id)] = session_id
        return session_id

    async def ensure_loaded(self, session_id: str) -> None:
        """First touch of a session in this process: close what a dead process left open.

        An interrupted turn is never re-run; the chat is told once. A corrupt sidecar that the
        plan store moved aside is reported. A pending ``/plan`` or approval that the dead
        process had logged but not committed is decided now, the same way it would have been.
        """
        if session_id in self._loaded:
            return
        # Marked loaded before the awaits so concurrent first touches do it once; a failure
        # unmarks it, so the next touch tries again.
        self._loaded.add(session_id)
        try:
            await self._load(session_id)
        except BaseException:
            self._loaded.discard(session_id)
            raise

    async def _load(self, session_id: str) -> None:
        quiet = session_id in self._quiet
        self._quiet.discard(session_id)
        interrupted = not quiet and bool(await close_interrupted_turn(self.log, session_id))
        if interrupted:
            await safe_call("notice", self.channel.notice(session_id, INTERRUPTED_NOTICE))
        await self.approvals.load(session_id)
        await self.goals.on_session_start(session_id)
        await self.goals.get(session_id)  # reads the log: ``goals.peek`` is current from here
        await self.plans.state(session_id)  # loads the sidecar (legacy map, corrupt move)
        for notice in self.plans.take_notices(session_id):
            await safe_call("notice", self.channel.notice(session_id, notice))
        if not quiet:
            await self._decide_pending(session_id)
        if interrupted:
            # The card still shows the turn as working: redraw it (a checklist left by the
            # dead process is paused now, with Resume; nothing restarts by itself).
            await safe_call("plan_changed", self.channel.plan_changed(session_id))

    async def _decide_pending(self, session_id: str) -> None:
        stored = await self.log.read(session_id, types=("command/run", "plan/mode", "plan/changed"))
        events = [s.event for s in stored]
        switch = _undecided(events, "plan")
        if (
            switch is not None
            and switch.data.get("target") is True
            and await self.plans.state(session_id) == "none"
        ):
            await self.plans.enter_pre_init(
                session_id, working_directory=str(self.config.workspace)
            )
            await safe_call("notice", self.channel.notice(session_id, PLAN_RESUMED_NOTICE))
        approval = _undecided(events, "approve")
        revision = approval.data.get("revision") if approval is not None else None
        current = await self.plans.current(session_id)
        if not isinstance(revision, int) or current is None:
            return
        if await self.plans.state(session_id) != "post_init":
            return
        if current.revision == revision:
            await self.agents.controller(session_id).request_approval(
                revision=revision, actor=approval.actor if approval else None
            )
        else:
            await safe_call("notice", self.channel.notice(session_id, STALE_APPROVAL_NOTICE))

    async def new_session(self, chat_id: int, thread_id: int, *, actor: int) -> Outcome:
        """``/new``: end the key's session (cancel, disarm, archive), bind a fresh one."""
        old = await self.sessions.session_for_chat(chat_id, thread_id)
        dropped: list[str] = []
        if old is not None:
            await self.ensure_loaded(old)
            await self.commands.log_command(old, "new", "", actor=actor)
            self.agents.controller(old).cancel_pending()
            dropped = [m.text for m in await self.agents.stop(old)]
            await self.goals.disarm(old)  # the driver drops the goal's jobs on disarm
            await self.plans.abandon(old)
            self.cards.forget(old)
        record = await self.sessions.create_session(
            workspace=str(self.config.workspace), profile=self.config.profile
        )
        await self.sessions.bind_chat(chat_id, thread_id, record.id)
        self._bindings[(chat_id, thread_id)] = record.id
        self._loaded.add(record.id)
        return Outcome(reply="Started a new session.", dropped=tuple(dropped))

    async def migrate_chat(self, old_chat_id: int, new_chat_id: int) -> list[str]:
        """A group became a supergroup: bind its sessions to the new id; returns them.

        Each moved plan's ``flow`` names the new chat and no card (the old group's messages
        can no longer be edited), so the next drawing posts the card anew. Idempotent.
        """
        moved: list[str] = []
        for binding in await self.sessions.chat_bindings():
            if binding.chat_id != old_chat_id:
                continue
            key = (new_chat_id, binding.thread_id)
            # Replaces a session a message in the new chat may have opened meanwhile: the
            # group's own session is the one with its history.
            await self.sessions.bind_chat(*key, binding.session_id)
            self._bindings[key] = binding.session_id
            self._bindings.pop((old_chat_id, binding.thread_id), None)
            sidecar = await self.plans.current(binding.session_id)
            if sidecar is not None and sidecar.flow.chat_id in (None, old_chat_id):
                flow = sidecar.flow.model_copy(
                    update={"chat_id": new_chat_id, "card_id": None, "review_ids": []}
                )
                await self.plans.set_flow(binding.session_id, flow)
            moved.append(binding.session_id)
        _log.info(
            "plangate.engine.chat_migrated from=%s to=%s sessions=%s",
            old_chat_id,
            new_chat_id,
            len(moved),
        )
        return moved

    async def fork_session(self, session_id: str, *, upto_seq: int | None = None) -> str:
        """A new session with a copy of the log prefix and the current sidecar and ``.md``.

        The copy is bound to no chat and owns no card: its ``flow`` ids are cleared, so it
        never edits the parent's messages.
        """
        await self.ensure_loaded(session_id)
        record = await self.sessions.fork(session_id, upto_seq=upto_seq)
        await self.plans.fork(session_id, record.id)
        if await self.plans.current(record.id) is not None:
            await self.plans.set_flow(record.id, PlanFlow())
        return record.id

    # --- messages, commands, presses --------------------------------------------------------

    async def user_message(
        self,
        session_id: str,
        text: str,
        *,
        actor: int | None,
        message_id: int | None,
        feedback: bool = False,
    ) -> None:
        """Queue a message for the agent and return at once (never waits for the turn)."""
        await self.ensure_loaded(session_id)
        answered = self.agents.controller(session_id).awaiting_answer
        self.commands.submit_text(
            session_id, clean_text(text), actor=actor, message_id=message_id, feedback=feedback
        )
        if answered:  # the card no longer waits for the owner
            await safe_call("plan_changed", self.channel.plan_changed(session_id))

    async def command(
        self, session_id: str, name: CommandName, args: str, *, actor: int | None
    ) -> Outcome:
        """Run a command in the command plane (logged as ``command/run``; opens no turn)."""
        await self.ensure_loaded(session_id)
        return await self.commands.run(session_id, name, clean_text(args), actor=actor)

    async def press(
        self,
        session_id: str,
        *,
        kind: PressKind,
        action: str,
        short_id: str,
        revision: int,
        actor: int | None,
        message_id: int | None = None,
    ) -> Outcome:
        """A button press bound to the revision it was drawn for; stale presses change nothing."""
        await self.ensure_loaded(session_id)
        return await self.commands.press(
            session_id,
            kind=kind,
            action=action,
            short_id=short_id,
            revision=revision,
            actor=actor,
            message_id=message_id,
        )

    # --- cards ------------------------------------------------------------------------------

    async def plan_card(self, session_id: str) -> PlanCardData:
        """What the plan card shows now (engine.cards has the rule)."""
        sidecar = await self.plans.current(session_id)
        controller = self.agents.controller(session_id)
        busy = controller.busy
        if sidecar is None:
            ended = self._ended.get(session_id)
            if ended is not None:
                final: PlanCardState = "done" if ended[1] == "completed" else "none"
                return PlanCardData(state=final, sidecar=ended[0], busy=busy, ended=ended[1])
            return PlanCardData(state="none", sidecar=None, busy=busy)
        phase = await self.plans.state(session_id)
        run = controller.checklist
        review_ready = phase == "post_init" and await self._review_ready(session_id, sidecar)
        state = plan_card_state(
            phase=phase,
            sidecar=sidecar,
            review_ready=review_ready,
            choice=self.cards.plan_choice(session_id, sidecar.id, sidecar.revision),
            awaits_feedback=self.cards.awaits_feedback(session_id, sidecar.id),
            running=busy or run.armed,
        )
        waiting: str | None = None
        approval = self.pending_approval(session_id)
        if approval is not None:
            waiting = f"approval of a {approval.tool} call (the message below)"
        elif controller.awaiting_answer and not busy:
            waiting = "a question"
        elif state == "review":
            waiting = "your review"
        halted: str | None = None
        if state == "paused":
            if run.stalled is not None:
                label, steps = run.stalled
                halted = f"Stalled on {label}: no progress in {steps} steps."
            else:
                halted = "Paused: Resume runs the rest of the checklist."
        return PlanCardData(
            state=state,
            sidecar=sidecar,
            busy=busy,
            markdown=await self.plans.md_text(session_id) if review_ready else None,
            waiting=waiting,
            last_progress_at=run.last_progress_at if run.armed else None,
            halted=halted,
        )

    def pending_approval(self, session_id: str) -> ApprovalView | None:
        """The tool call this session waits on the owner for ("waiting for you"), if any."""
        return self.approvals.pending(session_id)

    async def _review_ready(self, session_id: str, sidecar: PlanSidecar) -> bool:
        """Review once ``submit`` was called for this revision or template B is valid."""
        if sidecar.submitted_revision == sidecar.revision:
            return True
        md = await self.plans.md_text(session_id)
        return bool(md) and not validate_template_b(md or "")

    async def goal_card(self, session_id: str) -> GoalCardData:
        goal = await self.goals.get(session_id)
        if goal is None:
            return GoalCardData(state="none", goal=None)
        state = self.cards.goal_choice(session_id, goal.id, goal.revision) or "live"
        return GoalCardData(
            state=state,
            goal=goal,
            armed=self.goals.is_armed(session_id),
            tokens_used=await self.usage.goal_tokens(session_id, goal.id),
        )

    def _is_private(self, session_id: str) -> bool:
        # Telegram's private chats have positive ids, groups negative ones.
        return any(
            chat_id > 0 and sid == session_id for (chat_id, _), sid in self._bindings.items()
        )

    async def set_plan_flow(
        self,
        session_id: str,
        *,
        chat_id: int,
        thread_id: int | None,
        card_id: int | None,
        review_ids: Sequence[int] | None = None,
        plan_id: str | None = None,
    ) -> None:
        """Remember the plan card's (and plan-text messages') ids in the sidecar's ``flow``.

        Written the moment Telegram returns the id. A plan that ended meanwhile keeps its
        last card in memory, so its final drawing edits that message.
        """
        sidecar = await self.plans.current(session_id)
        written = False
        if sidecar is not None and (plan_id is None or sidecar.id == plan_id):
            flow = sidecar.flow.model_copy(
                update={
                    "chat_id": chat_id,
                    "thread_id": thread_id,
                    "card_id": card_id,
                    "review_ids": list(review_ids)
                    if review_ids is not None
                    else list(sidecar.flow.review_ids),
                }
            )
            # The plan may end between the read and the write: set_flow checks under its lock.
            written = await self.plans.set_flow(session_id, flow, plan_id=sidecar.id)
        ended = self._ended.get(session_id)
        if (
            not written
            and ended is not None
            and card_id is not None
            and plan_id in (None, ended[0].id)
        ):
            flow = ended[0].flow.model_copy(update={"chat_id": chat_id, "card_id": card_id})
            self._ended[session_id] = (ended[0].model_copy(update={"flow": flow}), ended[1])

    async def _on_plan_change(self, change: PlanChange) -> None:
        if change.after is None and change.before is not None:
            ending = _ENDINGS.get(change.archived or "", "discarded")
            self._ended[change.session_id] = (change.archived_sidecar or change.before, ending)
        elif change.after is not None:
            self._ended.pop(change.session_id, None)
        if change.after is None or change.after.status == "Active":
            # Planning ended: a goal round held back while Editing may go now.
            self.driver.notify_idle(change.session_id)
        await safe_call("plan_changed", self.channel.plan_changed(change.session_id))

    async def _on_goal_change(self, session_id: str, goal: GoalSnapshot | None) -> None:
        await safe_call("goal_changed", self.channel.goal_changed(session_id))

    async def _on_turn_end(
        self, session_id: str, message: InboundMessage, result: TurnResult
    ) -> None:
        """Card state that turns decide: the planner's feedback turn, a question asked."""
        redraw = False
        if isinstance(message.source, FeedbackSource):
            # Whatever the planner did with the owner's words, the review keyboard comes back.
            sidecar = await self.plans.current(session_id)
            if sidecar is not None and self.cards.awaits_feedback(session_id, sidecar.id):
                self.cards.feedback_done(session_id)
                redraw = True
        if result.asked:  # the card says a question waits for the owner
            redraw = True
        if redraw:
            await safe_call("plan_changed", self.channel.plan_changed(session_id))

    # --- lifecycle --------------------------------------------------------------------------

    async def start(self) -> list[RestoredGoal]:
        """Start the scheduler; return the live goals that came up disarmed after a restart.

        Loads only the bound sessions the log marks as needing it (an interrupted turn to
        announce, a live goal to come up disarmed, an undecided ``/plan`` or approval); every
        other session loads when its chat next speaks, so start-up does not grow with the
        number of sessions.
        """
        if isinstance(self.scheduler, ApsScheduler):
            self.scheduler.start()
        await self.usage.load()
        bound: set[str] = set()
        for binding in await self.sessions.chat_bindings():
            self._bindings.setdefault((binding.chat_id, binding.thread_id), binding.session_id)
            bound.add(binding.session_id)
        restored: list[RestoredGoal] = []
        marked = await self.log.needs_attention()
        self._quiet = bound - set(marked) - self._loaded
        for session_id in marked:
            if session_id not in bound:
                continue
            # Tell each chat now about a turn the last process left open, not at its next
            # message; decide what it left pending. One broken session must not stop the bot:
            # it is tried again at its next message.
            try:
                await self.ensure_loaded(session_id)
            except Exception as exc:
                _log.warning(
                    "plangate.engine.load_failed session=%s %s: %s",
                    session_id,
                    type(exc).__name__,
                    exc,
                )
                continue
            goal = self.goals.peek(session_id)  # loading just read it
            if goal is not None and goal.phase == "active" and goal.source != "task":
                restored.append(RestoredGoal(session_id=session_id, goal=goal))
        return restored

    async def shutdown(self) -> None:
        """Stop the scheduler, then every turn (closed as cancelled); tell the chats.

        Timers go first so no goal round starts while turns are being stopped, and no turn
        starts after (the agents refuse new messages). Nothing is re-run after the restart, so
        each chat that was working hears it now, with the messages that were still waiting;
        each notice gets a bounded wait so a flood-limited chat cannot hold the shutdown.
        """
        await self.driver.close()
        if isinstance(self.scheduler, ApsScheduler):
            self.scheduler.shutdown()
        await self.commands.flush_logs()
        for session_id, dropped in (await self.agents.shutdown()).items():
            text = SHUTDOWN_NOTICE
            if dropped:
                listed = "\n".join(f"- {m.text[:80]}" for m in dropped)
                text += f" Not handled, send again if still wanted:\n{listed}"
            try:
                await asyncio.wait_for(
                    safe_call("notice", self.channel.notice(session_id, text)), NOTICE_WAIT_S
                )
            except TimeoutError:
                _log.warning("plangate.engine.shutdown_notice_timeout session=%s", session_id)


def build_engine(
    *,
    log: EventLog,
    sessions: SessionStore,
    plan_store: PlanStore,
    model: ModelProvider,
    channel: Channel,
    config: EngineConfig,
    scheduler: Scheduler | None = None,
    clock: Clock = time.time,
) -> Engine:
    """Assemble an :class:`Engine` from its ports: the one composition of the services."""
    goals = GoalService(log, clock=clock, default_max_rounds=config.max_goal_rounds)
    usage = UsageMeter(log, goals=goals, config=config.usage, clock=clock)
    plans = PlanService(plan_store, log, criteria=goals, clock=clock)

    async def block_for_approval(
        session_id: str, source: MessageSource, view: ApprovalView
    ) -> None:
        # A goal round never waits on a person: its goal stops until the owner allows it.
        if not isinstance(source, GoalRoundSource):
            return
        goal = await goals.get(session_id)
        if goal is None or goal.id != source.goal_id or goal.phase != "active":
            return
        what = view.command or view.tool
        await goals.block(
            session_id,
            goal.ref,
            code=NEEDS_APPROVAL,
            message=f"{view.tool} needs your approval: {what}",
        )

    approvals = ToolApprovals(
        log,
        channel,
        rules=config.allow_bash,
        timeout_s=config.approval_timeout_s,
        on_unattended=block_for_approval,
        ask_writes=config.ask_writes,
    )
    tools: list[Tool] = [
        PlanTool(plans),
        TodoWriteTool(log, allow_parallel_in_progress=config.todo_parallel),
        *goal_tools(goals),
    ]
    agents = build_agent(
        log=log,
        model=model,
        channel=channel,
        workspace_for=workspace_from_store(sessions, default=config.workspace),
        plan=PlanServiceAdapter(plans),
        goals=goals,
        extra_tools=tools,
        settings=AgentSettings(max_steps=config.max_steps, stall_steps=config.stall_steps),
        sandbox=config.sandbox,
        usage=usage,
        approvals=approvals,
        file_limits=config.file_limits,
    )
    the_scheduler = scheduler or ApsScheduler()

    async def planning(session_id: str) -> bool:
        # No goal round is dispatched while the plan is being edited (docs/goals.md).
        return await plans.state(session_id) in ("pre_init", "post_init")

    idle = IdleRoundWatch(goals, log, limit=config.goal_idle_rounds)
    driver = RoundDriver(
        goals, agents, the_scheduler, hold=planning, after_round=idle.round_settled
    )
    agents.set_driver(driver)
    return Engine(
        log=log,
        sessions=sessions,
        plans=plans,
        goals=goals,
        agents=agents,
        driver=driver,
        scheduler=the_scheduler,
        channel=channel,
        config=config,
        usage=usage,
        approvals=approvals,
    )


__all__ = ["Engine", "EngineConfig", "build_engine"]
