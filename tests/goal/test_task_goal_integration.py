"""PlanService drives GoalService as its TaskCriteriaSink (a task goal is a label)."""

from __future__ import annotations

from pathlib import Path

from engine.goal.service import GoalService
from engine.goal.types import GoalSnapshot
from engine.plan.machine import TaskSpec
from engine.plan.service import PlanService
from engine.testing import InMemoryEventLog
from storage.plan_files import FilePlanStore, SessionLocation

SID = "s1"


async def test_started_task_becomes_task_goal_and_user_goal_wins(tmp_path: Path) -> None:
    log = InMemoryEventLog()
    goals = GoalService(log)

    async def locate(session_id: str) -> SessionLocation:
        return SessionLocation(workspace=str(tmp_path))

    plans = PlanService(FilePlanStore(tmp_path / "home", locate), log, criteria=goals)
    tasks = [
        TaskSpec(title="Parser", acceptance_criteria=("parses lists",)),
        TaskSpec(title="Renderer", acceptance_criteria=("renders lists",)),
    ]
    result = await plans.init(SID, title="Lists", mode="checklist", tasks=tasks, workspace=tmp_path)
    assert result.ok, result
    assert (await plans.start(SID)).ok
    label = await goals.get(SID)
    assert label is not None and label.source == "task"
    assert label.objective == "Parser\n- parses lists"
    assert not goals.is_armed(SID)
    assert (await plans.complete(SID)).ok
    assert await goals.get(SID) is None
    user = await goals.create(SID, "ship lists", arm=True)
    assert isinstance(user, GoalSnapshot)
    assert (await plans.start(SID)).ok
    current = await goals.get(SID)
    assert current is not None and current.source == "user" and current.objective == "ship lists"
