"""Task criteria reach the goal service after the plan lock is released.

The goal service's listeners (the chat channel) read the plan back; the plan lock is not
reentrant, so a criteria effect applied under it would deadlock ``plan start``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from engine.goal.service import GoalService
from engine.goal.types import GoalSnapshot
from engine.plan.service import PlanService
from engine.plan.types import PlanSidecar
from engine.testing import InMemoryEventLog
from tests.plan.lifecycle_helpers import SID, Harness, RecordingSink, make_store

WAIT_S = 10.0  # a bound on a deadlock, never an assertion about speed


async def test_goal_listener_reading_the_plan_does_not_deadlock_start(tmp_path: Path) -> None:
    home, workspace = tmp_path / "home", tmp_path / "ws"
    workspace.mkdir(parents=True)
    store = make_store(home, workspace)
    log = InMemoryEventLog()
    goals = GoalService(log)
    plans = PlanService(store, log, criteria=goals)
    h = Harness(home, workspace, store, log, RecordingSink(), plans)
    seen: list[tuple[GoalSnapshot | None, PlanSidecar | None]] = []

    async def channel(session_id: str, goal: GoalSnapshot | None) -> None:
        # What the chat channel does on a goal change: redraw from the plan as well.
        seen.append((goal, await plans.current(session_id)))

    goals.add_listener(channel)
    out = await h.tool(
        op="init", title="Chores", tasks=[{"title": "a", "acceptance_criteria": ["tests pass"]}]
    )
    assert not out.is_error, out.content
    out = await asyncio.wait_for(h.tool(op="start"), WAIT_S)
    assert not out.is_error, out.content
    goal = await goals.get(SID)
    assert goal is not None and goal.source == "task"
    assert seen and seen[-1][1] is not None and seen[-1][1].tasks[0].status == "in_progress"
