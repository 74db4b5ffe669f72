"""One rig per channel for the contract suite: the same scenario drives Telegram (real PTB on
the fake Bot API, tests/telegram/live.py) or Slack (real slack_bolt on the fake Slack,
tests/slack/live.py), each with the real engine, real SQLite and files, the scripted model.

A rig speaks in the scenario's words (the owner's command, a press on the card, a file shared)
and reads back what the chat shows (:class:`Shown`: text, button labels, its message id), so
the scenario never names a channel."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from bot.slack import keys
from bot.telegram.app import parts
from engine.app import Engine
from engine.model.script import ScriptStep
from tests.fakebot.server import FakeBotApi, FakeMessage
from tests.fakeslack.server import FakeSlack, Message
from tests.keys import chat
from tests.slack import live as slack_live
from tests.telegram import live as telegram_live
from tests.telegram.app_support import GROUP, OWNER, STRANGER, eventually

BOT = "@plangate_test_bot "


@dataclass(frozen=True)
class Shown:
    """A message as the chat shows it: its id in the channel, text, buttons, edits so far."""

    ref: str
    text: str
    labels: list[str]
    edits: int


class Rig(Protocol):
    """What a scenario does through a channel, and what it reads back."""

    engine: Engine
    workspace: Path

    async def session(self) -> str: ...
    async def command(self, verb: str, args: str = "", *, stranger: bool = False) -> None: ...
    async def say(self, text: str) -> None: ...
    async def card(self, session_id: str) -> Shown: ...
    async def shown(self, ref: str) -> Shown: ...
    async def press(self, shown: Shown, label: str, *, stranger: bool = False) -> None: ...
    async def refused(self) -> int: ...
    def approvals(self) -> list[Shown]: ...
    def texts(self) -> list[str]: ...
    async def share_file(self, name: str, data: bytes, caption: str, *, stranger: bool) -> None: ...
    async def settle(self) -> None: ...


# ---- Telegram ---------------------------------------------------------------------------


def _tg(msg: FakeMessage) -> Shown:
    return Shown(str(msg.message_id), msg.text, telegram_live.labels(msg), len(msg.edits))


class TelegramRig:
    def __init__(self, api: FakeBotApi, live: telegram_live.Live) -> None:
        self.api, self.live = api, live
        self.engine, self.workspace = live.engine, live.workspace

    async def session(self) -> str:
        return await self.engine.session_for_chat(chat(GROUP))

    async def command(self, verb: str, args: str = "", *, stranger: bool = False) -> None:
        text = f"/{verb.replace('-', '_')} {args}".strip()
        self.api.user_message(GROUP, STRANGER if stranger else OWNER, text)
        await eventually(lambda: bool(self.api.bot_messages(GROUP)))

    async def say(self, text: str) -> None:
        self.api.user_message(GROUP, OWNER, BOT + text)

    async def card(self, session_id: str) -> Shown:
        await parts(self.live.app).presenter.flush()
        return _tg(await telegram_live.card(self.api, self.live, session_id))

    async def shown(self, ref: str) -> Shown:
        return _tg(self.api.message(GROUP, int(ref)))

    async def press(self, shown: Shown, label: str, *, stranger: bool = False) -> None:
        msg = self.api.message(GROUP, int(shown.ref))
        data = telegram_live.button(msg, label)
        qid = self.api.press(GROUP, msg.message_id, data, user_id=STRANGER if stranger else OWNER)
        await eventually(lambda: qid in self.api.callback_answers)

    async def refused(self) -> int:
        alerts = [a for a in self.api.callback_answers.values() if a.get("show_alert")]
        said = [m for m in self.api.bot_messages(GROUP) if "You are a member here" in m.text]
        return len(alerts) + len(said)

    def approvals(self) -> list[Shown]:
        return [_tg(m) for m in self.api.bot_messages(GROUP) if m.text.startswith("🔐")]

    def texts(self) -> list[str]:
        return [m.text for m in self.api.bot_messages(GROUP)]

    async def share_file(self, name: str, data: bytes, caption: str, *, stranger: bool) -> None:
        who = STRANGER if stranger else OWNER
        self.api.user_document(GROUP, who, data, file_name=name, caption=BOT + caption)

    async def settle(self) -> None:
        await parts(self.live.app).presenter.flush()


# ---- Slack ------------------------------------------------------------------------------


def _sl(msg: Message) -> Shown:
    text = (
        msg.text
        + "\n"
        + "\n".join(
            str(b.get("text", {}).get("text", "")) for b in msg.blocks if b.get("type") == "section"
        )
    )
    return Shown(msg.ts, text, slack_live.labels(msg), msg.edits)


class SlackRig:
    def __init__(self, slack: FakeSlack, live: slack_live.SlackLive) -> None:
        self.slack, self.live = slack, live
        self.engine, self.workspace = live.engine, live.workspace

    async def session(self) -> str:
        return await self.engine.session_for_chat(keys.engine_chat(slack_live.GROUP))

    async def command(self, verb: str, args: str = "", *, stranger: bool = False) -> None:
        who = slack_live.STRANGER if stranger else slack_live.OWNER
        await self.slack.slash(slack_live.CHANNEL, who, f"{verb} {args}".strip())
        await self.live.front.drain()

    async def say(self, text: str) -> None:
        await self.slack.mention(slack_live.CHANNEL, slack_live.OWNER, text)

    async def card(self, session_id: str) -> Shown:
        await self.live.front.drain()
        return _sl(await slack_live.card(self.live, session_id))

    async def shown(self, ref: str) -> Shown:
        return _sl(self.slack.message(slack_live.CHANNEL, ref))

    async def press(self, shown: Shown, label: str, *, stranger: bool = False) -> None:
        who = slack_live.STRANGER if stranger else slack_live.OWNER
        await self.slack.press(slack_live.CHANNEL, shown.ref, who, label)
        await self.live.front.drain()

    async def refused(self) -> int:
        await self.live.front.drain()
        channel = self.slack.channel(slack_live.CHANNEL)
        return sum(1 for user, _ in channel.ephemeral if user == slack_live.STRANGER)

    def approvals(self) -> list[Shown]:
        return [
            _sl(m) for m in self.slack.bot_messages(slack_live.CHANNEL) if m.text.startswith("🔐")
        ]

    def texts(self) -> list[str]:
        return [m.text for m in self.slack.bot_messages(slack_live.CHANNEL)]

    async def share_file(self, name: str, data: bytes, caption: str, *, stranger: bool) -> None:
        who = slack_live.STRANGER if stranger else slack_live.OWNER
        await self.slack.file_shared(slack_live.CHANNEL, who, name, data, text=caption)

    async def settle(self) -> None:
        await self.live.front.drain()


# ---- one entry point ----------------------------------------------------------------------


class Channels:
    """Opens the rig of one channel over a home that survives a restart (``tmp_path``)."""

    def __init__(self, name: str, tmp_path: Path) -> None:
        self.name, self.tmp_path = name, tmp_path
        self._fake: Any = None

    async def start(self) -> None:
        if self.name == "telegram":
            self._fake = FakeBotApi()
        else:
            self._fake = FakeSlack()
            self._fake.channel(slack_live.CHANNEL)
        await self._fake.start()

    async def stop(self) -> None:
        await self._fake.stop()

    @asynccontextmanager
    async def running(self, script: Sequence[ScriptStep], **options: Any) -> AsyncIterator[Rig]:
        """The real engine and this channel's front end; ``options``: the engine's
        (``max_goal_rounds``, ``allow_bash``, ``bash_approval``)."""
        if self.name == "telegram":
            async with telegram_live.live_bot(self._fake, self.tmp_path, script, **options) as tg:
                yield TelegramRig(self._fake, tg)
        else:
            async with slack_live.live_slack(self._fake, self.tmp_path, script, **options) as sl:
                yield SlackRig(self._fake, sl)


async def until(check: Any, *, timeout_s: float = 30.0) -> None:
    """Wait (bounded) until ``check()`` (sync or async) holds."""

    async def loop() -> None:
        while True:
            got = check()
            if not isinstance(got, bool):
                got = await got
            if got:
                return
            await asyncio.sleep(0.02)

    await asyncio.wait_for(loop(), timeout_s)


__all__ = ["Channels", "Rig", "Shown", "keys", "until"]
