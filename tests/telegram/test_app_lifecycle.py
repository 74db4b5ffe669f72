"""Start-up and plumbing: repeats dropped, groups recorded, restored goals, errors, serve."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest

from bot.telegram.app import announce_restored, file_url, parse_listen, parts, redact, serve
from bot.telegram.routes import GROUPS_KEY, LAST_UPDATE_KEY, RECENT_UPDATES_KEY
from engine.api import RestoredGoal
from storage.db import Database
from tests.fakebot.server import FakeBotApi
from tests.telegram.app_support import (
    OWNER,
    STRANGER,
    RecordingEngine,
    eventually,
    open_db,
    running_bot,
    settings_for,
)

NEW_GROUP = -100999


async def one_message_then_redelivered(
    api: FakeBotApi, engine: RecordingEngine, db: Database
) -> None:
    """A bot run that handles "one"; then Telegram redelivers that update, which the old
    process had not acknowledged, for the next run."""
    async with running_bot(api, engine, db):
        first = api.user_message(OWNER, OWNER, "one")
        await eventually(lambda: len(engine.named("user_message")) == 1)
    stored = await db.get_meta(LAST_UPDATE_KEY)
    assert stored is not None
    api.redeliver(int(stored), first.raw)


async def test_repeated_updates_after_a_restart_are_dropped(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    async with open_db(tmp_path / "p.db") as db:
        await one_message_then_redelivered(fake_api, engine, db)
        fake_api.user_message(OWNER, OWNER, "two")
        async with running_bot(fake_api, engine, db):
            await eventually(lambda: len(engine.named("user_message")) == 2)
            fake_api.user_message(OWNER, OWNER, "three")
            await eventually(lambda: len(engine.named("user_message")) == 3)
    assert [c.args[1] for c in engine.named("user_message")] == ["one", "two", "three"]


@pytest.mark.parametrize(
    "recent",
    ["not json", "[1, 2]", '{"ids": {"x": 1}}', '{"ids": {"5": "soon"}, "date": 1}', '{"date": 2}'],
)
async def test_an_unreadable_ledger_of_recent_ids_loses_no_message(
    fake_api: FakeBotApi, tmp_path: Path, caplog: pytest.LogCaptureFixture, recent: str
) -> None:
    engine = RecordingEngine()
    async with open_db(tmp_path / "p.db") as db:
        # The watermark alone still drops the re-delivered update; a new one is answered.
        await one_message_then_redelivered(fake_api, engine, db)
        await db.set_meta(RECENT_UPDATES_KEY, recent)
        await db.set_meta(GROUPS_KEY, "{broken")
        fake_api.user_message(OWNER, OWNER, "two")
        with caplog.at_level(logging.WARNING, logger="plangate"):
            async with running_bot(fake_api, engine, db):
                await eventually(lambda: len(engine.named("user_message")) == 2)
    assert [c.args[1] for c in engine.named("user_message")] == ["one", "two"]
    assert "recent_updates_unreadable" in caplog.text


async def test_update_ids_that_restart_lower_after_a_week_are_answered(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    fake_api.renumber_updates(5000)
    async with open_db(tmp_path / "p.db") as db:
        async with running_bot(fake_api, engine, db):
            old = fake_api.user_message(OWNER, OWNER, "before")
            await eventually(lambda: len(engine.named("user_message")) == 1)
        assert await db.get_meta(LAST_UPDATE_KEY) == "5000"
        # A week without updates: Telegram numbers anew, far below the stored watermark.
        fake_api.date_offset_s = 7 * 86400
        fake_api.renumber_updates(77)
        # The old process's last update comes again first (its offset was not confirmed).
        fake_api.redeliver(5000, old.raw)
        later = fake_api.user_message(OWNER, OWNER, "a week later")
        async with running_bot(fake_api, engine, db):
            await eventually(lambda: len(engine.named("user_message")) == 2)
            await fake_api.drain()
        assert await db.get_meta(LAST_UPDATE_KEY) == "77"
        # After another restart, a re-delivery in the new numbering is dropped; the next is not.
        fake_api.redeliver(77, later.raw)
        async with running_bot(fake_api, engine, db):
            fake_api.user_message(OWNER, OWNER, "next")
            await eventually(lambda: len(engine.named("user_message")) == 3)
            await fake_api.drain()
    assert [c.args[1] for c in engine.named("user_message")] == ["before", "a week later", "next"]


async def test_groups_an_owner_adds_are_remembered_and_others_are_left(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    async with open_db(tmp_path / "p.db") as db:
        async with running_bot(fake_api, engine, db):
            fake_api.bot_added(NEW_GROUP, by_user_id=OWNER)
            await fake_api.drain()
            assert fake_api.count("leaveChat") == 0
            fake_api.bot_added(-100555, by_user_id=STRANGER)
            await eventually(lambda: fake_api.count("leaveChat") == 1)
        assert json.loads(await db.get_meta(GROUPS_KEY) or "[]") == [NEW_GROUP]
        # After a restart the owner-added group is still allowed.
        async with running_bot(fake_api, engine, db):
            fake_api.user_message(NEW_GROUP, OWNER, "/status")
            await eventually(lambda: len(fake_api.bot_messages(NEW_GROUP)) == 1)
    assert fake_api.calls_of("leaveChat")[0].params["chat_id"] == -100555
    assert fake_api.chat(-100555).bot_is_member is False
    assert fake_api.chat(NEW_GROUP).bot_is_member is True


async def test_restored_goals_are_announced_with_resume(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    async with open_db(tmp_path / "p.db") as db:
        async with running_bot(fake_api, engine, db):
            fake_api.user_message(OWNER, OWNER, "hello")
            await eventually(lambda: len(engine.named("user_message")) == 1)
        goal = engine.set_goal("s1", rounds_started=1)
        engine.restored = [RestoredGoal(session_id="s1", goal=goal)]
        async with running_bot(fake_api, engine, db) as app:
            await announce_restored(app, await engine.start())
            await parts(app).presenter.flush()
    card = fake_api.bot_messages(OWNER)[-1]
    assert "Paused by the restart" in card.text
    assert [t for row in card.buttons for t, _ in row] == ["▶️ Resume", "✖️ Clear"]


async def test_the_error_handler_logs_the_type_without_the_token(
    fake_api: FakeBotApi, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    class Exploding(RecordingEngine):
        async def command(self, session_id, name, args, *, actor, actor_name=""):  # type: ignore[no-untyped-def]
            raise RuntimeError(f"boom with {fake_api.token} inside")

    engine = Exploding()
    caplog.set_level(logging.ERROR, logger="plangate.handlers")
    # Quieting python-telegram-bot's own tree must not quiet plangate's loggers.
    library = logging.getLogger("telegram")
    before = library.level
    library.setLevel(logging.CRITICAL)
    try:
        async with open_db(tmp_path / "p.db") as db, running_bot(fake_api, engine, db):
            fake_api.user_message(OWNER, OWNER, "/status")
            await eventually(
                lambda: any(
                    r.name == "plangate.handlers" and "plangate.handlers.error" in r.message
                    for r in caplog.records
                )
            )
            await eventually(lambda: len(fake_api.bot_messages(OWNER)) == 1)
    finally:
        library.setLevel(before)
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "type=RuntimeError" in text
    assert fake_api.token not in text and "TEST-token" not in text
    told = fake_api.bot_messages(OWNER)[0]
    assert told.text == "⚠️ That failed (RuntimeError); the log has the details."
    assert "TEST-token" not in told.text


def test_small_helpers() -> None:
    assert file_url("https://api.telegram.org/bot") == "https://api.telegram.org/file/bot"
    assert file_url("http://127.0.0.1:81/bot/") == "http://127.0.0.1:81/file/bot"
    assert parse_listen("127.0.0.1:8080") == ("127.0.0.1", 8080)
    assert parse_listen(None) == ("0.0.0.0", 8443)
    assert redact("url /bot123:ABCDEFGHIJ/x and ABCDEFGHIJ", "123:ABCDEFGHIJ") == (
        "url /bot<token>/x and <token>"
    )


async def test_serve_polls_starts_and_stops_the_engine(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    stop = asyncio.Event()
    async with open_db(tmp_path / "p.db") as db:
        task = asyncio.create_task(serve(settings_for(fake_api), engine, db, stop=stop))
        fake_api.user_message(OWNER, OWNER, "hi")
        await eventually(lambda: len(engine.named("user_message")) == 1)
        stop.set()
        await asyncio.wait_for(task, 15)
    assert [c.name for c in engine.calls if c.name in ("start", "shutdown")] == [
        "start",
        "shutdown",
    ]
    assert [c["command"] for c in fake_api.commands][1] == "show_plan"


async def test_new_after_a_restart_strips_the_cards_drawn_before_it(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    async with open_db(tmp_path / "p.db") as db:
        async with running_bot(fake_api, engine, db) as app:
            fake_api.user_message(OWNER, OWNER, "hello")
            await eventually(lambda: len(engine.named("user_message")) == 1)
            engine.set_goal("s1", phase="paused")
            await parts(app).channel.goal_changed("s1")
            await parts(app).presenter.flush()
        goal_card = fake_api.bot_messages(OWNER)[-1]
        assert goal_card.buttons
        async with running_bot(fake_api, engine, db) as app:
            fake_api.user_message(OWNER, OWNER, "/new")
            await eventually(lambda: fake_api.message(OWNER, goal_card.message_id).buttons == [])
