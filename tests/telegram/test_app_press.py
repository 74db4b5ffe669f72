"""Button presses: decoded, sent to engine.press, answered, and the card redrawn."""

from __future__ import annotations

from pathlib import Path

from bot import presses as cb
from bot.telegram.keys import tg_flow
from tests.fakebot.server import FakeBotApi, FakeMessage
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

PLAN_MD = "## Context\nWhy.\n\n## Implementation steps\n1. Write the model\n2. Add the view"


def card_of(api: FakeBotApi, engine: RecordingEngine, session_id: str = "s1") -> FakeMessage:
    card_id = tg_flow(engine.plans[session_id].flow).card_id
    assert card_id is not None
    return api.message(GROUP, card_id)


def data_of(msg: FakeMessage, label: str) -> str:
    return next(d for row in msg.buttons for text, d in row if text == label)


async def review_card(api: FakeBotApi, engine: RecordingEngine) -> FakeMessage:
    """/plan, then the plan is written: the review card with its keyboard."""
    api.user_message(GROUP, OWNER, "/plan add login")
    await eventually(lambda: len(engine.named("set_plan_flow")) == 1)
    engine.write_plan("s1", PLAN_MD)
    api.user_message(GROUP, OWNER, "/show_plan")
    await eventually(
        lambda: (
            tg_flow(engine.plans["s1"].flow).card_id is not None
            and "Ready for review" in card_of(api, engine).text
        )
    )
    return card_of(api, engine)


async def test_owner_approve_goes_to_the_engine_and_the_card_becomes_a_checklist(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    async with open_db(tmp_path / "p.db") as db, running_bot(fake_api, engine, db):
        card = await review_card(fake_api, engine)
        labels = [t for row in card.buttons for t, _ in row]
        assert labels == ["✅ Approve", "✏️ Keep planning", "🗑 Discard"]
        review_rev = engine.plans["s1"].revision
        qid = fake_api.press(GROUP, card.message_id, data_of(card, "✅ Approve"), user_id=OWNER)
        await eventually(lambda: "Write the model" in fake_api.message(GROUP, card.message_id).text)
    press = engine.named("press")[0]
    assert press.kwargs == {
        "kind": "p",
        "action": cb.PLAN_APPROVE,
        "short_id": engine.plans["s1"].id[:8],
        "revision": review_rev,
        "actor": OWNER,
        "message_id": card.message_id,
    }
    assert fake_api.callback_answers[qid]["text"] == "Approved."
    checklist = fake_api.message(GROUP, card.message_id)
    assert "0/3" in checklist.text
    assert [t for row in checklist.buttons for t, _ in row] == ["🗑 Discard"]


async def test_the_review_card_carries_the_plan_text_in_one_message(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    async with open_db(tmp_path / "p.db") as db, running_bot(fake_api, engine, db):
        card = await review_card(fake_api, engine)
        review_ids = tg_flow(engine.plans["s1"].flow).review_ids
    assert review_ids == []  # no separate plan-text messages
    assert "Implementation steps" in card.text and "Write the model" in card.text
    assert [m.message_id for m in fake_api.bot_messages(GROUP)][-1] == card.message_id


async def test_non_owner_press_is_refused_with_an_alert_and_changes_nothing(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    async with open_db(tmp_path / "p.db") as db, running_bot(fake_api, engine, db):
        card = await review_card(fake_api, engine)
        before = (card.text, card.buttons)
        qid = fake_api.press(GROUP, card.message_id, data_of(card, "✅ Approve"), user_id=STRANGER)
        await eventually(lambda: qid in fake_api.callback_answers)
        fake_api.user_message(GROUP, OWNER, "/status")  # a barrier: updates run in order
        await eventually(lambda: len(engine.named("command")) == 3)
    assert fake_api.callback_answers[qid]["show_alert"] is True
    assert engine.named("press") == []
    after = fake_api.message(GROUP, card.message_id)
    assert (after.text, after.buttons) == before
    assert engine.plan_states["s1"] == "review"


async def test_stale_press_is_out_of_date_and_loses_its_keyboard(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    async with open_db(tmp_path / "p.db") as db, running_bot(fake_api, engine, db):
        old = await review_card(fake_api, engine)
        stale = data_of(old, "✅ Approve")
        engine.write_plan("s1", PLAN_MD + "\n3. Test it")  # a new revision: a new review card
        fake_api.user_message(GROUP, OWNER, "/show_plan")
        await eventually(lambda: card_of(fake_api, engine).message_id != old.message_id)
        await eventually(lambda: bool(card_of(fake_api, engine).buttons))
        qid = fake_api.press_raw(GROUP, old.message_id, stale, user_id=OWNER)
        await eventually(lambda: qid in fake_api.callback_answers)
        forged = fake_api.press_raw(GROUP, old.message_id, "p:approve:zzzz:1x", user_id=OWNER)
        await eventually(lambda: forged in fake_api.callback_answers)
    assert fake_api.callback_answers[qid]["text"] == STALE
    assert fake_api.callback_answers[forged]["text"] == STALE
    assert fake_api.message(GROUP, old.message_id).buttons == []
    assert engine.plan_states["s1"] == "review"  # nothing approved
    assert bool(card_of(fake_api, engine).buttons)  # the live card keeps its keyboard


async def test_keep_planning_asks_with_force_reply_and_hears_the_answer(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    async with open_db(tmp_path / "p.db") as db, running_bot(fake_api, engine, db):
        card = await review_card(fake_api, engine)
        fake_api.press(GROUP, card.message_id, data_of(card, "✏️ Keep planning"), user_id=OWNER)
        await eventually(
            lambda: any("What should change?" in m.text for m in fake_api.bot_messages(GROUP))
        )
        fake_api.user_message(GROUP, OWNER, "split step 2")
        await eventually(lambda: len(engine.named("user_message")) == 1)
    ask = next(m for m in fake_api.bot_messages(GROUP) if "What should change?" in m.text)
    assert ask.text == f"User{OWNER}, What should change?"
    assert ask.entities[0]["type"] == "text_link"  # the owner is mentioned: selective works
    assert ask.entities[0]["url"] == f"tg://user?id={OWNER}"
    assert ask.reply_markup == {"force_reply": True, "selective": True}
    msg = engine.named("user_message")[0]
    assert msg.args == ("s1", "split step 2") and msg.kwargs["feedback"] is True


async def test_discard_swaps_in_the_confirmation_keyboard_on_the_same_card(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    async with open_db(tmp_path / "p.db") as db, running_bot(fake_api, engine, db):
        card = await review_card(fake_api, engine)
        rev = engine.plans["s1"].revision
        fake_api.press(GROUP, card.message_id, data_of(card, "🗑 Discard"), user_id=OWNER)
        await eventually(
            lambda: (
                [t for row in fake_api.message(GROUP, card.message_id).buttons for t, _ in row]
                == ["Yes, discard", "Cancel"]
            )
        )
        confirm = fake_api.message(GROUP, card.message_id)
        assert data_of(confirm, "Yes, discard").endswith(f":{rev}")
        fake_api.press(GROUP, card.message_id, data_of(confirm, "Cancel"), user_id=OWNER)
        await eventually(
            lambda: (
                [t for row in fake_api.message(GROUP, card.message_id).buttons for t, _ in row]
                == ["✅ Approve", "✏️ Keep planning", "🗑 Discard"]
            )
        )


async def test_a_second_plan_at_the_same_revision_gets_a_review_card_of_its_own(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    async with open_db(tmp_path / "p.db") as db, running_bot(fake_api, engine, db):
        first = await review_card(fake_api, engine)
        fake_api.user_message(GROUP, OWNER, "/discard")
        await eventually(lambda: "s1" not in engine.plans)
        engine.open_plan("s1", title="Second plan")
        engine.write_plan("s1", "## Implementation steps\n1. Something else")
        assert engine.plans["s1"].revision == 2  # the same revision as the first plan had
        fake_api.user_message(GROUP, OWNER, "/show_plan")
        await eventually(
            lambda: (
                tg_flow(engine.plans["s1"].flow).card_id is not None
                and "Something else" in card_of(fake_api, engine).text
            )
        )
        second = card_of(fake_api, engine)
    assert second.message_id > first.message_id
    assert fake_api.message(GROUP, first.message_id).buttons == []
