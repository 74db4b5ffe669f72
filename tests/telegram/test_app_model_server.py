"""What a model server says and does, through the real Application on the fake Bot API, the
real engine over real SQLite, and the real openai SDK against the fake model server: the token
limit a model accepts (docs/providers.md)."""

from __future__ import annotations

from pathlib import Path

from engine.model.script import call, say
from tests.engine.helpers import settle
from tests.fakebot.server import FakeBotApi
from tests.telegram.app_support import GROUP, OWNER, eventually
from tests.telegram.live import live_bot


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
