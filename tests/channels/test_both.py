"""One process serving Telegram and Slack at once: one engine, both front ends, each session's
words going back to the channel its chat belongs to (bot.channels.ChatRouter, as
``plangate run`` composes it when both tokens are set)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bot.channels import ChannelQueue, ChatRouter, smallest_limits
from bot.compose import open_plangate
from bot.slack import keys
from bot.slack.app import SlackConfig, SlackFrontEnd, serve_socket_mode
from bot.slack.front import SLACK
from bot.telegram.app import parts
from bot.telegram.front import TELEGRAM
from engine.app import EngineConfig
from engine.model.openai_provider import OpenAIProvider
from engine.model.script import say
from tests.fakebot.server import FakeBotApi
from tests.fakes.openai_server import FAKE_MODEL, FakeOpenAIServer
from tests.fakeslack.server import FakeSlack
from tests.keys import person
from tests.slack.live import CHANNEL
from tests.slack.live import OWNER as SLACK_OWNER
from tests.telegram.app_support import GROUP, OWNER, eventually, running_bot


async def test_one_engine_serves_both_and_each_reply_goes_home(tmp_path: Path) -> None:
    api, slack = FakeBotApi(), FakeSlack()
    await api.start()
    await slack.start()
    slack.channel(CHANNEL)
    server = FakeOpenAIServer()
    server.play([say("Hi Telegram."), say("Hi Slack.")])
    await server.start()
    model = OpenAIProvider(FAKE_MODEL, base_url=server.base_url, api_key="test-key")
    queue = ChannelQueue(smallest_limits([TELEGRAM.limits, SLACK.limits]))
    workspace = tmp_path / "work"
    workspace.mkdir()
    config = EngineConfig(
        workspace=workspace, owner_ids=frozenset({person(OWNER), keys.person_key(SLACK_OWNER)})
    )
    stop = asyncio.Event()
    try:
        async with open_plangate(
            tmp_path / "home",
            model=model,
            channel=queue,
            config=config,
        ) as opened:
            front = SlackFrontEnd(
                opened.engine,
                opened.storage.db,
                SlackConfig(
                    bot_token=slack.bot_token,
                    app_token=slack.app_token,
                    api_url=slack.api_url,
                    owner_ids=(SLACK_OWNER,),
                    allowed_channels=(CHANNEL,),
                    interval_s=0.0,
                ),
            )
            await front.start()
            serving = asyncio.create_task(serve_socket_mode(front, stop))
            await slack.connected()
            async with running_bot(api, opened.engine, opened.storage.db) as app:
                router = ChatRouter(
                    opened.storage.db,
                    [(TELEGRAM.owns, parts(app).channel), (SLACK.owns, front.channel)],
                )
                delivering = asyncio.ensure_future(queue.deliver(router))
                await opened.engine.start()
                api.user_message(GROUP, OWNER, "@plangate_test_bot hello")
                await eventually(
                    lambda: any(m.text.startswith("Hi Telegram.") for m in api.bot_messages(GROUP))
                )
                await slack.mention(CHANNEL, SLACK_OWNER, "hello")
                for _ in range(1500):
                    if any(m.text.startswith("Hi Slack.") for m in slack.bot_messages(CHANNEL)):
                        break
                    await asyncio.sleep(0.02)
                await opened.engine.shutdown()
                await front.drain()
                delivering.cancel()
            stop.set()
            await serving
            await front.aclose()
    finally:
        await model.aclose()
        await server.stop()
        await api.stop()
        await slack.stop()
    # The shutdown may still find the turn closing: its notice goes home to Slack as well.
    stopping = "plangate is stopping"
    said = [m.text.split("\n")[0] for m in slack.bot_messages(CHANNEL)]
    assert [line for line in said if not line.startswith(stopping)] == ["Hi Slack."]
    assert not any("Slack" in m.text for m in api.bot_messages(GROUP))
