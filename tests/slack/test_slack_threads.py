"""Threads and questions on Slack: a mention in someone's thread is a session of its own,
answered in that thread; a reply in the thread of the bot's own message belongs to the
channel's session and is heard without a mention; an ask_user option pressed is the answer."""

from __future__ import annotations

from pathlib import Path

from bot.slack import keys
from engine.model.script import call, say
from engine.tools.ask import ASK_SENT_TEXT
from tests.fakeslack.server import FakeSlack
from tests.slack.live import CHANNEL, GROUP, OWNER, STRANGER, live_slack, until


async def test_a_thread_is_its_own_session_and_the_bots_thread_is_the_channels(
    slack: FakeSlack, tmp_path: Path
) -> None:
    slack.channel(CHANNEL)
    script = [say("In the thread."), say("In the channel."), say("Heard the reply.")]
    async with live_slack(slack, tmp_path, script) as live:
        # Someone's message, then the owner calls the bot into its thread.
        root = await slack.user_message(CHANNEL, STRANGER, "the build is red")
        root_ts = slack.messages(CHANNEL)[-1].ts
        assert root.kind == "events_api"
        await slack.mention(CHANNEL, OWNER, "why is it red?", thread_ts=root_ts)
        await until(
            lambda: any(m.text.startswith("In the thread.") for m in slack.bot_messages(CHANNEL))
        )
        answer = next(m for m in slack.bot_messages(CHANNEL) if m.text.startswith("In the thread."))
        assert answer.thread_ts == root_ts
        thread_sid = await live.engine.session_for_chat(
            keys.engine_chat(GROUP, keys.ts_key(root_ts))
        )
        channel_sid = await live.engine.session_for_chat(keys.engine_chat(GROUP))
        assert thread_sid != channel_sid

        # In the channel: the answer is top level; a reply in its thread is heard.
        await slack.mention(CHANNEL, OWNER, "and here?")
        await until(
            lambda: any(m.text.startswith("In the channel.") for m in slack.bot_messages(CHANNEL))
        )
        top = next(m for m in slack.bot_messages(CHANNEL) if m.text.startswith("In the channel."))
        assert top.thread_ts is None
        await slack.user_message(CHANNEL, OWNER, "one more thing", thread_ts=top.ts)
        await until(
            lambda: any(m.text.startswith("Heard the reply.") for m in slack.bot_messages(CHANNEL))
        )
        stored = await live.storage.log.read(channel_sid, types=("user/message",))
        assert [s.event.text for s in stored] == ["and here?", "one more thing"]
        # Talk in the channel that is not for the bot is not heard.
        await slack.user_message(CHANNEL, OWNER, "lunch?")
        await live.front.drain()
        assert len(await live.storage.log.read(channel_sid, types=("user/message",))) == 2


async def test_an_option_pressed_is_the_answer_a_strangers_press_is_not(
    slack: FakeSlack, tmp_path: Path
) -> None:
    slack.channel(CHANNEL)
    script = [
        call("ask_user", {"question": "Which greeting?", "options": ["Hello", "Hi"]}),
        say("Waiting for your answer.", expect=ASK_SENT_TEXT),
        say("Hi it is.", expect="Hi"),
    ]
    async with live_slack(slack, tmp_path, script) as live:
        await slack.mention(CHANNEL, OWNER, "write a greeting")
        await until(lambda: any("Which greeting?" in m.text for m in slack.bot_messages(CHANNEL)))
        asked = next(m for m in slack.bot_messages(CHANNEL) if "Which greeting?" in m.text)
        assert [label for label, _, _ in asked.buttons()] == ["Hello", "Hi"]
        await until(lambda: any(m.text.startswith("Waiting") for m in slack.bot_messages(CHANNEL)))
        await slack.press(CHANNEL, asked.ts, STRANGER, "Hi")
        await until(lambda: any(u == STRANGER for u, _ in slack.channel(CHANNEL).ephemeral))
        assert slack.message(CHANNEL, asked.ts).buttons()  # still open
        await slack.press(CHANNEL, asked.ts, OWNER, "Hi")
        await until(
            lambda: any(m.text.startswith("Hi it is.") for m in slack.bot_messages(CHANNEL))
        )
        assert slack.message(CHANNEL, asked.ts).buttons() == []
        assert live.engine is not None
