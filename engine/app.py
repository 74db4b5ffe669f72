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
from dataclasses import dataclass, field
from pathlib import Path

from engine.agent.adapters import PlanServiceAdapter
from engine.agent.build import build_agent, workspace_from_store
from engine.agent.settings import DEFAULT_MAX_STEPS, AgentSettings
from engine.api import EngineApi, RestoredGoal
from engine.approval.policy import (
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
from engine.goal.driver import RoundDriver
from engine.goal.progress import IdleRoundWatch
from engine.goal.service import DEFAULT_MAX_GOAL_ROUNDS, GoalService
from engine.goal.tools import goal_tools
from engine.keys import ChatKey, PersonKey
from engine.model.types import ModelProvider
from engine.plan.digest import DEFAULT_MAX_PLAN_KB
from engine.plan.service import PlanService
from engine.plan.store import PlanStore
from engine.plan.tool import PlanTool
from engine.ports import Channel, ChatLog, Clock, EventLog, SessionStore
from engine.progress.stuck import StuckLimits
from engine.projects import ProjectCatalog
from engine.roles.service import RoleService
from engine.roles.votes import PlanVotes
from engine.scheduler import ApsScheduler, Scheduler
from engine.services import Services
from engine.sessions import Sessions
from engine.tasks import safe_call
from engine.text import clip
from engine.todo.tool import TodoWriteTool
from engine.tools.bash import BashTool
from engine.tools.disk import DiskReserve
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
    """The settings the engine itself reads, with their defaults: the one place they live
    (``bot.settings`` builds each ``PLANGATE_*`` default from :data:`ENGINE_DEFAULTS`)."""

    workspace: Path
    profile: str | None = None
    max_goal_rounds: int = DEFAULT_MAX_GOAL_ROUNDS
    todo_parallel: bool = True
    max_steps: int = DEFAULT_MAX_STEPS
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
    # ``(what, folder)`` of plangate's own files (interpreter, venv, package, home): a project
    # holding one is refused by ``/project`` (engine.tools.host; bot.compose fills it).
    protected: tuple[tuple[str, Path], ...] = ()
    # The room kept for plangate's own writes on its home's disk (PLANGATE_DISK_RESERVE_MB;
    # engine/tools/disk.py), and that home (bot.compose fills it). 0 or no home: no reserve.
    disk_reserve_mb: int = 0
    home: Path | None = None
    # A project's setup script (docs/environments.md): its timeout (PLANGATE_SETUP_TIMEOUT)
    # and where the consent to it and its package caches are kept (``<home>/environments``;
    # None: consent in memory, no caches).
    setup_timeout_s: float = DEFAULT_SETUP_TIMEOUT_S
    environments_root: Path | None = None


# The engine's configuration as it comes by default (its workspace aside): what the settings
# layer's defaults are read from.
ENGINE_DEFAULTS = EngineConfig(workspace=Path("."))


class Engine:
    """One process's plangate: its services, composed; start-up and shutdown.

    Each :class:`EngineApi` verb is the owner's own method, handed out as it is (no facade
    method repeats it): the sessions (bindings, ``/new``, ``/project``, migration, the
    inbox), the command plane (messages, commands, presses, ``/team``), the roles, the cards.
    The parts are public for tests and tools that read state (``plans``, ``goals``,
    ``agents``, ``usage``, ``approvals``, ``worktrees``, ``log``); front ends use only the
    :class:`EngineApi` verbs.
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
        # The verbs of EngineApi, each its owner's (docs/architecture.md "One declaration").
        self.session_for_chat = sessions.for_chat
        self.ensure_loaded = sessions.ensure_loaded
        self.new_session = sessions.new_session
        self.project = sessions.project
        self.migrate_chat = sessions.migrate_chat
        self.inbox_dir = sessions.inbox_dir
        self.user_message = commands.user_message
        self.command = commands.command
        self.press = commands.press
        self.team = commands.team
        self.role_of = services.roles.role_of
        self.plan_card = cards.plan_card
        self.goal_card = cards.goal_card
        self.set_plan_flow = cards.set_plan_flow
        self.set_goal_card = cards.set_goal_card
        # The tool call a session waits on the owner for, if any (for tests and tools).
        self.pending_approval = services.approvals.pending

    # --- lifecycle --------------------------------------------------------------------------

    async def start(self, *, recover: bool = True) -> list[RestoredGoal]:
        """Start the scheduler; return the live goals that came up disarmed after a restart.

        Loads only the bound sessions the log marks as needing it (an interrupted turn to
        announce, a live goal to come up disarmed, an undecided ``/plan`` or approval); every
        other session loads when its chat next speaks. ``recover=False``: a replica among
        several, which recovers each chat when it takes the chat's lease (:meth:`chat_taken`)
        and must not load chats other replicas hold; nothing is loaded here then.
        """
        if isinstance(self.scheduler, ApsScheduler):
            self.scheduler.start()
        await self.usage.load()
        if not recover:
            return []
        return self._restored(await self.sessions.load_bound())

    def _restored(self, loaded: list[str]) -> list[RestoredGoal]:
        restored: list[RestoredGoal] = []
        for session_id in loaded:
            goal = self.goals.peek(session_id)  # loading just read it
            if goal is not None and goal.phase == "active" and goal.source != "task":
                restored.append(RestoredGoal(session_id=session_id, goal=goal))
        return restored

    async def chat_taken(self, chat: ChatKey) -> list[RestoredGoal]:
        """This replica took ``chat``'s lease with a new epoch: recover the chat's sessions
        as a restart does (:meth:`engine.sessions.Sessions.chat_taken`); returns the live goals
        that came up disarmed, for the front end to offer Resume as after a restart."""
        return self._restored(await self.sessions.chat_taken(chat))

    async def chat_lost(self, chat: ChatKey) -> list[str]:
        """This replica lost ``chat``'s lease (renewal failed, or a write raised
        ``LeaseLost``): its sessions' turns are cancelled, their bash processes killed, their
        goals disarmed, and nothing more is done or said for them here
        (:meth:`engine.sessions.Sessions.chat_lost`); returns those sessions."""
        return await self.sessions.chat_lost(chat)

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
    roles = RoleService(chat_log, owner_ids=config.owner_ids, room=bindings.room)
    goals = GoalService(log, clock=clock, default_max_rounds=config.max_goal_rounds)
    usage = UsageMeter(
        log, goals=goals, config=config.usage, clock=clock, is_private=bindings.is_private
    )
    # A vote counts while its voter may approve in the session's chat (engine.roles.votes).
    votes = PlanVotes(log, roles=roles, chat_of=bindings.chat_of)
    catalog = ProjectCatalog(
        config.workspace,
        config.projects,
        root=config.projects_root,
        protected=config.protected,
        # A secret file in a project's git history is readable through git: /project refuses.
        secret_files=(*config.sandbox.hidden_names, *map(str, config.sandbox.hidden)),
    )
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
    disk = DiskReserve(config.home, config.disk_reserve_mb) if config.home is not None else None
    if disk is not None:
        disk.hold()  # taken at start; see engine/tools/disk.py
    # Setup runs through this tool too: it counts against the same disk reserve.
    check_bash = BashTool(
        locks=locks, sandbox=config.sandbox, read_only_roots=worktrees.read_only_roots, disk=disk
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
        disk=disk,
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
    the_sessions = Sessions(
        sessions,
        services,
        cards=cards,
        bindings=bindings,
        profile=config.profile,
        inbox_root=config.inbox_root,
    )
    return Engine(
        services,
        sessions=the_sessions,
        commands=CommandPlane(
            services,
            cards=cards,
            ensure_loaded=the_sessions.ensure_loaded,
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


# Checked by the type checker: the engine is what front ends are given.
_IS_THE_API: type[EngineApi] = Engine

__all__ = ["ENGINE_DEFAULTS", "SHUTDOWN_NOTICE", "Engine", "EngineConfig", "build_engine"]
