"""What a model server says and does, through the real Application on the fake Bot API, the
real engine over real SQLite, and the real openai SDK against the fake model server: the token
limit a model accepts (docs/providers.md), usage figures that lie (docs/goals.md), streams
cut short, hostile tool calls."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bot.telegram.channel import TelegramChannel
from engine.events import (
    AssistantMessage,
    HumanSource,
    ModelUsageRecord,
    ToolCall,
    ToolResult,
    TurnEnd,
    TurnStart,
    UserMessage,
)
from engine.model import openai_provider
from engine.model.script import ScriptedCall, ScriptStep, call, say
from engine.text import clean_text
from engine.usage.ledger import chars_to_tokens, request_chars
from engine.usage.meter import UsageConfig
from tests.engine.helpers import settle
from tests.fakebot.server import FakeBotApi
from tests.fakes.openai_server import FakeUsage
from tests.keys import chat
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
        sid = await live.engine.session_for_chat(chat(GROUP))
        await settle(live.engine, sid)
        fake_api.user_message(GROUP, OWNER, f"@{fake_api.username} and now?")
        await eventually(lambda: len(fake_api.bot_messages(GROUP)) >= 2)
        await settle(live.engine, sid)
        texts = [m.text for m in fake_api.bot_messages(GROUP)]
        assert texts[0].startswith("Two files.") and texts[1].startswith("Still two.")
        assert (
            _limit_fields(server.chat_requests)
            == [["max_tokens"]] + [["max_completion_tokens"]] * 3
        )
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
        sid = await live.engine.session_for_chat(chat(GROUP))

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
        sid = await live.engine.session_for_chat(chat(GROUP))
        await settle(live.engine, sid)
        sent = [_sent_tokens(body) for body in server.chat_requests]
        assert sum(sent) <= cap + max(sent)  # within one call of the cap
        assert live.engine.usage.today().tokens >= sum(sent) - 100 * len(sent)


# --- streams cut short ---------------------------------------------------------------------


LONG = " ".join(f"Word{i}" for i in range(3000))


async def test_a_stream_cut_by_stop_records_what_was_sent_and_what_arrived(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    async with live_bot(fake_api, tmp_path, [say(LONG)]) as live:
        server = live.model_server
        assert server is not None
        server.stream_piece_chars, server.stream_pause_at = 25, 40
        fake_api.user_message(OWNER, OWNER, "write a lot")
        await eventually(lambda: server.stream_paused == 1)  # mid-stream, 39 pieces sent
        # ... and read: the reply's draft shows their end (a loaded machine reads later).
        arrived = LONG[: 39 * 25]
        await eventually(
            lambda: any(arrived[-60:] in text for _, text, _ in fake_api.chats[OWNER].drafts)
        )
        sid = await live.engine.session_for_chat(chat(OWNER))
        fake_api.user_message(OWNER, OWNER, "/stop")

        async def stopped() -> bool:
            return live.engine.agents.is_idle(sid)

        await until(stopped)
        (record,) = await _records(live, sid)
        (body,) = server.chat_requests
        sent = chars_to_tokens(request_chars(body["messages"], body.get("tools") or []))
        assert record.estimated and record.prompt_tokens >= sent
        assert record.completion_tokens == chars_to_tokens(39 * 25)  # what arrived
        assert live.engine.usage.today().tokens == record.prompt_tokens + record.completion_tokens
        assert live.engine.usage.held_today() == 0
        ends = [e.event for e in await live.storage.log.read(sid) if e.event.type == "turn/end"]
        assert [e.outcome for e in ends] == ["cancelled"]  # type: ignore[attr-defined]


async def test_a_stream_broken_off_by_the_server_records_what_arrived(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    async with live_bot(fake_api, tmp_path, [say(LONG)]) as live:
        server = live.model_server
        assert server is not None
        server.stream_piece_chars, server.stream_break_after = 25, 21
        fake_api.user_message(OWNER, OWNER, "write a lot")
        await eventually(
            lambda: any("The model failed" in m.text for m in fake_api.bot_messages(OWNER))
        )
        sid = await live.engine.session_for_chat(chat(OWNER))
        await settle(live.engine, sid)
        (record,) = await _records(live, sid)
        assert record.estimated and record.prompt_tokens > 1000
        assert record.completion_tokens == chars_to_tokens(20 * 25)
        assert live.engine.usage.held_today() == 0


# --- a hostile model server ----------------------------------------------------------------


def _raw(raw: str) -> ScriptStep:
    return ScriptStep(tool_calls=(ScriptedCall("write_file", {}, raw),))


HOSTILE = [
    '{"path": "a.txt", "content": ' + "[" * 250 + "]" * 250 + "}",  # the store's reader gave up
    '{"a": ' * 250 + "1" + "}" * 250,
    '{"path": ' + "[" * 100_000 + "]" * 100_000 + "}",  # the JSON parser itself would recurse
    '{"path": "big.txt", "content": "' + "x" * 1_000_001 + '"}',
    '{"path": 1' + "0" * 5000 + "}",  # an integer Python refuses to read
]


async def test_hostile_tool_arguments_are_refused_and_the_session_loads_after_a_restart(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    script = [*[_raw(raw) for raw in HOSTILE], say("I give up.")]
    async with live_bot(fake_api, tmp_path, script, home=home) as live:
        server = live.model_server
        assert server is not None
        fake_api.user_message(GROUP, OWNER, f"@{fake_api.username} write the files")
        await eventually(lambda: len(fake_api.bot_messages(GROUP)) >= 1)
        sid = await live.engine.session_for_chat(chat(GROUP))
        await settle(live.engine, sid)
        assert fake_api.bot_messages(GROUP)[-1].text.startswith("I give up.")
        results = [
            m["content"] for m in server.chat_requests[-1]["messages"] if m["role"] == "tool"
        ]
        assert len(results) == len(HOSTILE)
        assert all(r.startswith("error: ") for r in results)
        assert "nested deeper than 32 levels" in results[0]
        assert "nested deeper than 32 levels" in results[1]
        assert "nested deeper than 32 levels" in results[2]
        assert "1,000,000" in results[3]
        assert "not a valid JSON object" in results[4]
        assert not (live.workspace / "a.txt").exists() and not (live.workspace / "big.txt").exists()
        assert server.errors == []
        # The refused million characters still count: what arrived was paid for.
        records = await _records(live, sid)
        assert records[3].completion_tokens >= chars_to_tokens(1_000_001)

    # A restart: the session and everything stored load, and the next turn works.
    async with live_bot(
        fake_api, tmp_path, [say("Back.", expect="still there?")], home=home
    ) as live:
        stored = await live.storage.log.read(sid)
        assert any(e.event.type == "tool/call" for e in stored)
        fake_api.user_message(GROUP, OWNER, f"@{fake_api.username} still there?")
        await eventually(lambda: fake_api.bot_messages(GROUP)[-1].text.startswith("Back."))
        await settle(live.engine, sid)
        server = live.model_server
        assert server is not None and server.errors == []


# --- a long answer in tiny chunks ----------------------------------------------------------


async def test_a_400_kb_answer_in_8_byte_chunks_costs_linear_work_and_status_answers_meanwhile(
    fake_api: FakeBotApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    answer = ("The quick brown fox jumps over the lazy dog. " * 9000)[:400_000]
    pieces = len(answer) // 8
    cleaned = [0]  # characters the provider cleaned (scanned for lone surrogates)
    drafted = [0]  # characters handed to the chat's draft

    def counting_clean(text: str) -> str:
        cleaned[0] += len(text)
        return clean_text(text)

    original_draft = TelegramChannel.draft

    async def counting_draft(
        self: TelegramChannel, session_id: str, text: str, *, more: bool = False
    ) -> None:
        drafted[0] += len(text)
        await original_draft(self, session_id, text, more=more)

    monkeypatch.setattr(openai_provider, "clean_text", counting_clean)
    monkeypatch.setattr(TelegramChannel, "draft", counting_draft)
    script = [say(answer)]
    async with live_bot(fake_api, tmp_path, script) as live:
        server = live.model_server
        assert server is not None
        server.stream_piece_chars, server.stream_pause_at = 8, pieces // 2
        fake_api.user_message(OWNER, OWNER, "write it all out")
        await eventually(lambda: server.stream_paused == 1)
        # Another chat meanwhile: /status is answered while the stream is under way.
        fake_api.user_message(GROUP, OWNER, "/status")
        await eventually(lambda: len(fake_api.bot_messages(GROUP)) >= 1)
        assert server.streams_done == 0
        server.stream_resume.set()
        await eventually(lambda: server.streams_done == 1)
        sid = await live.engine.session_for_chat(chat(OWNER))
        await settle(live.engine, sid)
        final = fake_api.bot_messages(OWNER)[-1]
        assert final.document is not None and final.document["file_name"] == "answer.md"
        assert final.document["file_size"] >= len(answer)  # the whole answer arrived
        # Linear: every character cleaned and drafted a bounded number of times (the text so
        # far, re-joined and re-scanned per chunk, was 10 billion characters here).
        assert cleaned[0] <= 2 * len(answer) + 100_000
        assert drafted[0] == len(answer)
        drafts = fake_api.chats[OWNER].drafts
        assert drafts and all(len(text) <= 4000 for _, text, _ in drafts)


async def test_a_log_poisoned_before_the_refusal_existed_still_loads(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    # A store written by an earlier plangate holds a call nested 250 deep: the reader refused
    # it on every turn ("CorruptState"), restarts included, until /new dropped the session.
    home = tmp_path / "home"
    deep: Any = 1
    for _ in range(250):
        deep = [deep]
    script = [say("Hello again.", expect="are you there?")]
    async with live_bot(fake_api, tmp_path, script, home=home) as live:
        sid = await live.engine.session_for_chat(chat(GROUP))
        await live.storage.log.append(
            sid,
            [
                TurnStart(turn_id="t0"),
                UserMessage(text="write it", source=HumanSource(user_id=OWNER)),
                AssistantMessage(text=""),
                ToolCall(call_id="c0", name="write_file", arguments={"path": deep}),
                ToolResult(call_id="c0", name="write_file", content="error: no", is_error=True),
                TurnEnd(turn_id="t0", outcome="completed"),
            ],
        )
    async with live_bot(fake_api, tmp_path, script, home=home) as live:
        fake_api.user_message(GROUP, OWNER, f"@{fake_api.username} are you there?")
        await eventually(lambda: len(fake_api.bot_messages(GROUP)) >= 1)
        await settle(live.engine, sid)
        assert fake_api.bot_messages(GROUP)[-1].text.startswith("Hello again.")
        server = live.model_server
        assert server is not None and server.errors == []
        (call_event,) = [
            e.event for e in await live.storage.log.read(sid) if isinstance(e.event, ToolCall)
        ]
        assert "nested too deep" in json.dumps(call_event.arguments)
