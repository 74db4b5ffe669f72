"""Nothing reaches the engine after it shut down, and a flood-limited refusal to a stranger
does not hold the owner's next command in the same chat."""

from __future__ import annotations

import asyncio
import html
import re
from pathlib import Path
from typing import Any

from bot.telegram.access import REFUSAL_TEXT
from bot.telegram.app import serve
from engine.api import Outcome
from tests.fakebot.server import FakeBotApi
from tests.telegram.app_support import (
    GROUP,
    OWNER,
    STRANGER,
    RecordingEngine,
    eventually,
    open_db,
    running_bot,
    settings_for,
)


def html_to_text(text: str) -> str:
    """Telegram HTML as the text a person reads: tags dropped, entities unescaped."""
    return html.unescape(re.sub(r"<[^>]+>", "", text))


class SlowStopEngine(RecordingEngine):
    """/stop takes a while (a turn and its bash dying); records what arrives after shutdown."""

    def __init__(self) -> None:
        super().__init__()
        self.stopping = asyncio.Event()
        self.closed = False
        self.after_shutdown: list[str] = []

    async def command(
        self, session_id: str, name: Any, args: str, *, actor: int | None, actor_name: str = ""
    ) -> Outcome:
        if name == "stop":
            self.stopping.set()
            await asyncio.sleep(0.5)
        return await super().command(session_id, name, args, actor=actor)

    async def user_message(self, session_id: str, text: str, **kw: Any) -> None:
        if self.closed:
            self.after_shutdown.append(text)
        await super().user_message(session_id, text, **kw)

    async def shutdown(self) -> None:
        await super().shutdown()
        self.closed = True


async def test_a_message_waiting_in_its_lane_is_handled_before_the_engine_shuts_down(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = SlowStopEngine()
    stop = asyncio.Event()
    async with open_db(tmp_path / "p.db") as db:
        task = asyncio.create_task(serve(settings_for(fake_api), engine, db, stop=stop))
        await eventually(lambda: bool(engine.named("start")))
        fake_api.user_message(OWNER, OWNER, "/stop")
        fake_api.user_message(OWNER, OWNER, "please also do X")
        await asyncio.wait_for(engine.stopping.wait(), 10)
        stop.set()
        await asyncio.wait_for(task, 20)
    assert engine.after_shutdown == []
    assert [c.args[1] for c in engine.named("user_message")] == ["please also do X"]


async def test_a_paced_refusal_does_not_hold_the_owners_next_command(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    async with open_db(tmp_path / "p.db") as db, running_bot(fake_api, engine, db) as app:
        fake_api.fail_next("sendMessage", retry_after=3)
        fake_api.user_message(GROUP, STRANGER, f"@{app.bot.username} do stuff")
        fake_api.user_message(GROUP, OWNER, "/status")
        await eventually(lambda: bool(engine.named("command")))
        # The owner was heard while the stranger's refusal still waited out its 429.
        refusal = html_to_text(REFUSAL_TEXT)
        assert not any(m.text == refusal for m in fake_api.bot_messages(GROUP))
        # The owner's answer goes once the chat's pause is over; the refusal that drew the
        # 429 was dropped rather than queued ahead of it (refusals are expendable).
        await eventually(
            lambda: any(m.text == "ok status" for m in fake_api.bot_messages(GROUP)), timeout_s=15
        )
    assert not any(m.text == refusal for m in fake_api.bot_messages(GROUP))
