"""The card presenter through the real application: coalescing, repost, restart, 429s."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from bot.telegram.app import parts
from bot.telegram.keys import tg_flow
from bot.telegram.presenter import HEARTBEAT_S
from tests.fakebot.server import FakeBotApi
from tests.telegram.app_support import (
    GROUP,
    OWNER,
    RecordingEngine,
    eventually,
    open_db,
    running_bot,
    settings_for,
)

TASKS = [f"Step {i}" for i in range(1, 9)]


async def active_plan(api: FakeBotApi, engine: RecordingEngine) -> int:
    """/plan, written, approved (directly in the toy engine): returns the card id."""
    api.user_message(GROUP, OWNER, "/plan x")
    await eventually(lambda: len(engine.named("set_plan_flow")) == 1)
    engine.activate("s1", TASKS)
    card_id = tg_flow(engine.plans["s1"].flow).card_id
    assert card_id is not None
    return card_id


async def test_a_burst_of_changes_makes_one_edit_with_the_last_state(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    settings = settings_for(fake_api, flow_edit_interval=0.3)
    async with (
        open_db(tmp_path / "p.db") as db,
        running_bot(fake_api, engine, db, settings=settings) as app,
    ):
        card_id = await active_plan(fake_api, engine)
        await parts(app).presenter.flush()
        edits_before = fake_api.count("editMessageText")
        channel = parts(app).channel
        for i in range(1, 9):  # no await yields between these: one draw sees the last state
            engine.complete("s1", str(i))
            await channel.plan_changed("s1")
        await parts(app).presenter.flush()
        card = fake_api.message(GROUP, card_id)
        assert "8/8" in card.text and "Done" in card.text
        assert fake_api.count("editMessageText") - edits_before == 1
        # The same state again: nothing to send.
        await channel.plan_changed("s1")
        await parts(app).presenter.flush()
        assert fake_api.count("editMessageText") - edits_before == 1


async def test_a_working_card_says_when_it_last_made_progress_and_keeps_it_current(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    beats: list[float] = []
    beat = asyncio.Event()

    async def sleep(seconds: float) -> None:
        # The heartbeat's wait is held until the test lets it go; every other wait passes.
        if seconds == HEARTBEAT_S:
            beats.append(seconds)
            await beat.wait()
            beat.clear()
        else:
            await asyncio.sleep(0)

    async with (
        open_db(tmp_path / "p.db") as db,
        running_bot(fake_api, engine, db, sleep=sleep) as app,
    ):
        card_id = await active_plan(fake_api, engine)
        engine.card_extra["s1"] = {"busy": True, "last_progress_at": time.time() - 300}
        await parts(app).channel.plan_changed("s1")
        await parts(app).presenter.flush()
        text = fake_api.message(GROUP, card_id).text
        assert "Working on" in text and "last progress 5 min ago" in text
        await eventually(lambda: len(beats) == 1)  # a timer while the turn works
        engine.card_extra["s1"]["last_progress_at"] = time.time() - 600
        beat.set()  # a minute later, with no change of its own, the card is redrawn
        await eventually(
            lambda: "last progress 10 min ago" in fake_api.message(GROUP, card_id).text
        )
        await eventually(lambda: len(beats) == 2)
        engine.card_extra["s1"] = {}  # the turn ended: the line goes, and the timer with it
        edits = fake_api.count("editMessageText")
        beat.set()
        await eventually(lambda: "last progress" not in fake_api.message(GROUP, card_id).text)
        await parts(app).presenter.flush()
        assert fake_api.count("editMessageText") == edits + 1
        assert len(beats) == 2


async def test_spaced_changes_each_reach_the_card(fake_api: FakeBotApi, tmp_path: Path) -> None:
    engine = RecordingEngine()
    async with open_db(tmp_path / "p.db") as db, running_bot(fake_api, engine, db) as app:
        card_id = await active_plan(fake_api, engine)
        channel = parts(app).channel
        for i in (1, 2, 3):
            engine.complete("s1", str(i))
            await channel.plan_changed("s1")
            await parts(app).presenter.flush()
            assert f"{i}/8" in fake_api.message(GROUP, card_id).text
        assert fake_api.message(GROUP, card_id).edits[-1].count("✅") == 2


async def test_a_lost_card_is_reposted_and_its_new_id_saved(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    async with open_db(tmp_path / "p.db") as db, running_bot(fake_api, engine, db) as app:
        card_id = await active_plan(fake_api, engine)
        await parts(app).presenter.flush()
        fake_api.message(GROUP, card_id).deleted = True  # someone deleted the card
        engine.complete("s1", "1")
        await parts(app).channel.plan_changed("s1")
        await eventually(lambda: tg_flow(engine.plans["s1"].flow).card_id != card_id)
        new_id = tg_flow(engine.plans["s1"].flow).card_id
        assert new_id is not None
        assert "1/8" in fake_api.message(GROUP, new_id).text


async def test_a_restart_keeps_editing_the_same_card(fake_api: FakeBotApi, tmp_path: Path) -> None:
    engine = RecordingEngine()
    async with open_db(tmp_path / "p.db") as db:
        async with running_bot(fake_api, engine, db) as app:
            card_id = await active_plan(fake_api, engine)
            await parts(app).presenter.flush()
        sends = fake_api.count("sendMessage")
        # A new process: same database, same sidecar flow; no update seen yet.
        async with running_bot(fake_api, engine, db) as app2:
            engine.complete("s1", "1")
            await parts(app2).channel.plan_changed("s1")
            await parts(app2).presenter.flush()
    assert fake_api.count("sendMessage") == sends
    assert tg_flow(engine.plans["s1"].flow).card_id == card_id
    assert "1/8" in fake_api.message(GROUP, card_id).text


async def test_a_429_storm_still_ends_with_the_right_card(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    async with open_db(tmp_path / "p.db") as db, running_bot(fake_api, engine, db) as app:
        card_id = await active_plan(fake_api, engine)
        await parts(app).presenter.flush()
        fake_api.storm(3, retry_after=1)
        channel = parts(app).channel
        for i in range(1, 9):
            engine.complete("s1", str(i))
            await channel.plan_changed("s1")
            if i % 3 == 0:
                await parts(app).presenter.flush()
        await parts(app).presenter.flush()
        assert "8/8" in fake_api.message(GROUP, card_id).text
        assert "Done" in fake_api.message(GROUP, card_id).text


async def test_a_long_plan_goes_for_review_as_a_document(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    long_md = "## Implementation steps\n" + "\n".join(
        f"{i}. Step {i} — " + "words " * 150 for i in range(1, 40)
    )
    async with open_db(tmp_path / "p.db") as db, running_bot(fake_api, engine, db) as app:
        fake_api.user_message(GROUP, OWNER, "/plan x")
        await eventually(lambda: len(engine.named("set_plan_flow")) == 1)
        engine.write_plan("s1", long_md)
        await parts(app).channel.plan_changed("s1")
        await eventually(lambda: len(tg_flow(engine.plans["s1"].flow).review_ids) == 1)
        await parts(app).presenter.flush()
    doc = fake_api.message(GROUP, tg_flow(engine.plans["s1"].flow).review_ids[0])
    assert doc.document is not None and doc.document["file_name"] == "plan.md"
    assert fake_api.files[f"documents/{doc.document['file_id']}"] == long_md.encode()
    card = fake_api.message(GROUP, tg_flow(engine.plans["s1"].flow).card_id or 0)
    # The card stays where it was (one message per plan) and lists the steps; the
    # document is a reply to it.
    assert card.buttons and "Step 1" in card.text and "attached" in card.text
    assert doc.reply_to == card.message_id


async def test_pin_failures_are_ignored(fake_api: FakeBotApi, tmp_path: Path) -> None:
    engine = RecordingEngine()
    fake_api.chat(GROUP).bot_can_pin = False
    async with open_db(tmp_path / "p.db") as db, running_bot(fake_api, engine, db):
        card_id = await active_plan(fake_api, engine)
    assert fake_api.chat(GROUP).pinned == []
    assert "Add login" in fake_api.message(GROUP, card_id).text
