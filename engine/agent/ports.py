"""What the agent needs from the plan and goal machines, as small Protocols.

The agent does not import the plan or goal services; the composition root passes objects
that satisfy these protocols (``engine.agent.adapters`` wraps ``PlanService`` and
``GoalService``/driver). Tests pass small fakes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from engine.events import GoalRoundSource, MessageSource
from engine.keys import PersonKey
from engine.plan.types import PlanPause, PlanState, PlanTask, is_editing
from engine.tools.effects import Declaration

# The plan service's derived state: none (NoPlan), pre_init (Editing before ``plan init``),
# post_init (Editing after ``init``: only the session ``.md`` is writable), active.
PlanPhase = PlanState


@dataclass(frozen=True, slots=True)
class PlanPromptView:
    """The live plan as the system prompt shows it (read from the sidecar, never the log)."""

    phase: PlanPhase = "none"
    title: str = ""
    revision: int = 0
    md_path: str | None = None
    tasks: Sequence[PlanTask] = field(default_factory=tuple)

    @property
    def is_editing(self) -> bool:
        return is_editing(self.phase)


@dataclass(frozen=True, slots=True)
class ApprovalOutcome:
    """What committing a pending approval did: ``committed`` or not, and why not."""

    committed: bool
    message: str = ""


class PlanPort(Protocol):
    """The plan service as the agent uses it."""

    async def session_md_path(self, session_id: str) -> Path | None:
        """The absolute path of the session's plan ``.md`` (whether or not it exists yet)."""
        ...

    async def md_written(self, session_id: str) -> None:
        """A file tool wrote the session ``.md``: bump revision, sync description, notify."""
        ...

    async def prompt_view(self, session_id: str) -> PlanPromptView:
        """The live plan for the system prompt and the state section."""
        ...

    async def check_tool(
        self,
        session_id: str,
        tool: Declaration | None,
        args: Mapping[str, Any],
        *,
        workspace: Path,
        goal_round: bool = False,
    ) -> str | None:
        """The plan gate for one call of a tool declared ``tool`` (``None``: undeclared):
        ``None`` allows, else the fixed deny reason."""
        ...

    async def commit_plan_mode(self, session_id: str, active: bool) -> None:
        """Commit a pending plan-mode switch (``/plan`` during a turn) at a step boundary."""
        ...

    async def commit_approval(
        self, session_id: str, *, revision: int, actor: PersonKey | None
    ) -> ApprovalOutcome:
        """Commit a pending approval only if ``revision`` is still current."""
        ...

    async def record_pause(self, session_id: str, pause: PlanPause) -> None:
        """Keep one stop of the run in the live plan (its sidecar's ``pauses``)."""
        ...


class GoalPort(Protocol):
    """The goal service as the agent uses it."""

    async def validate_round(self, session_id: str, source: GoalRoundSource) -> bool:
        """``True`` while the round's goal id, revision and round still hold."""
        ...

    async def disarm(self, session_id: str) -> None:
        """Drop the process-local activation (no new revision); the card offers Resume."""
        ...

    async def block_round(
        self, session_id: str, source: GoalRoundSource, *, code: str, message: str
    ) -> None:
        """Block the round's goal (``code``, ``message``) if it is still the active goal."""
        ...


class IdleListener(Protocol):
    """The goal round driver's side of ``notify_idle`` (may be sync or async)."""

    def notify_idle(
        self, session_id: str, *, outcome: str | None = None, goal_id: str | None = None
    ) -> object:
        """A turn ended (``outcome``: how a goal round's turn ended, and ``goal_id`` the goal it
        was a round of; both ``None`` for any other turn or when the session's inbox drained).
        A failed round disarms its goal there."""
        ...


class RunHold(Protocol):
    """Why an approved run cannot do its work yet (the project's setup failed or waits for
    consent): the card's line, the output that says why, the goal's blocked code."""

    @property
    def code(self) -> str: ...

    @property
    def text(self) -> str: ...

    @property
    def evidence(self) -> str: ...


# Before a step of an approved run or a goal round: ``None`` when the work may go on
# (engine.environments.EnvSetup.prepare runs the project's setup first).
RunPreparer = Callable[[str, MessageSource], Awaitable[RunHold | None]]


__all__ = [
    "ApprovalOutcome",
    "GoalPort",
    "IdleListener",
    "PlanPhase",
    "PlanPort",
    "PlanPromptView",
    "RunHold",
    "RunPreparer",
]
