"""Goal tools: authority from the turn's source, never from the arguments."""

from __future__ import annotations

import json
from pathlib import Path

from engine.events import GoalRoundSource, HumanSource, MessageSource, SeedSource, UserMessage
from engine.goal.service import GoalService
from engine.goal.tools import CreateGoalTool, GetGoalTool, UpdateGoalTool
from engine.goal.types import GoalSnapshot
from engine.testing import InMemoryEventLog
from engine.tools.base import ToolContext

SID = "s1"


def ctx(tmp_path: Path, source: MessageSource) -> ToolContext:
    return ToolContext(session_id=SID, workspace=tmp_path, turn_id="t", source=source)


async def admitted_round(goals: GoalService, log: InMemoryEventLog) -> GoalRoundSource:
    goal = await goals.get(SID)
    assert goal is not None
    source = GoalRoundSource(goal_id=goal.id, revision=goal.revision, round=goal.rounds_started + 1)
    await log.append(SID, [UserMessage(text="round", source=source)])
    return source


async def test_human_turn_creates_disarmed_model_goal(tmp_path: Path) -> None:
    log = InMemoryEventLog()
    goals = GoalService(log, default_max_rounds=4)
    out = await CreateGoalTool(goals).run(
        {"objective": "make CI green"}, ctx(tmp_path, HumanSource())
    )
    assert not out.is_error and "Start" in out.content
    goal = await goals.get(SID)
    assert goal is not None and goal.source == "model" and goal.max_goal_rounds == 4
    assert not goals.is_armed(SID)
    again = await CreateGoalTool(goals).run({"objective": "other"}, ctx(tmp_path, SeedSource()))
    assert again.is_error and "goal-exists" in again.content
    shown = await GetGoalTool(goals).run({}, ctx(tmp_path, HumanSource()))
    view = json.loads(shown.content)
    assert view["objective"] == "make CI green" and view["status"] == "active"


async def test_round_may_not_create_or_edit(tmp_path: Path) -> None:
    log = InMemoryEventLog()
    goals = GoalService(log)
    goal = await goals.create(SID, "loop", arm=True)
    assert isinstance(goal, GoalSnapshot)
    source = await admitted_round(goals, log)
    round_ctx = ctx(tmp_path, source)
    created = await CreateGoalTool(goals).run({"objective": "x"}, round_ctx)
    assert created.is_error and "not-allowed" in created.content
    # The model's arguments cannot claim more authority than its turn has.
    edited = await UpdateGoalTool(goals).run({"objective": "sneaky"}, round_ctx)
    assert edited.is_error and "not-allowed" in edited.content
    both = await UpdateGoalTool(goals).run({"status": "complete", "objective": "y"}, round_ctx)
    assert both.is_error
    current = await goals.get(SID)
    assert current is not None and current.objective == "loop" and current.phase == "active"


async def test_round_may_complete_its_own_goal(tmp_path: Path) -> None:
    log = InMemoryEventLog()
    goals = GoalService(log)
    await goals.create(SID, "loop", arm=True)
    source = await admitted_round(goals, log)
    out = await UpdateGoalTool(goals).run({"status": "complete"}, ctx(tmp_path, source))
    assert not out.is_error
    current = await goals.get(SID)
    assert current is not None and current.phase == "complete"


async def test_round_may_block_with_model_reported(tmp_path: Path) -> None:
    log = InMemoryEventLog()
    goals = GoalService(log)
    await goals.create(SID, "loop", arm=True)
    source = await admitted_round(goals, log)
    out = await UpdateGoalTool(goals).run(
        {"status": "blocked", "reason": "needs a token"}, ctx(tmp_path, source)
    )
    assert not out.is_error
    current = await goals.get(SID)
    assert current is not None and current.blocked is not None
    assert (current.blocked.code, current.blocked.message) == ("model-reported", "needs a token")


async def test_stale_round_cannot_update(tmp_path: Path) -> None:
    log = InMemoryEventLog()
    goals = GoalService(log)
    goal = await goals.create(SID, "loop", arm=True)
    assert isinstance(goal, GoalSnapshot)
    source = await admitted_round(goals, log)
    edited = await goals.edit(SID, goal.ref, objective="changed by the owner")
    assert isinstance(edited, GoalSnapshot)
    out = await UpdateGoalTool(goals).run({"status": "complete"}, ctx(tmp_path, source))
    assert out.is_error and "stale-revision" in out.content
    # A reservation that was never admitted is not the current round either.
    future = source.model_copy(update={"revision": edited.revision, "round": 5})
    out = await UpdateGoalTool(goals).run({"status": "complete"}, ctx(tmp_path, future))
    assert out.is_error and "stale-revision" in out.content
    current = await goals.get(SID)
    assert current is not None and current.phase == "active"


async def test_human_turn_may_edit_objective_and_complete(tmp_path: Path) -> None:
    log = InMemoryEventLog()
    goals = GoalService(log)
    await goals.create(SID, "first")
    human = ctx(tmp_path, HumanSource(user_id="tg:1"))
    out = await UpdateGoalTool(goals).run({"objective": "second"}, human)
    assert not out.is_error
    current = await goals.get(SID)
    assert current is not None and current.objective == "second" and current.revision == 2
    out = await UpdateGoalTool(goals).run({"status": "complete", "objective": "third"}, human)
    assert not out.is_error
    current = await goals.get(SID)
    assert current is not None and current.phase == "complete" and current.objective == "third"
    empty = await UpdateGoalTool(goals).run({}, human)
    assert empty.is_error


async def test_update_without_goal(tmp_path: Path) -> None:
    goals = GoalService(InMemoryEventLog())
    out = await UpdateGoalTool(goals).run({"status": "complete"}, ctx(tmp_path, HumanSource()))
    assert out.is_error and "no-goal" in out.content
    shown = await GetGoalTool(goals).run({}, ctx(tmp_path, HumanSource()))
    assert not shown.is_error and "no goal" in shown.content
