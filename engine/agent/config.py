"""The agent's collaborators, gathered in one plain record (its settings beside them).

:class:`AgentDeps` is the documented constructor list of the agent: the composition root (the
CLI's ``run``, the demo, the end-to-end tests) fills it, usually through
:func:`engine.agent.build.build_agent`. :class:`AgentSettings` lives in
``engine.agent.settings`` (the context builder reads it without the collaborators).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from engine.agent.history import SessionHistory
from engine.agent.ports import GoalPort, PlanPort, RunPreparer
from engine.agent.settings import AgentSettings
from engine.approval.service import ToolApprovals
from engine.model.types import ModelProvider
from engine.ports import Channel, EventLog
from engine.tools.base import Tool
from engine.tools.boundary import BoundaryPolicy
from engine.tools.disk import DiskReserve
from engine.usage.meter import UsageMeter

WorkspaceResolver = Callable[[str], Awaitable[Path]]


@dataclass(slots=True)
class AgentDeps:
    """Everything a session controller needs.

    ``tools`` is the whole catalogue the model sees (the agent's own file tools, bash and
    ask_user plus the plan, todo and goal tools). ``plan`` and ``goals`` may be ``None`` in
    tests: no plan gate, no goal-round validation.
    """

    log: EventLog
    model: ModelProvider
    channel: Channel
    tools: Sequence[Tool]
    workspace_for: WorkspaceResolver
    plan: PlanPort | None = None
    goals: GoalPort | None = None
    # Called by stop() right after cancelling the turn (bash's kill_session).
    stop_hooks: Sequence[Callable[[str], Awaitable[None]]] = ()
    settings: AgentSettings = field(default_factory=AgentSettings)
    # The owner's approval of risky calls (bash in NoPlan and Active); None: no approvals.
    approvals: ToolApprovals | None = None
    # Each session's events read so far: a step reads only the log's new tail.
    history: SessionHistory = field(default_factory=SessionHistory)
    # Usage accounting and the token limits checked before each model call (None: neither).
    usage: UsageMeter | None = None
    # The root of the session inboxes (engine.inbox): each session's is a read-only root
    # of its file tools. None: no inbox.
    inbox_root: Path | None = None
    # What every tool call may see (engine/tools/boundary.py): a hidden path argument of any
    # tool is refused before the gate. None: no such check (tests of the loop alone).
    boundary: BoundaryPolicy | None = None
    # A line for the prompt's workspace section (a plan's git worktree says what it is).
    workspace_note: Callable[[str], Awaitable[str]] | None = None
    # The room kept for plangate's own writes (PLANGATE_DISK_RESERVE_MB): below it an
    # unattended run pauses with the reason. None: no reserve.
    disk: DiskReserve | None = None
    # Before each step of an approved run or a goal round: the project's setup runs first
    # (docs/environments.md); a hold pauses the run or blocks the goal. None: nothing to do.
    prepare: RunPreparer | None = None


__all__ = ["AgentDeps", "WorkspaceResolver"]
