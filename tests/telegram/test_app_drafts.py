"""A live draft while the model streams, end to end: the real Application on the fake Bot API
(sendMessageDraft), the real engine, the real openai SDK streaming from the fake model server
(docs/inputs.md). The model is slow on purpose (the server spaces its chunks), the pacing is
the shipped one (one draft a second at most), measured on the fake's clock."""

from __future__ import annotations

import itertools
from pathlib import Path

from engine.model.script import call, say
from tests.engine.helpers import settle
from tests.fakebot.server import FakeBotApi
from tests.fakes.openai_server import FakeOpenAIServer
from tests.keys import chat
from tests.telegram.app_support import GROUP, OWNER, eventually
from tests.telegram.live import live_bot, until

ANSWER = " ".join(f"Word{i}" for i in range(300))  # about 2,300 characters


def _slow(server: FakeOpenAIServer | None, *, delay_s: float) -> FakeOpenAIServer:
    assert server is not None
    server.stream_piece_chars = 25
    server.stream_delay_s = delay_s
    return server


async def test_a_private_chat_sees_drafts_at_most_once_a_second_then_one_message(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    script = [call("list_files", {}), call("grep", {"pattern": "Word"}), say(ANSWER)]
    async with live_bot(fake_api, tmp_path, script) as live:
        server = _slow(live.model_server, delay_s=0.03)  # ~95 chunks: about 3 s of answer
        fake_api.user_message(OWNER, OWNER, "write it out")
        await eventually(
            lambda: any(m.text.startswith("Word0") for m in fake_api.bot_messages(OWNER))
        )
        sid = await live.engine.session_for_chat(chat(OWNER))
        await settle(live.engine, sid)
        drafts = fake_api.chats[OWNER].drafts
        assert len(drafts) >= 2  # it did show the answer growing
        times = [at for _, _, at in drafts]
        assert all(b - a >= 0.99 for a, b in itertools.pairwise(times))
        assert len({draft_id for draft_id, _, _ in drafts}) == 1  # one draft per turn
        texts = [text for _, text, _ in drafts]
        assert all(ANSWER.startswith(t) for t in texts if "Word0" in t)
        (final,) = fake_api.bot_messages(OWNER)  # one message, no wall
        assert final.text.startswith(ANSWER)
        # Usage came with the stream's last chunk: the private reply's footer shows it.
        assert "tokens" in final.text.splitlines()[-1]
        assert server.streams_done == 3 and server.streams_cut == 0
        assert all(body.get("stream") is True for body in server.chat_requests)
        assert server.errors == []


async def test_a_group_gets_no_draft_calls_at_all(fake_api: FakeBotApi, tmp_path: Path) -> None:
    async with live_bot(fake_api, tmp_path, [say(ANSWER)]) as live:
        server = _slow(live.model_server, delay_s=0.01)
        fake_api.user_message(GROUP, OWNER, f"@{fake_api.username} write it out")
        await eventually(
            lambda: any(m.text.startswith("Word0") for m in fake_api.bot_messages(GROUP))
        )
        await settle(live.engine, await live.engine.session_for_chat(chat(GROUP)))
        assert fake_api.count("sendMessageDraft") == 0
        assert all(not body.get("stream") for body in server.chat_requests)  # plain calls


async def test_stop_during_the_stream_ends_it_at_once(fake_api: FakeBotApi, tmp_path: Path) -> None:
    long_answer = " ".join(f"Word{i}" for i in range(3000))  # minutes at this pace
    async with live_bot(fake_api, tmp_path, [say(long_answer)]) as live:
        server = _slow(live.model_server, delay_s=0.05)
        fake_api.user_message(OWNER, OWNER, "write a lot")
        await eventually(lambda: len(fake_api.chats[OWNER].drafts) >= 1)  # mid-stream
        sid = await live.engine.session_for_chat(chat(OWNER))
        assert live.engine.agents.is_busy(sid)
        fake_api.user_message(OWNER, OWNER, "/stop")

        async def stopped() -> bool:
            return live.engine.agents.is_idle(sid)

        await until(stopped)
        await eventually(lambda: server.streams_cut == 1)  # the connection went at once
        assert server.streams_done == 0
        assert not any(m.text.startswith("Word0") for m in fake_api.bot_messages(OWNER))
        ends = [e.event for e in await live.storage.log.read(sid) if e.event.type == "turn/end"]
        assert [e.outcome for e in ends] == ["cancelled"]  # type: ignore[attr-defined]
