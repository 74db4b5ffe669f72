"""One factory that assembles the agent: :func:`build_agent`.

The composition root passes the stores, the model, the channel and (optionally) the plan and
goal machines; this builds the agent's own tools (file tools, bash, ask_user, send_file)
sharing one set of workspace locks, adds the caller's tools (plan, todo_write, goal tools),
and returns the :class:`~engine.agent.controller.AgentRegistry`. The goal round driver, built
after it (the registry is its ``RoundTarget``), subscribes itself to the registry's idle signal.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from engine.agent.config import AgentDeps, WorkspaceResolver
from engine.agent.controller import AgentRegistry
from engine.agent.ports import GoalPort, IdleListener, PlanPort, RunPreparer
from engine.agent.settings import AgentSettings
from engine.approval.service import ToolApprovals
from engine.model.types import ModelProvider
from engine.plan.gate import PlanGateView
from engine.ports import Channel, EventLog, SessionStore
from engine.projects import ProjectCatalog
from engine.tools.ask import AskUserTool
from engine.tools.base import Tool
from engine.tools.bash import BashLimits, BashTool
from engine.tools.boundary import BoundaryPolicy, PlanViewSource, ReadOnlyRoots
from engine.tools.disk import DiskReserve
from engine.tools.files import FileLimits, file_tools
from engine.tools.sandbox import SandboxSettings
from engine.tools.send import SendFileTool
from engine.tools.workspace import WorkspaceLocks
from engine.usage.meter import UsageMeter

_log = logging.getLogger("plangate.agent.build")


def workspace_from_store(
    sessions: SessionStore, *, default: Path, catalog: ProjectCatalog | None = None
) -> WorkspaceResolver:
    """A resolver that reads the session's bound workspace, ``default`` when it has none.

    With a ``catalog``, a workspace that is no longer one of its projects (the settings
    changed) is never used: the session works in ``default`` and a warning is logged. A
    session's folder never changes, so each is read from the store once.
    """
    known: dict[str, Path] = {}

    async def resolve(session_id: str) -> Path:
        found = known.get(session_id)
        if found is None:
            record = await sessions.get_session(session_id)
            found = Path(record.workspace) if record is not None and record.workspace else default
            known[session_id] = found
        # The default is what a refused folder falls back to, so it needs no check (the
        # check resolves the path on disk, at every /status and turn).
        if catalog is not None and found != default and not catalog.allows(found):
            _log.warning(
                "plangate.agent.workspace_not_a_project session=%s workspace=%s",
                session_id,
                found,
            )
            return default
        return found

    return resolve


def plan_view_source(plan: PlanPort) -> PlanViewSource:
    """What ``bash`` reads at each call: the plan state and the session ``.md``'s path."""

    async def view(session_id: str) -> PlanGateView:
        phase = (await plan.prompt_view(session_id)).phase
        return PlanGateView(state=phase, md_path=await plan.session_md_path(session_id))

    return view


def agent_tools(
    channel: Channel,
    *,
    plan: PlanPort | None = None,
    locks: WorkspaceLocks | None = None,
    file_limits: FileLimits | None = None,
    bash_limits: BashLimits | None = None,
    sandbox: SandboxSettings | None = None,
    read_only_roots: ReadOnlyRoots | None = None,
    disk: DiskReserve | None = None,
) -> tuple[list[Tool], BashTool]:
    """The agent's own tools (read_file, list_files, grep, write_file, edit_file, bash,
    ask_user, send_file) and the bash tool itself (for ``kill_session``).

    They share one :class:`BoundaryPolicy`: the same workspace, phase, hidden paths and
    read-only roots decide the file tools' checks, what send_file may send and bash's mounts.
    """
    shared = locks or WorkspaceLocks()
    policy = BoundaryPolicy(
        settings=sandbox or SandboxSettings(),
        plan_view=plan_view_source(plan) if plan is not None else None,
        read_only_roots=read_only_roots,
    )
    bash = BashTool(locks=shared, limits=bash_limits, boundary=policy, disk=disk)
    tools: list[Tool] = [*file_tools(hooks=plan, locks=shared, limits=file_limits, boundary=policy)]
    tools.extend([bash, AskUserTool(channel), SendFileTool(channel, boundary=policy)])
    return tools, bash


def build_agent(
    *,
    log: EventLog,
    model: ModelProvider,
    channel: Channel,
    workspace_for: WorkspaceResolver,
    plan: PlanPort | None = None,
    goals: GoalPort | None = None,
    driver: IdleListener | None = None,
    extra_tools: Sequence[Tool] = (),
    settings: AgentSettings | None = None,
    file_limits: FileLimits | None = None,
    bash_limits: BashLimits | None = None,
    sandbox: SandboxSettings | None = None,
    usage: UsageMeter | None = None,
    approvals: ToolApprovals | None = None,
    read_only_roots: ReadOnlyRoots | None = None,
    inbox_root: Path | None = None,
    locks: WorkspaceLocks | None = None,
    workspace_note: Callable[[str], Awaitable[str]] | None = None,
    disk: DiskReserve | None = None,
    prepare: RunPreparer | None = None,
) -> AgentRegistry:
    """Assemble the agent. ``extra_tools`` are the plan, todo and goal tools.

    ``plan`` is a :class:`~engine.agent.ports.PlanPort` (wrap ``PlanService`` in
    :class:`engine.agent.adapters.PlanServiceAdapter`); ``goals`` is the ``GoalService``;
    ``driver`` is told when a session goes idle (a driver built later subscribes itself
    with ``listen_idle``); ``approvals`` is the owner's approval gate (none: every call the
    plan gate allows runs); ``locks`` are the workspace
    locks the tools share (pass the ones the check runner holds too); ``read_only_roots``
    names what bash sees read-only besides the workspace (a plan worktree's repository);
    ``workspace_note`` adds a line about the workspace to the prompt; ``prepare`` runs
    before each step of an approved run or a goal round (the project's setup); ``disk`` is
    the room kept for plangate's own writes (bash stops below it, an unattended run pauses).
    """
    own, bash = agent_tools(
        channel,
        plan=plan,
        locks=locks,
        file_limits=file_limits,
        bash_limits=bash_limits,
        sandbox=sandbox,
        read_only_roots=read_only_roots,
        disk=disk,
    )
    deps = AgentDeps(
        log=log,
        model=model,
        channel=channel,
        tools=[*own, *extra_tools],
        workspace_for=workspace_for,
        plan=plan,
        goals=goals,
        stop_hooks=(bash.kill_session,),
        boundary=bash.boundary,
        settings=settings or AgentSettings(),
        usage=usage,
        approvals=approvals,
        inbox_root=inbox_root,
        workspace_note=workspace_note,
        disk=disk,
        prepare=prepare,
    )
    return AgentRegistry(deps, driver=driver)


__all__ = ["agent_tools", "build_agent", "plan_view_source", "workspace_from_store"]
