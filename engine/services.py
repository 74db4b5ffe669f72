"""The process's services, one of each, as the engine's parts use them.

:func:`engine.app.build_engine` builds them once; the sessions, the command plane and the
cards each take this bundle and use the services they need, never the engine itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from engine.agent.controller import AgentRegistry
from engine.approval.service import ToolApprovals
from engine.environments import EnvSetup
from engine.goal.service import GoalService
from engine.plan.service import PlanService
from engine.ports import Channel, EventLog
from engine.projects import ProjectCatalog
from engine.roles.service import RoleService
from engine.roles.votes import PlanVotes
from engine.usage.meter import UsageMeter
from engine.worktree.service import Worktrees


@dataclass(frozen=True, slots=True)
class Services:
    """The event log, the plan, goal, agent, approval, usage and role services, the chat side, the
    projects sessions may be bound to (``workspace`` is the default one's folder) and each
    session's workspace now (``workspace_for``: its project, or its plan's worktree)."""

    log: EventLog
    plans: PlanService
    goals: GoalService
    agents: AgentRegistry
    approvals: ToolApprovals
    usage: UsageMeter
    roles: RoleService
    votes: PlanVotes
    channel: Channel
    workspace: Path
    catalog: ProjectCatalog
    workspace_for: Callable[[str], Awaitable[Path]]
    worktrees: Worktrees
    # Each live worktree's setup script (docs/environments.md); None: no setup at all.
    setup: EnvSetup | None = None


__all__ = ["Services"]
