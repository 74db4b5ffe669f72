"""What a model server says and does, through the real Application on the fake Bot API, the
real engine over real SQLite, and the real openai SDK against the fake model server: the token
limit a model accepts (docs/providers.md), usage figures that lie (docs/goals.md), streams
cut short, hostile tool calls."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.events import ModelUsageRecord
from engine.model.script import ScriptStep, call, say
from engine.usage.ledger import chars_to_tokens, request_chars
from engine.usage.meter import UsageConfig
from tests.engine.helpers import settle
from tests.fakebot.server import FakeBotApi
from tests.fakes.openai_server import FakeUsage
from tests.telegram.app_support import GROUP, OWNER, eventually
from tests.telegram.live import live_bot, until


def _limit_fields(bodies: list[dict[str, object]]) -> list[list[str]]:
    return [[k for k in ("max_tokens", "max_completion_tokens") if k in b] for b in bodies]


async def test_a_server_refusing_max_tokens_is_answered_and_learnt_once(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    # OpenAI's reasoning models refuse max_tokens with a 400 that names it: the turn goes on
    # with max_completion_tokens, and the next calls send that at once.
    script = [
        call("list_files", {}, expect="what is in here?"),
        say("Two files.", expect="README"),
        say("Still two.", expect="and now?"),
    ]
    async with live_bot(fake_api, tmp_path, script) as live:
        server = live.model_server
        assert server is not None
        server.refused_params = {"max_tokens"}
        (live.workspace / "README.md").write_text("# hi\n")
        fake_api.user_message(GROUP, OWNER, f"@{fake_api.username} what is in here?")
        await eventually(lambda: len(fake_api.bot_messages(GROUP)) >= 1)
        sid = await live.engine.session_for_chat(GROUP, 0)
        await settle(live.engine, sid)
        fake_api.user_message(GROUP, OWNER, f"@{fake_api.username} and now?")
        await eventually(lambda: len(fake_api.bot_messages(GROUP)) >= 2)
        await settle(live.engine, sid)
        texts = [m.text for m in fake_api.bot_messages(GROUP)]
        assert texts[0].startswith("Two files.") and texts[1].startswith("Still two.")
        assert _limit_fields(server.chat_requests) == [["max_tokens"]] + [
            ["max_completion_tokens"]
        ] * 3
        assert len(server.errors) == 1  # the one refusal, learnt from


# --- budgets that hold whatever the server says -------------------------------------------


def _sent_tokens(body: dict[str, Any]) -> int:
    """What one request really cost in prompt tokens, by the quarter rule (the fake's 1/1
    figures are lies), plus a generous completion for a short reply."""
    return chars_to_tokens(request_chars(body["messages"], body.get("tools") or [])) + 100


async def _records(live: Any, sid: str) -> list[ModelUsageRecord]:
    stored = await live.storage.log.read(sid, types={"model/usage"})
    return [s.event for s in stored if isinstance(s.event, ModelUsageRecord)]


def _writes(count: int) -> list[ScriptStep]:
    return [
        call("write_file", {"path": f"notes/n{n}.md", "content": f"note {n}: {'x' * (n % 7)}\n"})
        for n in range(count)
    ]


async def test_a_server_reporting_1_1_tokens_cannot_run_a_goal_past_its_budget(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    # The fake reports 1 prompt and 1 completion token for every call: taken at its word, a
    # goal with a 12k budget ran 40 rounds. The estimate stands in for figures that small.
    budget = 12_000
    async with live_bot(fake_api, tmp_path, _writes(60), max_steps=8) as live:
        server = live.model_server
        assert server is not None and server.usage == FakeUsage(1, 1)
        fake_api.user_message(GROUP, OWNER, "/goal write the notes --tokens 12k")
        sid = await live.engine.session_for_chat(GROUP, 0)

        async def blocked() -> bool:
            goal = await live.engine.goals.get(sid)
            return goal is not None and goal.phase == "blocked"

        await until(blocked)
        await settle(live.engine, sid)
        goal = await live.engine.goals.get(sid)
        assert goal is not None and goal.blocked is not None
        assert goal.blocked.code == "budget-limit"
        sent = [_sent_tokens(body) for body in server.chat_requests]
        assert sum(sent) <= budget + max(sent)  # within one call of the budget
        records = await _records(live, sid)
        assert len(records) == len(sent) and all(r.estimated for r in records)
        assert server.errors == []


async def test_a_server_reporting_1_1_tokens_cannot_pass_the_daily_cap(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    cap = 12_000
    usage = UsageConfig(daily_tokens=cap)
    async with live_bot(fake_api, tmp_path, _writes(60), usage=usage) as live:
        server = live.model_server
        assert server is not None
        fake_api.user_message(GROUP, OWNER, f"@{fake_api.username} write the notes")
        await eventually(
            lambda: any("Daily token cap" in m.text for m in fake_api.bot_messages(GROUP))
        )
        sid = await live.engine.session_for_chat(GROUP, 0)
        await settle(live.engine, sid)
        sent = [_sent_tokens(body) for body in server.chat_requests]
        assert sum(sent) <= cap + max(sent)  # within one call of the cap
        assert live.engine.usage.today().tokens >= sum(sent) - 100 * len(sent)
