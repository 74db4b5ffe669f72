"""/goal parsing and application."""

from __future__ import annotations

import pytest

from engine.goal.commands import (
    GoalCommandSpec,
    parse_goal_command,
    parse_interval,
    run_goal_command,
)
from engine.goal.service import GoalService
from engine.testing import InMemoryEventLog

SID = "s1"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", GoalCommandSpec(action="show")),
        ("  pause ", GoalCommandSpec(action="pause")),
        ("Resume", GoalCommandSpec(action="resume")),
        ("clear", GoalCommandSpec(action="clear")),
        ("done", GoalCommandSpec(action="done")),
        ("rounds 7", GoalCommandSpec(action="rounds", rounds=7)),
        ("every 30m", GoalCommandSpec(action="every", schedule_s=1800)),
        (
            "every 2h ship docs",
            GoalCommandSpec(action="every", schedule_s=7200, objective="ship docs"),
        ),
        ("every off", GoalCommandSpec(action="every", schedule_s=None)),
        ("fix the flaky test", GoalCommandSpec(action="set", objective="fix the flaky test")),
        ("pause the world", GoalCommandSpec(action="set", objective="pause the world")),
    ],
)
def test_parse(text: str, expected: GoalCommandSpec) -> None:
    assert parse_goal_command(text) == expected


@pytest.mark.parametrize(
    "text", ["rounds", "rounds 0", "rounds x", "every", "every 5y", "every 0m"]
)
def test_parse_usage_errors(text: str) -> None:
    spec = parse_goal_command(text)
    assert spec.action == "usage" and spec.error


def test_parse_interval() -> None:
    assert parse_interval("45s") == 45
    assert parse_interval("1d") == 86400
    assert parse_interval("10") is None


async def test_owner_goal_flow() -> None:
    goals = GoalService(InMemoryEventLog())
    made = await run_goal_command(goals, SID, parse_goal_command("get tests green"))
    assert made.goal is not None and goals.is_armed(SID)
    edited = await run_goal_command(goals, SID, parse_goal_command("get all tests green"))
    assert edited.goal is not None and edited.goal.id == made.goal.id
    assert edited.goal.objective == "get all tests green" and edited.goal.revision == 2
    every = await run_goal_command(goals, SID, parse_goal_command("every 30m"))
    assert every.goal is not None and every.goal.schedule_s == 1800
    capped = await run_goal_command(goals, SID, parse_goal_command("rounds 3"))
    assert capped.goal is not None and capped.goal.max_goal_rounds == 3
    paused = await run_goal_command(goals, SID, parse_goal_command("pause"))
    assert paused.goal is not None and paused.goal.phase == "paused"
    assert not goals.is_armed(SID)
    again = await run_goal_command(goals, SID, parse_goal_command("pause"))
    assert again.refused is not None and again.refused.code == "wrong-phase"
    resumed = await run_goal_command(goals, SID, parse_goal_command("resume"))
    assert resumed.goal is not None and goals.is_armed(SID)
    finished = await run_goal_command(goals, SID, parse_goal_command("done"))
    assert finished.goal is not None and finished.goal.phase == "complete"
    fresh = await run_goal_command(goals, SID, parse_goal_command("every 1h next thing"))
    assert fresh.goal is not None and fresh.goal.id != made.goal.id
    assert fresh.goal.schedule_s == 3600 and goals.is_armed(SID)
    cleared = await run_goal_command(goals, SID, parse_goal_command("clear"))
    assert cleared.text == "Goal cleared." and await goals.get(SID) is None
    shown = await run_goal_command(goals, SID, parse_goal_command(""))
    assert "No goal" in shown.text
    nothing = await run_goal_command(goals, SID, parse_goal_command("pause"))
    assert nothing.refused is not None and nothing.refused.code == "no-goal"
