"""The engine facade: one of each service for the process, composed (docs/architecture.md).

:class:`Engine` implements :class:`engine.api.EngineApi` by handing each call to the part that
owns it: :class:`~engine.sessions.Sessions` (chat bindings, first loads, ``/new``, fork),
:class:`~engine.commands.CommandPlane` (commands, presses, the owner's messages) and
:class:`~engine.cards.Cards` (what the cards show). It owns start-up and shutdown.

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

from engine.agent.adapters import PlanServiceAdapter
from engine.agent.build import build_agent, workspace_from_store
from engine.agent.settings import AgentSettings
from engine.api import (
    CommandName,
    GoalCardData,
    Outcome,
    PlanCardData,
    Press,
    RestoredGoal,
)
from engine.approval.policy import (
    ApprovalView,
    BashApproval,
    BashPolicy,
    Rule,
    default_bash_approval,
)
from engine.approval.service import DEFAULT_TIMEOUT_S, ToolApprovals
from engine.bindings import ChatBindings
from engine.cards import Cards
from engine.checks.runner import SandboxChecks
from engine.commands import CommandPlane
from engine.environments import DEFAULT_SETUP_TIMEOUT_S, EnvSetup
from engine.events import Attachment
from engine.goal.driver import RoundDriver
from engine.goal.progress import IdleRoundWatch
from engine.goal.service import GoalService
from engine.goal.tools import goal_tools
from engine.inbox import session_inbox
from engine.keys import Chat, ChatKey, ChatKind, MessageKey, PersonKey
from engine.model.types import ModelProvider
from engine.plan.digest import DEFAULT_MAX_PLAN_KB
from engine.plan.service import PlanService
from engine.plan.store import PlanStore
from engine.plan.tool import PlanTool
from engine.ports import Channel, ChatLog, Clock, EventLog, SessionStore
from engine.progress.stuck import StuckLimits
from engine.projects import ProjectCatalog
from engine.roles.commands import describe_team, parse_team_args, run_team
from engine.roles.policy import command_action, may, refusal_text
from engine.roles.service import RoleService
from engine.roles.types import Person, Role
from engine.roles.votes import PlanVotes
from engine.scheduler import ApsScheduler, Scheduler
from engine.services import Services
from engine.sessions import Sessions
from engine.tasks import safe_call
from engine.text import clip
from engine.todo.tool import TodoWriteTool
from engine.tools.bash import BashTool
from engine.tools.files import FileLimits
from engine.tools.sandbox import SandboxSettings
from engine.tools.workspace import WorkspaceLocks
from engine.usage.meter import UsageConfig, UsageMeter
from engine.worktree.service import Worktrees

_log = logging.getLogger("plangate.engine")

# How long shutdown waits for one chat's notice before it goes on.
NOTICE_WAIT_S = 5.0
SHUTDOWN_NOTICE = "plangate is stopping: the running turn was stopped and will not be re-run."


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """The settings the engine itself reads."""

    workspace: Path
    profile: str | None = None
    max_goal_rounds: int = 20
    todo_parallel: bool = True
    max_steps: int = 50
    # When an unattended run is stuck: the loop patterns and the outer bound on progress.
    stuck: StuckLimits = field(default_factory=StuckLimits)
    # How bash is confined; the default is the full sandbox with no hidden paths named.
    sandbox: SandboxSettings = field(default_factory=SandboxSettings)
    usage: UsageConfig = field(default_factory=UsageConfig)
    # Idle goal rounds in a row after which the goal is blocked no-progress.
    goal_idle_rounds: int = 3
    # Command prefixes bash may run without asking (PLANGATE_ALLOW_BASH), and how long a
    # request waits for the owner before it is denied (PLANGATE_APPROVAL_TIMEOUT).
    allow_bash: tuple[Rule, ...] = ()
    approval_timeout_s: float = DEFAULT_TIMEOUT_S
    # When bash asks (PLANGATE_BASH_APPROVAL; None: the default for the sandbox setting) and
    # the prefixes that always ask (PLANGATE_ASK_BASH).
    bash_approval: BashApproval | None = None
    ask_bash: tuple[Rule, ...] = ()
    # File writes in NoPlan and Active ask the owner too, with a diff (PLANGATE_ASK_WRITES).
    ask_writes: bool = False
    # Caps of the file tools (grep's deadline among them); the defaults suit a real bot.
    file_limits: FileLimits | None = None
    # Who owns the bot (PLANGATE_OWNER_IDS). None: no owner list (an engine embedded without
    # people, as in the engine's own tests): every actor then counts as an owner.
    owner_ids: frozenset[PersonKey] | None = None
    # Approvals a plan needs from different people (PLANGATE_PLAN_APPROVALS), and whether an
    # owner's approval alone is enough all the same (PLANGATE_OWNER_OVERRIDES).
    plan_approvals: int = 1
    owner_overrides: bool = False
    # Where the files the owner sends are kept (engine.inbox), ``<home>/inbox`` when opened
    # by bot.compose; None: no inbox (uploads are refused by the front end).
    inbox_root: Path | None = None
    # The model can see images (PLANGATE_MODEL_VISION): a photo goes as an image part.
    vision: bool = False
    # The projects besides the default (``workspace``): named folders (PLANGATE_PROJECTS)
    # and a folder whose subfolders are projects (PLANGATE_PROJECTS_ROOT).
    projects: tuple[tuple[str, Path], ...] = ()
    projects_root: Path | None = None
    # Where approved plans' git worktrees go (``<home>/worktrees``; None: plans work in place)
    # and the remote Push branch pushes to (PLANGATE_GIT_REMOTE; None: Merge instead).
    worktree_root: Path | None = None
    git_remote: str | None = None
    # The plan .md's size limit in KB (PLANGATE_MAX_PLAN_KB).
    max_plan_kb: int = DEFAULT_MAX_PLAN_KB
    # A project's setup script (docs/environments.md): its timeout (PLANGATE_SETUP_TIMEOUT)
    # and where the consent to it and its package caches are kept (``<home>/environments``;
    # None: consent in memory, no caches).
    setup_timeout_s: float = DEFAULT_SETUP_TIMEOUT_S
    environments_root: Path | None = None


class Engine:
    """One process's plangate: its services, composed; every call goes to the part that owns it.

    The parts are public for tests and tools that read state (``plans``, ``goals``, ``agents``,
    ``usage``, ``approvals``, ``worktrees``, ``log``); front ends use only the
    :class:`EngineApi` methods.
    """

    def __init__(
        self,
        services: Services,
        *,
        sessions: Sessions,
        commands: CommandPlane,
        cards: Cards,
        driver: RoundDriver,
        scheduler: Scheduler,
        config: EngineConfig,
    ) -> None:
        self.sessions = sessions
        self.commands = commands
        self.cards = cards
        self.driver = driver
        self.scheduler = scheduler
        self.config = config
        self.log = services.log
        self.plans = services.plans
        self.goals = services.goals
        self.agents = services.agents
        self.approvals = services.approvals
        self.worktrees = services.worktrees
        self.usage = services.usage
        self.roles = services.roles
        self.channel = services.channel

    # --- sessions ---------------------------------------------------------------------------

    async def session_for_chat(self, chat: Chat) -> str:
        """The session bound to the chat's key, created and bound on first use."""
        return await self.sessions.for_chat(chat)

    async def ensure_loaded(self, session_id: str) -> None:
        """Load a session in this process if it is not yet (see :class:`Sessions`)."""
        await self.sessions.ensure_loaded(session_id)

    async def new_session(self, chat: Chat, *, actor: PersonKey) -> Outcome:
        """``/new``: end the key's session (cancel, disarm, archive), bind a fresh one."""
        refused = await self._refused(chat.room, actor, "new", "")
        if refused is not None:
            return refused
        return await self.sessions.new_session(chat, actor=actor)

    async def _refused(
        self, chat: ChatKey, actor: PersonKey | None, name: str, args: str
    ) -> Outcome | None:
        """The refusal when the actor's role may not run ``/name args`` in the chat."""
        role = await self.roles.role_of(self.sessions.room(chat), actor)
        if may(role, command_action(name, args)):
            return None
        return Outcome(reply=refusal_text(role))

    async def migrate_chat(self, old: ChatKey, new: ChatKey) -> list[str]:
        """A group moved to a new key: bind its sessions (and its team) to the new one."""
        await self.roles.migrate(old, new)
        return await self.sessions.migrate_chat(old, new)

    # --- roles ------------------------------------------------------------------------------

    async def role_of(self, chat: ChatKey, user_id: PersonKey | None) -> Role:
        """The role of ``user_id`` in the chat (engine.roles; a thread shares its parent's)."""
        return await self.roles.role_of(self.sessions.room(chat), user_id)

    async def team(
        self,
        chat: Chat,
        args: str,
        *,
        actor: PersonKey | None,
        actor_name: str = "",
        target: Person | None = None,
    ) -> Outcome:
        """``/team [add <user> approver | remove <user>]`` in a chat (docs/roles.md)."""
        chat_id = chat.room
        refused = await self._refused(chat_id, actor, "team", args)
        if refused is not None:
            return refused
        role = await self.roles.role_of(chat_id, actor)
        spec = parse_team_args(args)
        if isinstance(spec, str):
            return Outcome(reply=spec)
        if spec.op == "list":
            return Outcome(reply=await describe_team(self.roles, chat_id, viewer_role=role))
        if chat.kind is ChatKind.PRIVATE:
            return Outcome(reply="Roles are kept per group: use /team in the group.")
        assert actor is not None  # only an owner may change the team
        text = await run_team(
            self.roles, chat_id, spec, target=target, actor=Person(actor, actor_name)
        )
        _log.info("plangate.engine.team chat=%s op=%s by=%s", chat_id, spec.op, actor)
        return Outcome(reply=text)

    def inbox_dir(self, session_id: str) -> Path | None:
        """The folder the session's uploads are saved in (None: uploads are off)."""
        root = self.config.inbox_root
        return session_inbox(root, session_id) if root is not None else None

    async def project(self, chat: Chat, args: str, *, actor: PersonKey) -> Outcome:
        """``/project [name]``: show the key's project, or bind the key to another one."""
        refused = await self._refused(chat.room, actor, "project", args)
        if refused is not None:
            return refused
        return await self.sessions.project(chat, args, actor=actor)

    # --- messages, commands, presses --------------------------------------------------------

    async def user_message(
        self,
        session_id: str,
        text: str,
        *,
        actor: PersonKey | None,
        message_id: MessageKey | None,
        feedback: bool = False,
        answer: bool = False,
        attachments: Sequence[Attachment] = (),
    ) -> None:
        """Queue a message for the agent and return at once (never waits for the turn)."""
        await self.sessions.ensure_loaded(session_id)
        await self.commands.message(
            session_id,
            text,
            actor=actor,
            message_id=message_id,
            feedback=feedback,
            answer=answer,
            attachments=attachments,
        )

    async def command(
        self,
        session_id: str,
        name: CommandName,
        args: str,
        *,
        actor: PersonKey | None,
        actor_name: str = "",
    ) -> Outcome:
        """Run a command in the command plane (logged as ``command/run``; opens no turn)."""
        await self.sessions.ensure_loaded(session_id)
        return await self.commands.run(session_id, name, args, actor=actor, actor_name=actor_name)

    async def press(
        self,
        session_id: str,
        press: Press,
        *,
        actor: PersonKey | None,
        message_id: MessageKey | None = None,
        actor_name: str = "",
    ) -> Outcome:
        """A button press bound to the revision it was drawn for; stale presses change nothing."""
        await self.sessions.ensure_loaded(session_id)
        return await self.commands.press(
            session_id, press, actor=actor, message_id=message_id, actor_name=actor_name
        )

    # --- cards ------------------------------------------------------------------------------

    async def plan_card(self, session_id: str) -> PlanCardData:
        """What the plan card shows now (engine.cards has the rule)."""
        return await self.cards.plan_card(session_id)

    async def goal_card(self, session_id: str) -> GoalCardData:
        """What the goal card shows now."""
        return await self.cards.goal_card(session_id)

    def pending_approval(self, session_id: str) -> ApprovalView | None:
        """The tool call this session waits on the owner for ("waiting for you"), if any."""
        return self.approvals.pending(session_id)

    async def set_plan_flow(
        self,
        session_id: str,
        *,
        chat_id: ChatKey,
        thread_id: ChatKey | None,
        card_id: MessageKey | None,
        review_ids: Sequence[MessageKey] | None = None,
        plan_id: str | None = None,
    ) -> None:
        """Remember the plan card's ids in the sidecar's ``flow`` (:meth:`Cards.set_plan_flow`)."""
        await self.cards.set_plan_flow(
            session_id,
            chat_id=chat_id,
            thread_id=thread_id,
            card_id=card_id,
            review_ids=review_ids,
            plan_id=plan_id,
        )

    # --- lifecycle --------------------------------------------------------------------------

    async def start(self) -> list[RestoredGoal]:
        """Start the scheduler; return the live goals that came up disarmed after a restart.

        Loads only the bound sessions the log marks as needing it (an interrupted turn to
        announce, a live goal to come up disarmed, an undecided ``/plan`` or approval); every
        other session loads when its chat next speaks.
        """
        if isinstance(self.scheduler, ApsScheduler):
            self.scheduler.start()
        await self.usage.load()
        restored: list[RestoredGoal] = []
        for session_id in await self.sessions.load_bound():
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
                listed = "\n".join(f"- {clip(m.text, 80, one_line=True)}" for m in dropped)
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
    chat_log: ChatLog,
    sessions: SessionStore,
    plan_store: PlanStore,
    model: ModelProvider,
    channel: Channel,
    config: EngineConfig,
    scheduler: Scheduler | None = None,
    clock: Clock = time.time,
) -> Engine:
    """Assemble an :class:`Engine` from its ports: the one composition of the services.

    One pass, in dependency order, with constructor arguments only: each part is given the
    services it uses, and a part that listens to another subscribes itself when it is built
    (the driver and the cards to the agents' turns, the driver to the plans). No rule lives
    here; tests/test_architecture.py checks that nothing is set on a part afterwards.
    """
    bindings = ChatBindings()
    roles = RoleService(chat_log, owner_ids=config.owner_ids)
    goals = GoalService(log, clock=clock, default_max_rounds=config.max_goal_rounds)
    usage = UsageMeter(
        log, goals=goals, config=config.usage, clock=clock, is_private=bindings.is_private
    )
    # A vote counts while its voter may approve in the session's chat (engine.roles.votes).
    votes = PlanVotes(log, roles=roles, chat_of=bindings.chat_of)
    catalog = ProjectCatalog(config.workspace, config.projects, root=config.projects_root)
    worktrees = Worktrees(
        log,
        channel,
        project_for=workspace_from_store(sessions, default=catalog.default.path, catalog=catalog),
        root=config.worktree_root,
        remote=config.git_remote,
    )
    # Checks run through the same sandbox runner as bash, under the same workspace locks, and
    # in a plan's worktree see the repository's .git read-only as bash does (docs/checks.md);
    # this bash tool is never offered to the model.
    locks = WorkspaceLocks()
    check_bash = BashTool(
        locks=locks, sandbox=config.sandbox, read_only_roots=worktrees.read_only_roots
    )
    checks = SandboxChecks(check_bash, clock=clock)
    approvals = ToolApprovals(
        log,
        channel,
        rules=config.allow_bash,
        timeout_s=config.approval_timeout_s,
        on_unattended=goals.approval_needed,
        ask_writes=config.ask_writes,
        policy=BashPolicy(
            mode=config.bash_approval or default_bash_approval(sandbox=config.sandbox.enabled),
            ask=config.ask_bash,
            network_on=config.sandbox.network or not config.sandbox.enabled,
        ),
        roles=roles,
        chats=bindings,
    )
    # The project's setup (docs/environments.md) runs in the sandbox the checks run in.
    setup = EnvSetup(
        worktrees,
        check_bash,
        channel,
        root=config.environments_root,
        approvals=approvals,
        timeout_s=config.setup_timeout_s,
    )
    plans = PlanService(
        plan_store,
        log,
        criteria=goals,
        clock=clock,
        checks=checks,
        max_plan_bytes=config.max_plan_kb * 1024,
        approvers=votes.approvals,
        # First of the plan's listeners: the worktree is made (or committed) before the cards
        # redraw and before the execution turn is queued.
        # The setup's listener comes after the worktree's: an approval consents to the
        # script the new worktree was made with.
        listeners=(worktrees.on_plan_change, setup.on_plan_change),
        workspace_for=worktrees.workspace_for,
    )
    agents = build_agent(
        log=log,
        model=model,
        channel=channel,
        workspace_for=worktrees.workspace_for,
        plan=PlanServiceAdapter(plans),
        goals=goals,
        extra_tools=[
            PlanTool(plans, ask_owner=approvals.ask_plan_skip),
            TodoWriteTool(log, allow_parallel_in_progress=config.todo_parallel),
            *goal_tools(goals, checks=checks),
        ],
        settings=AgentSettings(
            max_steps=config.max_steps, stuck=config.stuck, vision=config.vision
        ),
        inbox_root=config.inbox_root,
        sandbox=config.sandbox,
        usage=usage,
        approvals=approvals,
        file_limits=config.file_limits,
        read_only_roots=worktrees.read_only_roots,
        workspace_note=worktrees.prompt_note,
        locks=locks,
        prepare=setup.prepare,
    )
    the_scheduler = scheduler or ApsScheduler()
    driver = RoundDriver(
        goals,
        agents,
        the_scheduler,
        plans=plans,
        after_round=IdleRoundWatch(goals, log, limit=config.goal_idle_rounds).round_settled,
    )
    services = Services(
        log=log,
        plans=plans,
        goals=goals,
        agents=agents,
        approvals=approvals,
        usage=usage,
        roles=roles,
        votes=votes,
        channel=channel,
        workspace=catalog.default.path,
        catalog=catalog,
        workspace_for=worktrees.workspace_for,
        worktrees=worktrees,
        setup=setup,
    )
    cards = Cards(services, plan_approvals=config.plan_approvals)
    return Engine(
        services,
        sessions=Sessions(
            sessions, services, cards=cards, bindings=bindings, profile=config.profile
        ),
        commands=CommandPlane(
            services,
            cards=cards,
            chat_of=bindings.chat_of,
            plan_approvals=config.plan_approvals,
            owner_overrides=config.owner_overrides,
            clock=clock,
        ),
        cards=cards,
        driver=driver,
        scheduler=the_scheduler,
        config=config,
    )


__all__ = ["SHUTDOWN_NOTICE", "Engine", "EngineConfig", "build_engine"]
