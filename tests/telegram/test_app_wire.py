"""What one input does on the wire: floods, transient errors, migration, long titles,
malformed presses, privacy. The real PTB Application against the fake Bot API throughout."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from bot.telegram.access import REFUSAL_TEXT, REFUSALS_PER_CHAT
from bot.telegram.app import parts
from bot.telegram.keys import tg_flow
from bot.telegram.routes import GROUPS_KEY
from tests.fakebot.clock import ManualClock
from tests.fakebot.server import FakeBotApi
from tests.keys import chat
from tests.telegram.app_support import (
    GROUP,
    OWNER,
    STALE,
    STRANGER,
    RecordingEngine,
    eventually,
    open_db,
    running_bot,
)
from tests.telegram.test_app_e2e import live_bot
from tests.telegram.test_app_press import PLAN_MD, card_of, data_of, review_card


def texts(api: FakeBotApi, chat_id: int = GROUP) -> list[str]:
    return [m.text for m in api.bot_messages(chat_id)]


async def test_sixty_non_owners_cannot_hold_up_the_owners_status(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    async with open_db(tmp_path / "p.db") as db, running_bot(fake_api, engine, db):
        for i in range(60):
            fake_api.user_message(GROUP, 5000 + i, "@plangate_test_bot do something")
        fake_api.user_message(GROUP, OWNER, "/status")
        await eventually(lambda: "ok status" in texts(fake_api))
    refusals = [t for t in texts(fake_api) if t == REFUSAL_TEXT]
    # Capped per chat, not per user: a flood costs the group's budget three messages.
    assert 1 <= len(refusals) <= REFUSALS_PER_CHAT
    assert texts(fake_api).index("ok status") <= REFUSALS_PER_CHAT


async def test_sixty_non_owner_help_commands_cannot_hold_up_the_owners_status(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    async with open_db(tmp_path / "p.db") as db, running_bot(fake_api, engine, db) as app:
        for i in range(60):
            # Twenty strangers, three read-only commands each, as a crowd would.
            command = ("/help", "/status", "/show_plan")[i % 3]
            fake_api.user_message(GROUP, 5000 + i // 3, command)
        asked = fake_api.user_message(GROUP, OWNER, "/status")
        await eventually(lambda: "ok status" in texts(fake_api))
        gate = parts(app).gate
        await eventually(lambda: gate.answers.dropped >= 60 - REFUSALS_PER_CHAT)
    sent = texts(fake_api)
    # One budget per chat for everything said to non-owners: three answers a minute; the
    # rest were dropped without a word, and counted.
    answers = [t for t in sent if t.startswith("ok ")]
    assert len(answers) <= REFUSALS_PER_CHAT + 1
    assert gate.answers.dropped == 60 - (len(answers) - 1)
    # The owner's answer is among the first sends of the chat (the answers to non-owners go
    # last): it never waited behind the crowd.
    replies = [m.reply_to for m in fake_api.bot_messages(GROUP)]
    assert asked.message_id in replies
    assert replies.index(asked.message_id) <= REFUSALS_PER_CHAT


async def test_429s_and_502s_lose_no_reply_and_the_review_card_still_appears(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    clock = ManualClock()  # the outbox waits out every retry_after at once
    async with (
        open_db(tmp_path / "p.db") as db,
        running_bot(fake_api, engine, db, clock=clock, sleep=clock.sleep),
    ):
        fake_api.storm(30, retry_after=1)
        await review_card(fake_api, engine)  # "Planning.", the card, the review card
        assert "Planning." in texts(fake_api)
        fake_api.fail_status("sendMessage", 3, code=502)
        for _ in range(4):
            fake_api.user_message(GROUP, OWNER, "/status")
        await eventually(lambda: texts(fake_api).count("ok status") == 4)
    assert clock.sleeps.count(1.0) >= 30 - fake_api.count("answerCallbackQuery")


async def test_a_title_over_1024_characters_on_a_long_plan_still_gets_its_review_card(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    async with open_db(tmp_path / "p.db") as db, running_bot(fake_api, engine, db):
        fake_api.user_message(GROUP, OWNER, "/plan add login")
        await eventually(lambda: len(engine.named("set_plan_flow")) == 1)
        title = "Rework " + "the very long title " * 60  # ~1,200 characters
        engine.plans["s1"] = engine.plans["s1"].model_copy(update={"title": title})
        steps = "\n".join(f"{i}. Step {i}: " + "do a careful thing " * 30 for i in range(1, 60))
        engine.write_plan("s1", PLAN_MD + "\n" + steps)
        fake_api.user_message(GROUP, OWNER, "/show_plan")
        await eventually(lambda: bool(card_of(fake_api, engine).buttons))
    docs = [m for m in fake_api.bot_messages(GROUP) if m.document is not None]
    assert len(docs) == 1 and docs[0].text.endswith("…") and len(docs[0].text) <= 1024
    card = card_of(fake_api, engine)
    assert card.text.startswith("📋 Rework the very long title")
    assert next(t for row in card.buttons for t, _ in row) == "✅ Approve"


async def test_a_malformed_press_on_the_live_card_is_answered_and_changes_nothing(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    async with open_db(tmp_path / "p.db") as db, running_bot(fake_api, engine, db) as app:
        card = await review_card(fake_api, engine)
        before = card.buttons
        data = data_of(card, "✅ Approve") + " "  # trailing whitespace after the revision
        qid = fake_api.press_raw(GROUP, card.message_id, data, user_id=OWNER)
        await eventually(lambda: qid in fake_api.callback_answers)
        await parts(app).presenter.flush()
    assert fake_api.callback_answers[qid]["text"] == STALE
    assert fake_api.message(GROUP, card.message_id).buttons == before
    assert engine.named("press") == []
    assert fake_api.count("editMessageReplyMarkup") == 0


async def test_status_shows_the_workspace_path_to_owners_only(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    async with live_bot(fake_api, tmp_path, []) as live:
        fake_api.user_message(GROUP, STRANGER, "/status")
        await eventually(lambda: any(t.startswith("Session") for t in texts(fake_api)))
        fake_api.user_message(GROUP, OWNER, "/status")
        await eventually(lambda: sum(t.startswith("Session") for t in texts(fake_api)) == 2)
    stranger, owner = [t for t in texts(fake_api) if t.startswith("Session")]
    assert str(live.workspace) not in stranger and "/" not in stranger.splitlines()[0]
    assert str(live.workspace) in owner


async def test_a_group_upgraded_to_a_supergroup_keeps_its_permission_and_its_session(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    old, new = -4242, -1004242
    fake_api.chat(old, type="group")
    async with live_bot(fake_api, tmp_path, []) as live:
        fake_api.bot_added(old, by_user_id=OWNER)  # an owner added the bot: not in settings
        fake_api.user_message(old, OWNER, "/plan")
        await eventually(lambda: len(fake_api.bot_messages(old)) >= 2)  # reply and card
        sid = await live.engine.session_for_chat(chat(old))
        fake_api.migrate_group(old, new, by_user_id=OWNER)
        await eventually(lambda: len(fake_api.bot_messages(new)) >= 1)  # the card, anew
        fake_api.user_message(new, OWNER, "/status")
        await eventually(lambda: any(t.startswith("Session") for t in texts(fake_api, new)))
        assert await live.engine.session_for_chat(chat(new)) == sid
        sidecar = await live.engine.plans.current(sid)
        assert sidecar is not None and tg_flow(sidecar.flow).chat_id == new
        stored = await live.storage.db.get_meta(GROUPS_KEY)
    assert fake_api.count("leaveChat") == 0 and fake_api.chats[new].bot_is_member
    assert new in json.loads(stored or "[]")
    status = next(t for t in texts(fake_api, new) if t.startswith("Session"))
    assert status.startswith(f"Session {sid[:8]}") and "Plan: " in status
    # The plan's card lives in the supergroup now: its flow names a message there.
    assert tg_flow(sidecar.flow).card_id is not None
    assert "📋" in fake_api.message(new, tg_flow(sidecar.flow).card_id).text


async def test_a_card_edit_refused_past_the_deadline_is_noticed_once_and_redrawn(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    clock = ManualClock()
    async with (
        open_db(tmp_path / "p.db") as db,
        running_bot(fake_api, engine, db, clock=clock, sleep=clock.sleep),
    ):
        card = await review_card(fake_api, engine)
        edits = fake_api.count("editMessageText")
        # Telegram asks for a pause longer than the outbox's 10-minute deadline.
        fake_api.fail_next("editMessageText", 1, retry_after=900)
        fake_api.press(GROUP, card.message_id, data_of(card, "✅ Approve"), user_id=OWNER)
        await eventually(lambda: "Write the model" in fake_api.message(GROUP, card.message_id).text)
    notices = [t for t in texts(fake_api) if "kept refusing" in t]
    assert len(notices) == 1
    assert fake_api.count("editMessageText") - edits >= 2  # refused, then the redraw
    assert "0/3" in fake_api.message(GROUP, card.message_id).text


async def test_a_commands_answer_goes_ahead_of_queued_card_progress(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    clock = ManualClock()
    resume = asyncio.Event()

    async def held_sleep(seconds: float) -> None:
        clock.advance(seconds)
        await resume.wait()  # the chat stays paused until the test has queued everything

    async with (
        open_db(tmp_path / "p.db") as db,
        running_bot(fake_api, engine, db, clock=clock, sleep=held_sleep) as app,
    ):
        outbox, presenter = parts(app).outbox, parts(app).presenter
        for topic in (1, 2, 3):
            fake_api.user_message(GROUP, OWNER, "/plan x", thread_id=topic)
        await eventually(lambda: len(engine.named("set_plan_flow")) == 3)
        await presenter.flush()
        fake_api.fail_next("editMessageText", 1, retry_after=5)
        for sid in ("s1", "s2", "s3"):
            engine.plan_states[sid] = "written"  # progress: each card is edited
            presenter.refresh(sid, "plan")
        # The first edit drew a 429 and waits again in the queue, with the other two.
        await eventually(
            lambda: (
                fake_api.count("editMessageText") == 1 and outbox.waiting(GROUP)["progress"] == 3
            )
        )
        before = len(fake_api.calls)
        fake_api.user_message(GROUP, OWNER, "/status", thread_id=1)
        await eventually(lambda: outbox.waiting(GROUP)["interactive"] == 1)
        resume.set()
        await eventually(lambda: "ok status" in texts(fake_api))
        await presenter.flush()
    after = [c for c in fake_api.calls[before:] if c.method in ("sendMessage", "editMessageText")]
    assert after[0].method == "sendMessage" and after[0].params["text"] == "ok status"
    assert [c.method for c in after[1:]] == ["editMessageText"] * 3  # all progress delivered
    assert all("writing the plan" in fake_api.message(GROUP, c.params["message_id"]).text
               for c in after[1:])  # fmt: skip


async def test_a_reply_that_finds_the_group_upgraded_follows_it_and_the_bot_stays(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    old, new = -4343, -1004343
    fake_api.chat(old, type="group")
    async with live_bot(fake_api, tmp_path, []) as live:
        fake_api.bot_added(old, by_user_id=OWNER)
        fake_api.user_message(old, OWNER, "/status")
        await eventually(lambda: len(fake_api.bot_messages(old)) == 1)
        sid = await live.engine.session_for_chat(chat(old))
        # Upgraded, and the owner's /status is read before Telegram's service messages.
        fake_api.migrate_group(old, new, by_user_id=OWNER, announce=False)
        fake_api.user_message(old, OWNER, "/status")
        await eventually(lambda: len(fake_api.bot_messages(new)) == 1)
        await eventually(lambda: new in parts(live.app).gate.added_groups)
        fake_api.user_message(new, OWNER, "/status")
        await eventually(lambda: len(fake_api.bot_messages(new)) == 2)
        assert await live.engine.session_for_chat(chat(new)) == sid
    assert fake_api.count("leaveChat") == 0
    assert all(t.startswith(f"Session {sid[:8]}") for t in texts(fake_api, new))
