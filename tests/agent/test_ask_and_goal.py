"""ask_user through the loop, and goal-round turns re-validated before every step."""

from __future__ import annotations

from pathlib import Path

from engine.events import GoalRoundSource, ToolResult, TurnEnd
from engine.model.script import call, say
from engine.plan.gate import GATE_TEXTS
from engine.tools.ask import ASK_SENT_TEXT
from tests.agent.harness import SID, make_agent


class Goals:
    """A GoalPort that allows ``allowed`` validations, then refuses; records disarms."""

    def __init__(self, allowed: int) -> None:
        self.allowed = allowed
        self.checked = 0
        self.disarmed = 0

    async def validate_round(self, session_id: str, source: GoalRoundSource) -> bool:
        self.checked += 1
        return self.checked <= self.allowed

    async def disarm(self, session_id: str) -> None:
        self.disarmed += 1


class Driver:
    def __init__(self) -> None:
        self.calls: list[str | None] = []
        self.goals: list[str | None] = []

    def notify_idle(
        self, session_id: str, *, outcome: str | None = None, goal_id: str | None = None
    ) -> None:
        self.calls.append(outcome)
        self.goals.append(goal_id)


ROUND = GoalRoundSource(goal_id="g", revision=1, round=1)


async def test_ask_user_goes_to_the_channel_and_returns_at_once(tmp_path: Path) -> None:
    agent = make_agent(
        tmp_path,
        [
            call("ask_user", {"question": "Which db?", "options": ["sqlite", "postgres"]}),
            say("Waiting for your answer.", expect=ASK_SENT_TEXT),
        ],
    )
    agent.registry.submit(SID, "set up storage")
    await agent.registry.wait_idle(SID)
    asks = agent.channel.of("ask")
    assert [(a.args["question"], a.args["options"]) for a in asks] == [
        ("Which db?", ["sqlite", "postgres"])
    ]


async def test_goal_round_ends_when_validation_fails_and_driver_is_told(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    goals = Goals(allowed=2)
    agent = make_agent(
        tmp_path,
        [call("read_file", {"path": "f"}), call("read_file", {"path": "f"}), say("never")],
        goals=goals,
    )
    driver = Driver()
    agent.registry.listen_idle(driver)
    assert agent.registry.is_idle(SID)
    await agent.registry.submit_round(SID, "round 1 of 5", ROUND)
    assert not agent.registry.is_idle(SID)
    await agent.registry.wait_idle(SID)
    assert goals.checked == 3
    assert len(agent.scripted.requests) == 2
    end = (await agent.events())[-1]
    assert isinstance(end, TurnEnd) and end.outcome == "completed"
    assert "no longer valid" in end.detail
    assert driver.calls == ["completed", None]
    assert driver.goals == ["g", None]  # the round says whose it was; the drain does not


async def test_ask_user_is_refused_in_a_goal_round(tmp_path: Path) -> None:
    agent = make_agent(
        tmp_path,
        [call("ask_user", {"question": "?"}), say("ok")],
        goals=Goals(allowed=10),
    )
    await agent.registry.submit_round(SID, "round", ROUND)
    await agent.registry.wait_idle(SID)
    result = next(e for e in await agent.events() if isinstance(e, ToolResult))
    # The gate refuses it (its declared effect is "ask"); the tool would refuse it too.
    assert result.is_error and result.content == GATE_TEXTS["gate-round-ask"]
    assert agent.channel.of("ask") == []


async def test_stop_disarms_the_goal(tmp_path: Path) -> None:
    goals = Goals(allowed=10)
    agent = make_agent(tmp_path, [say("hi")], goals=goals)
    assert await agent.registry.stop(SID) == []
    assert goals.disarmed == 1
