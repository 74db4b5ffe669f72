"""Pending plan-mode switches at step boundaries, and stop() racing itself."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engine.agent.ports import ApprovalOutcome, PlanPromptView
from engine.events import GoalRoundSource, TurnEnd
from engine.model.script import call, say
from engine.tools.base import ToolContext, ToolOutcome
from tests.agent.harness import SID, make_agent
from tests.agent.proc_util import wait_for_file


class FakePlan:
    """A PlanPort that records commits; the switch shows in the prompt once committed."""

    def __init__(self) -> None:
        self.modes: list[bool] = []
        self.phase: Any = "none"

    async def session_md_path(self, session_id: str) -> Path | None:
        return None

    async def md_written(self, session_id: str) -> None:
        return None

    async def prompt_view(self, session_id: str) -> PlanPromptView:
        return PlanPromptView(phase=self.phase)

    async def check_tool(
        self,
        session_id: str,
        tool: object,
        args: Mapping[str, Any],
        *,
        workspace: Path,
        goal_round: bool = False,
    ) -> str | None:
        return None

    async def commit_plan_mode(self, session_id: str, active: bool) -> None:
        self.modes.append(active)
        self.phase = "pre_init" if active else "none"

    async def commit_approval(
        self, session_id: str, *, revision: int, actor: int | None
    ) -> ApprovalOutcome:
        return ApprovalOutcome(committed=False, message="stale")


class PlanPress:
    """A tool whose run is the owner's /plan arriving mid-batch."""

    name = "press_plan"
    description = "test"

    def __init__(self) -> None:
        self.registry: Any = None

    @property
    def parameters(self) -> dict[str, Any]:
        return {"type": "object", "properties": {}}

    def is_concurrency_safe(self, args: dict[str, Any]) -> object:
        return False

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        self.registry.controller(ctx.session_id).request_plan_mode(True)
        return ToolOutcome("pressed")


class Goals:
    async def validate_round(self, session_id: str, source: GoalRoundSource) -> bool:
        return True

    async def disarm(self, session_id: str) -> None:
        return None


async def test_pending_plan_mode_commits_at_the_next_step(tmp_path: Path) -> None:
    plan = FakePlan()
    press = PlanPress()
    agent = make_agent(tmp_path, [call("press_plan"), say("ok")], plan=plan, extra_tools=[press])
    press.registry = agent.registry
    agent.registry.submit(SID, "work")
    await agent.registry.wait_idle(SID)
    assert plan.modes == [True]
    # The first request was before the switch, the second after: policy section appears.
    assert "Plan mode (Editing)" not in agent.scripted.requests[0][0]["content"]
    assert "Plan mode (Editing)" in agent.scripted.requests[1][0]["content"]


async def test_plan_during_a_goal_round_ends_the_round(tmp_path: Path) -> None:
    plan = FakePlan()
    press = PlanPress()
    agent = make_agent(
        tmp_path,
        [call("press_plan"), say("never")],
        plan=plan,
        goals=Goals(),
        extra_tools=[press],
    )
    press.registry = agent.registry
    await agent.registry.submit_round(
        SID, "round", GoalRoundSource(goal_id="g", revision=1, round=1)
    )
    await agent.registry.wait_idle(SID)
    assert plan.modes == [True]
    assert len(agent.scripted.requests) == 1
    end = (await agent.events())[-1]
    assert isinstance(end, TurnEnd) and "plan mode" in end.detail


async def test_two_stops_at_once_close_the_turn_once(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    agent = make_agent(
        tmp_path, [call("bash", {"command": f"sleep 300 & echo $! > {pidfile}; wait"})]
    )
    agent.registry.submit(SID, "long")
    await wait_for_file(pidfile)
    await asyncio.wait_for(asyncio.gather(agent.registry.stop(SID), agent.registry.stop(SID)), 30)
    ends = [e for e in await agent.events() if isinstance(e, TurnEnd)]
    assert [e.outcome for e in ends] == ["cancelled"]
