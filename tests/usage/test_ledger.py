"""The pure parts: the budget rule, estimates, amounts, /goal's budget syntax, the goal card."""

from __future__ import annotations

import pytest

from bot.settings import load_settings
from bot.telegram.cards import build_goal_card
from engine.errors import ConfigError
from engine.events import ModelUsageRecord
from engine.goal.commands import parse_goal_command
from engine.goal.types import GoalBlocked, GoalSnapshot
from engine.usage.ledger import (
    check_call,
    estimate_prompt,
    parse_tokens,
    reset_text,
    would_cross,
)

NOON = 1_773_144_000.0  # 2026-03-10 12:00 UTC


def test_the_rule_is_used_plus_estimate_over_the_limit() -> None:
    assert not would_cross(600, 400, 1000)  # exactly at the limit still starts
    assert would_cross(601, 400, 1000)
    assert not would_cross(10**9, 10**9, None)


def test_the_daily_cap_is_checked_before_the_goal_budget() -> None:
    both = check_call(
        estimate=500, day_used=900, daily_cap=1000, goal_used=900, goal_budget=1000, now=NOON
    )
    assert both is not None and both.kind == "daily-cap"
    assert "resets at 00:00 UTC (in 12h 00m)" in both.line
    goal = check_call(
        estimate=500, day_used=0, daily_cap=None, goal_used=600, goal_budget=1000, now=NOON
    )
    assert goal is not None and goal.kind == "goal-budget"
    assert goal.message.startswith("token budget used: 600 of 1,000")
    assert (
        check_call(
            estimate=400, day_used=0, daily_cap=None, goal_used=600, goal_budget=1000, now=NOON
        )
        is None
    )


def test_reset_text_counts_down_to_utc_midnight() -> None:
    assert reset_text(NOON + 3 * 3600 + 15 * 60) == "00:00 UTC (in 8h 45m)"
    assert reset_text(NOON + 12 * 3600 - 1) == "00:00 UTC (in 0h 01m)"


def test_the_prompt_estimate_grows_from_the_last_reported_call() -> None:
    assert estimate_prompt(4000, None) == 1000
    last = ModelUsageRecord(turn_id="t", prompt_tokens=300, completion_tokens=5, request_chars=4000)
    assert estimate_prompt(4400, last) == 400
    # A request smaller than the last (a new summary): back to the character rule.
    assert estimate_prompt(2000, last) == 500


@pytest.mark.parametrize(
    ("text", "value"),
    [("200k", 200_000), ("1.5m", 1_500_000), ("5000", 5000), ("2M", 2_000_000), ("1,000", 1000)],
)
def test_token_amounts(text: str, value: int) -> None:
    assert parse_tokens(text) == value


@pytest.mark.parametrize("text", ["", "0", "lots", "-5k", "5g", "k"])
def test_bad_token_amounts(text: str) -> None:
    assert parse_tokens(text) is None


def test_goal_command_budget_syntax() -> None:
    spec = parse_goal_command("ship the release --tokens 200k")
    assert (spec.action, spec.objective, spec.token_budget) == ("set", "ship the release", 200_000)
    assert parse_goal_command("budget 500k").token_budget == 500_000
    every = parse_goal_command("every 30m check CI --tokens 1m")
    assert (every.action, every.objective, every.token_budget) == ("every", "check CI", 1_000_000)
    for bad in ("ship it --tokens lots", "--tokens 5k", "budget", "budget many"):
        spec = parse_goal_command(bad)
        assert spec.action == "usage" and spec.error, bad
    # An objective that merely mentions the word is an objective.
    assert parse_goal_command("budget the sprint").action == "usage"
    assert parse_goal_command("plan the budget").objective == "plan the budget"


def goal(**kw: object) -> GoalSnapshot:
    base: dict[str, object] = {
        "id": "g" * 32,
        "revision": 3,
        "objective": "ship",
        "phase": "active",
        "max_goal_rounds": 20,
        "rounds_started": 4,
    }
    return GoalSnapshot.model_validate({**base, **kw})


def test_the_goal_card_shows_tokens_against_the_budget_and_the_fix_when_blocked() -> None:
    view = build_goal_card(goal(token_budget=200_000), armed=True, tokens_used=12_345)
    assert "tokens 12,345 / 200,000" in view.text
    assert "tokens 0" in build_goal_card(goal(), armed=True).text
    blocked = goal(
        phase="blocked",
        token_budget=1000,
        blocked=GoalBlocked(code="budget-limit", message="token budget used: 700 of 1,000"),
    )
    view = build_goal_card(blocked, armed=False, tokens_used=700)
    assert "budget-limit: token budget used: 700 of 1,000" in view.text
    assert "/goal budget 500k" in view.text
    labels = [label for row in view.buttons for label, _ in row]
    assert any("Resume" in label for label in labels) and any("Clear" in label for label in labels)
    idle = goal(phase="blocked", blocked=GoalBlocked(code="no-progress", message="3 rounds"))
    assert "Send a hint" in build_goal_card(idle, armed=False).text


def test_usage_settings() -> None:
    settings = load_settings(
        {
            "PLANGATE_DAILY_TOKENS": "2m",
            "PLANGATE_PRICE_INPUT": "0.15",
            "PLANGATE_PRICE_OUTPUT": "0.6",
            "PLANGATE_USAGE_FOOTER": "on",
            "PLANGATE_GOAL_IDLE_ROUNDS": "5",
        },
        env_file=None,
    )
    assert settings.daily_tokens == 2_000_000 and settings.goal_idle_rounds == 5
    assert (settings.price_input, settings.price_output, settings.usage_footer) == (0.15, 0.6, "on")
    defaults = load_settings({}, env_file=None)
    assert defaults.daily_tokens is None and defaults.usage_footer == "private"
    assert defaults.goal_idle_rounds == 3
    with pytest.raises(ConfigError, match="PLANGATE_DAILY_TOKENS"):
        load_settings({"PLANGATE_DAILY_TOKENS": "lots"}, env_file=None)
    with pytest.raises(ConfigError, match="set both or neither"):
        load_settings({"PLANGATE_PRICE_INPUT": "0.15"}, env_file=None)
    with pytest.raises(ConfigError, match="PLANGATE_GOAL_IDLE_ROUNDS"):
        load_settings({"PLANGATE_GOAL_IDLE_ROUNDS": "0"}, env_file=None)
