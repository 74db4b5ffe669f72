"""The model-facing goal tools: get_goal, create_goal, update_goal (docs/goals.md).

Authority comes from ``ToolContext.source`` (the message that opened the turn), never from the
arguments. An autonomous round (:class:`GoalRoundSource`) may read the goal, complete it or
block it (code ``model-reported``) and only for the exact goal, revision and round it was
dispatched for; it may not create, edit, pause or resume. A turn a person opened may create a
goal (disarmed: the owner presses Start) and may pass ``objective`` to edit. All three tools are
exclusive (ordering barriers in the runtime).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from engine.checks.report import failure_report, result_line
from engine.checks.runner import CheckRunner
from engine.events import GoalRoundSource
from engine.goal.fold import GoalRefusal, refusal
from engine.goal.service import GoalService
from engine.goal.types import GoalRef, GoalSnapshot
from engine.tools.base import Tool, ToolContext, ToolOutcome
from engine.tools.effects import BUILTIN


class GetGoalArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CreateGoalArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    objective: str = Field(min_length=1)
    max_rounds: int | None = Field(default=None, ge=1)


class UpdateGoalArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: Literal["complete", "blocked"] | None = None
    reason: str | None = None
    objective: str | None = None


def goal_view(goal: GoalSnapshot) -> dict[str, Any]:
    """The goal as the model sees it."""
    view: dict[str, Any] = {
        "id": goal.id,
        "revision": goal.revision,
        "objective": goal.objective,
        "status": goal.phase,
        "rounds_started": goal.rounds_started,
        "max_rounds": goal.max_goal_rounds,
        "source": goal.source,
    }
    if goal.blocked is not None:
        view["blocked"] = {"code": goal.blocked.code, "message": goal.blocked.message}
    if goal.schedule_s is not None:
        view["schedule_s"] = goal.schedule_s
    if goal.checks:
        view["checks"] = list(goal.checks)
    return view


def _ok(goal: GoalSnapshot, lead: str = "") -> ToolOutcome:
    text = json.dumps(goal_view(goal), ensure_ascii=False)
    return ToolOutcome(content=f"{lead}\n{text}" if lead else text)


def _error(refused: GoalRefusal, detail: str = "") -> ToolOutcome:
    message = detail or refused.message
    return ToolOutcome(content=f"error [{refused.code}]: {message}", is_error=True)


class _ExclusiveTool:
    """Goal tools never opt into parallel runs."""

    def is_concurrency_safe(self, args: dict[str, Any]) -> object:
        return False


class GetGoalTool(_ExclusiveTool):
    name = "get_goal"
    declaration = BUILTIN["get_goal"]
    description = "Show the session's goal: objective, status, rounds used and the cap."
    args_model = GetGoalArgs
    parameters: dict[str, Any] = {  # noqa: RUF012 - read-only schema
        "type": "object",
        "properties": {},
        "additionalProperties": False,
    }

    def __init__(self, goals: GoalService) -> None:
        self._goals = goals

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        goal = await self._goals.get(ctx.session_id)
        if goal is None:
            return ToolOutcome(content="no goal is set in this session")
        return _ok(goal)


class CreateGoalTool(_ExclusiveTool):
    name = "create_goal"
    declaration = BUILTIN["create_goal"]
    description = (
        "Propose a goal for this session: an objective the agent keeps working toward round "
        "after round. It starts paused until the owner presses Start. Refused while another "
        "goal is set and not complete, and inside an autonomous goal round."
    )
    args_model = CreateGoalArgs
    parameters: dict[str, Any] = {  # noqa: RUF012 - read-only schema
        "type": "object",
        "properties": {
            "objective": {"type": "string", "description": "What done looks like."},
            "max_rounds": {
                "type": "integer",
                "minimum": 1,
                "description": "Round cap; the deployment default when omitted.",
            },
        },
        "required": ["objective"],
        "additionalProperties": False,
    }

    def __init__(self, goals: GoalService) -> None:
        self._goals = goals

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        if isinstance(ctx.source, GoalRoundSource):
            return _error(refusal("not-allowed"), "an autonomous goal round may not create a goal")
        parsed = CreateGoalArgs.model_validate(args)
        result = await self._goals.create(
            ctx.session_id, parsed.objective, max_rounds=parsed.max_rounds, source="model"
        )
        if isinstance(result, GoalRefusal):
            return _error(result)
        return _ok(result, "goal created; it runs once the owner presses Start")


class UpdateGoalTool(_ExclusiveTool):
    name = "update_goal"
    declaration = BUILTIN["update_goal"]
    description = (
        'Report on the goal: status "complete" when the objective is met (verified against '
        'the workspace), or "blocked" with a reason when you cannot go on without help. '
        "A goal with checks completes only when plangate's run of them passes; otherwise the "
        "failing output comes back and the goal stays active. "
        "Outside a goal round you may also pass a new objective."
    )
    args_model = UpdateGoalArgs
    parameters: dict[str, Any] = {  # noqa: RUF012 - read-only schema
        "type": "object",
        "properties": {
            "status": {"type": "string", "enum": ["complete", "blocked"]},
            "reason": {"type": "string", "description": "Why; say it when blocked."},
            "objective": {
                "type": "string",
                "description": "A new objective (not allowed in an autonomous round).",
            },
        },
        "additionalProperties": False,
    }

    def __init__(self, goals: GoalService, *, checks: CheckRunner | None = None) -> None:
        self._goals = goals
        self._checks = checks

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        parsed = UpdateGoalArgs.model_validate(args)
        if parsed.status is None and parsed.objective is None:
            return ToolOutcome(content="error: pass status, objective or both", is_error=True)
        goal = await self._goals.get(ctx.session_id)
        source = ctx.source
        if isinstance(source, GoalRoundSource):
            if parsed.objective is not None:
                return _error(refusal("not-allowed"))
            # The round may act only on the goal version and round it was dispatched for.
            if goal is None or (goal.id, goal.revision, goal.rounds_started) != (
                source.goal_id,
                source.revision,
                source.round,
            ):
                return _error(refusal("stale-revision"))
            ref = GoalRef(id=source.goal_id, revision=source.revision)
        else:
            if goal is None:
                return _error(refusal("no-goal"))
            ref = goal.ref
        if parsed.objective is not None:
            edited = await self._goals.edit(ctx.session_id, ref, objective=parsed.objective)
            if isinstance(edited, GoalRefusal):
                return _error(edited)
            ref = edited.ref
            goal = edited
        if parsed.status == "complete":
            current = goal if goal is not None and goal.ref == ref else None
            if current is not None and current.checks:
                return await self._complete_checked(ctx, current)
            result = await self._goals.complete(ctx.session_id, ref)
        elif parsed.status == "blocked":
            message = (parsed.reason or "").strip() or "the model reported it cannot go on"
            result = await self._goals.block(
                ctx.session_id, ref, code="model-reported", message=message
            )
        else:
            assert goal is not None
            return _ok(goal, "goal updated")
        if isinstance(result, GoalRefusal):
            return _error(result)
        return _ok(result, f"goal {result.phase}")

    async def _complete_checked(self, ctx: ToolContext, goal: GoalSnapshot) -> ToolOutcome:
        """Run the goal's checks (no lock held); the claim stands only if they all pass."""
        if self._checks is None:
            return ToolOutcome(
                content="error [checks-failed]: this goal has checks and plangate cannot run "
                "them here; tell the owner",
                is_error=True,
            )
        run = await self._checks.run(
            list(goal.checks), session_id=ctx.session_id, workspace=ctx.workspace
        )
        result = await self._goals.complete_checked(ctx.session_id, goal.ref, run)
        if isinstance(result, GoalRefusal):
            detail = result.message
            if result.code == "checks-failed":
                detail += ". plangate ran:\n" + failure_report(run)
            return _error(result, detail)
        lines = "; ".join(result_line(r) for r in run.results)
        return _ok(result, f"checks passed: {lines}. goal complete")


def goal_tools(goals: GoalService, *, checks: CheckRunner | None = None) -> list[Tool]:
    """The three goal tools over one service; ``checks`` runs a goal's checks on complete."""
    return [GetGoalTool(goals), CreateGoalTool(goals), UpdateGoalTool(goals, checks=checks)]


__all__ = [
    "CreateGoalTool",
    "GetGoalTool",
    "UpdateGoalTool",
    "goal_tools",
    "goal_view",
]
