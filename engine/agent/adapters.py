"""Adapters from the plan and goal services to the agent's ports (engine.agent.ports).

:class:`PlanServiceAdapter` wraps :class:`~engine.plan.service.PlanService` and its gate;
``GoalService`` satisfies :class:`~engine.agent.ports.GoalPort` as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engine.agent.controller import LAPSED_TEXT
from engine.agent.ports import ApprovalOutcome, PlanPromptView
from engine.keys import PersonKey
from engine.plan.gate import check_gate
from engine.plan.service import PlanService
from engine.plan.types import PlanPause
from engine.tools.effects import Declaration


class PlanServiceAdapter:
    """:class:`~engine.agent.ports.PlanPort` over a ``PlanService``.

    ``working_directory`` is written into a pre-init sidecar when a pending ``/plan``
    commits at a step boundary.
    """

    def __init__(self, service: PlanService) -> None:
        self.service = service

    async def session_md_path(self, session_id: str) -> Path | None:
        return await self.service.md_path(session_id)

    async def md_written(self, session_id: str) -> None:
        await self.service.md_written(session_id)

    async def prompt_view(self, session_id: str) -> PlanPromptView:
        state = await self.service.state(session_id)
        sidecar = await self.service.current(session_id)
        if sidecar is None:
            return PlanPromptView(phase=state)
        md_path = await self.service.md_path(session_id)
        return PlanPromptView(
            phase=state,
            title=sidecar.title,
            revision=sidecar.revision,
            md_path=str(md_path),
            tasks=tuple(sidecar.tasks),
        )

    async def check_tool(
        self,
        session_id: str,
        tool: Declaration | None,
        args: Mapping[str, Any],
        *,
        workspace: Path,
        goal_round: bool = False,
    ) -> str | None:
        view = await self.service.gate_view(session_id)
        return check_gate(tool, args, view, workspace=workspace, goal_round=goal_round)

    async def commit_plan_mode(self, session_id: str, active: bool) -> None:
        # Plan mode is entered by /plan (pre-init); it is left by approve or discard, which
        # have their own paths, so a pending "off" has nothing to commit here.
        if active:
            await self.service.enter_pre_init(session_id)

    async def record_pause(self, session_id: str, pause: PlanPause) -> None:
        await self.service.record_pause(session_id, pause)

    async def commit_approval(
        self, session_id: str, *, revision: int, actor: PersonKey | None
    ) -> ApprovalOutcome:
        result = await self.service.approve(session_id, revision=revision, actor=actor)
        if result.ok:
            return ApprovalOutcome(committed=True, message=result.text)
        if result.code == "approve-stale":
            # The planner changed the plan between the press and the commit.
            return ApprovalOutcome(committed=False, message=LAPSED_TEXT)
        return ApprovalOutcome(
            committed=False,
            message=f"The approval did not go through: {result.text} The card is back in review.",
        )


__all__ = ["PlanServiceAdapter"]
