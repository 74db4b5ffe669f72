"""The driver against the real agent (AgentRegistry as RoundTarget) and the scripted model."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from engine.agent.controller import AgentRegistry
from engine.events import GoalRoundSource, SessionEvent, TurnEnd, UserMessage
from engine.goal.service import GoalService
from engine.goal.tools import goal_tools
from engine.goal.types import GoalSnapshot
from engine.model.script import ScriptStep, call, say
from engine.testing import InMemoryEventLog
from engine.todo.tool import TodoWriteTool
from tests.agent.harness import goal_rounds, make_agent

SID = "s1"
WAIT_S = 20.0


def _ended(goals: GoalService, goal: GoalSnapshot | None) -> bool:
    return goal is not None and goal.phase in ("blocked", "complete")


async def run_goal(
    tmp_path: Path,
    script: list[ScriptStep],
    max_rounds: int,
    *,
    until: Callable[[GoalService, GoalSnapshot | None], bool] = _ended,
) -> tuple[GoalService, list[SessionEvent]]:
    def agent(log: InMemoryEventLog, goals: GoalService) -> AgentRegistry:
        tools = [*goal_tools(goals), TodoWriteTool(log)]
        return make_agent(tmp_path, script, goals=goals, extra_tools=tools, log=log).registry

    async with goal_rounds(agent) as rounds:
        goals, registry, log = rounds.goals, rounds.target, rounds.log
        done = asyncio.Event()

        def on_change(session_id: str, goal: GoalSnapshot | None) -> None:
            if until(goals, goal):
                done.set()

        goals.add_listener(on_change)
        goal = await goals.create(SID, "keep going", max_rounds=max_rounds, arm=True)
        assert isinstance(goal, GoalSnapshot)
        await asyncio.wait_for(done.wait(), WAIT_S)
        await asyncio.wait_for(registry.wait_idle(SID), WAIT_S)
    return goals, [e.event for e in await log.read(SID)]


async def test_real_agent_runs_rounds_one_to_n_then_round_limit(tmp_path: Path) -> None:
    script = [
        call("todo_write", {"todos": [{"content": "look", "status": "in_progress"}]}),
        say("round one done"),
        say("round two done"),
    ]
    goals, events = await run_goal(tmp_path, script, max_rounds=2)
    rounds = [
        e.source.round
        for e in events
        if isinstance(e, UserMessage) and isinstance(e.source, GoalRoundSource)
    ]
    assert rounds == [1, 2]
    goal = await goals.get(SID)
    assert goal is not None and goal.blocked is not None
    assert goal.blocked.code == "round-limit" and goal.rounds_started == 2


async def test_real_agent_round_completes_goal(tmp_path: Path) -> None:
    script = [call("update_goal", {"status": "complete"}), say("done")]
    goals, _ = await run_goal(tmp_path, script, max_rounds=5)
    goal = await goals.get(SID)
    assert goal is not None and goal.phase == "complete" and goal.rounds_started == 1


async def test_a_round_whose_turn_fails_disarms_the_goal(tmp_path: Path) -> None:
    # The script expects what the round's prompt does not say: the model call fails
    # (ScriptDivergence is a ModelError), so the round's turn ends "failed".
    script = [say("never sent", expect="a text no round prompt has")]
    goals, events = await run_goal(
        tmp_path,
        script,
        max_rounds=5,
        until=lambda g, goal: goal is not None and not g.is_armed(SID),
    )
    goal = await goals.get(SID)
    assert goal is not None and goal.phase == "active" and goal.rounds_started == 1
    assert not goals.is_armed(SID)  # stopped, not ended: the card offers Resume
    ends = [e.outcome for e in events if isinstance(e, TurnEnd)]
    assert ends == ["failed"]
