"""/usage and the reply footer through the real Application on the fake Bot API, with the real
engine, real SQLite and the real openai SDK against the fake model server."""

from __future__ import annotations

from pathlib import Path

from bot.telegram.app import parts
from engine.model.openai_provider import OpenAIProvider
from engine.model.script import say
from tests.engine.helpers import settle
from tests.fakebot.server import FakeBotApi
from tests.fakes.openai_server import FAKE_MODEL, FakeOpenAIServer, FakeUsage, fake_openai
from tests.keys import chat
from tests.telegram.app_support import GROUP, OWNER, eventually
from tests.telegram.live import live_bot

__all__ = ["fake_openai"]


async def test_usage_shows_the_sums_and_private_replies_carry_the_footer(
    fake_api: FakeBotApi, tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.usage = FakeUsage(prompt_tokens=1200, completion_tokens=34, cached_tokens=200)
    fake_openai.play([say("Hello in private."), say("Hello in the group.")])
    model = OpenAIProvider(FAKE_MODEL, base_url=fake_openai.base_url, api_key="test-key")
    try:
        async with live_bot(fake_api, tmp_path, [], model=model) as live:
            engine = live.engine
            fake_api.user_message(OWNER, OWNER, "hi")  # a private chat: its id is the user's
            await eventually(lambda: len(fake_api.bot_messages(OWNER)) >= 1)
            private = fake_api.bot_messages(OWNER)[-1].text
            assert private.startswith("Hello in private.")
            assert private.endswith("— 1,234 tokens (1,200 in, 34 out, 200 cached) in 1 call")

            fake_api.user_message(GROUP, OWNER, f"@{fake_api.username} hi all")
            await eventually(lambda: len(fake_api.bot_messages(GROUP)) >= 1)
            sid = await engine.session_for_chat(chat(GROUP))
            await settle(engine, sid)
            assert fake_api.bot_messages(GROUP)[-1].text == "Hello in the group."  # no footer

            fake_api.user_message(GROUP, OWNER, "/usage")
            await eventually(lambda: len(fake_api.bot_messages(GROUP)) >= 2)
            await parts(live.app).presenter.flush()
            report = fake_api.bot_messages(GROUP)[-1].text
            assert "Today (UTC): 2,468 tokens (2,400 in, 68 out, 400 cached) in 2 calls" in report
            assert "This session: 1,234 tokens (1,200 in, 34 out, 200 cached) in 1 call" in report
            assert "Biggest turns:" in report
    finally:
        await model.aclose()
