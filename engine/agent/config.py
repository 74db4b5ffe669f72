"""The agent's settings and collaborators, gathered in two plain records.

:class:`AgentDeps` is the documented constructor list of the agent: the composition root (the
CLI's ``run``, the demo, the end-to-end tests) fills it, usually through
:func:`engine.agent.build.build_agent`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from engine.agent.channel import Channel
from engine.agent.checklist import DEFAULT_STALL_STEPS
from engine.agent.history import SessionHistory
from engine.agent.ports import GoalPort, PlanPort
from engine.approval.service import ToolApprovals
from engine.model.types import ModelProvider
from engine.ports import EventLog
from engine.tools.base import Tool
from engine.usage.meter import UsageMeter

WorkspaceResolver = Callable[[str], Awaitable[Path]]


@dataclass(frozen=True, slots=True)
class AgentSettings:
    """Limits of a turn and of the context (sizes in characters, not tokens)."""

    max_steps: int = 50
    # The verbatim part of the context; older turns become an extractive summary.
    context_budget_chars: int = 120_000
    # The summary's own share; its oldest lines go first when it is over.
    summary_budget_chars: int = 8_000
    # A single tool result in the context is cut here (tools cut their own output first).
    tool_result_cap_chars: int = 16_000
    # The text that opens the execution turn queued when a pending approval commits at a
    # turn's end (an approval committed mid-turn just lets the running turn go on Active).
    execution_prompt: str = (
        "The plan is approved. Work through the checklist: call plan start, do the task, "
        "then plan complete with evidence, and continue with the next task."
    )
    # The text of each continuation of an approved checklist (engine.agent.checklist).
    continue_prompt: str = (
        "Continue the approved plan: call plan start for the next pending task, do it, then "
        "plan complete with evidence."
    )
    # Steps in a row without checklist progress after which a checklist run stops, stalled.
    stall_steps: int = DEFAULT_STALL_STEPS


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


__all__ = ["AgentDeps", "AgentSettings", "WorkspaceResolver"]
