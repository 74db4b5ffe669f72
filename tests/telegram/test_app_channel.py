"""TelegramChannel: replies, questions with option buttons, typing, notices, goal cards."""

from __future__ import annotations

from pathlib import Path

from bot.channels import ChannelQueue
from bot.telegram.app import parts
from bot.telegram.channel import TELEGRAM_LIMITS
from bot.telegram.routes import goal_card_key
from tests.fakebot.server import FakeBotApi
from tests.keys import chat_key
from tests.telegram.app_support import (
    GROUP,
    OWNER,
    RecordingEngine,
    eventually,
    open_db,
    running_bot,
)


async def test_reply_is_rendered_split_and_answers_the_opening_message(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    slot = ChannelQueue(TELEGRAM_LIMITS)
    async with (
        open_db(tmp_path / "p.db") as db,
        running_bot(fake_api, engine, db, notices=slot),
    ):
        opening = fake_api.user_message(GROUP, OWNER, f"@{fake_api.username} explain")
        await eventually(lambda: len(engine.named("user_message")) == 1)
        call = engine.named("user_message")[0]
        assert call.kwargs["message_id"] == opening.message_id
        # Over one message (4,096), under the answer.md limit (6,000 visible characters).
        body = "**Done.** Here is why:\n\n" + "\n\n".join(f"Paragraph {i} " * 40 for i in range(10))
        await slot.reply(call.args[0], body, reply_to=opening.message_id)
    msgs = fake_api.bot_messages(GROUP)
    assert len(msgs) >= 2
    assert msgs[0].reply_to == opening.message_id and msgs[0].text.startswith("Done.")
    assert any(e["type"] == "bold" for e in msgs[0].entities)
    assert all(m.reply_to is None for m in msgs[1:])


async def test_ask_options_come_back_as_the_owner_message_once(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    async with open_db(tmp_path / "p.db") as db, running_bot(fake_api, engine, db) as app:
        fake_api.user_message(OWNER, OWNER, "start")
        await eventually(lambda: len(engine.named("user_message")) == 1)
        await parts(app).channel.ask("s1", "Which *database*?", ["SQLite", "PostgreSQL"])
        question = fake_api.bot_messages(OWNER)[-1]
        assert "Which database?" in question.text
        data = question.buttons[1][0][1]
        assert question.buttons[1][0][0] == "PostgreSQL"
        qid = fake_api.press(OWNER, question.message_id, data, user_id=OWNER)
        await eventually(lambda: len(engine.named("user_message")) == 2)
        again = fake_api.press_raw(OWNER, question.message_id, data, user_id=OWNER)
        await eventually(lambda: again in fake_api.callback_answers)
        await parts(app).presenter.flush()
    answer = engine.named("user_message")[1]
    assert answer.args == ("s1", "PostgreSQL")
    assert answer.kwargs["actor"] == OWNER and answer.kwargs["message_id"] == question.message_id
    assert "PostgreSQL" in (fake_api.callback_answers[qid]["text"] or "")
    assert fake_api.callback_answers[again]["text"] == "This question is out of date."
    assert fake_api.message(OWNER, question.message_id).buttons == []
    assert len(engine.named("user_message")) == 2


async def test_typing_and_notice_go_to_the_session_chat(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    async with open_db(tmp_path / "p.db") as db, running_bot(fake_api, engine, db) as app:
        fake_api.user_message(GROUP, OWNER, "/status", thread_id=5)
        await eventually(lambda: len(fake_api.bot_messages(GROUP)) == 1)
        channel = parts(app).channel
        await channel.typing("s1")
        await channel.typing("s1")  # within a few seconds: not sent again
        await channel.notice("s1", "The approval was <stale>.")
    assert fake_api.chat(GROUP).chat_actions == ["typing"]
    notice = fake_api.bot_messages(GROUP)[-1]
    assert notice.text == "The approval was <stale>." and notice.thread_id == 5


async def test_goal_card_is_drawn_and_its_resume_press_reaches_the_engine(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    async with open_db(tmp_path / "p.db") as db, running_bot(fake_api, engine, db) as app:
        fake_api.user_message(GROUP, OWNER, "/status")
        await eventually(lambda: len(fake_api.bot_messages(GROUP)) == 1)
        goal = engine.set_goal("s1", phase="paused")
        await parts(app).channel.goal_changed("s1")
        await eventually(lambda: len(fake_api.bot_messages(GROUP)) == 2)
        card = fake_api.bot_messages(GROUP)[-1]
        assert "keep the tests green" in card.text
        assert [t for row in card.buttons for t, _ in row] == ["▶️ Resume", "✖️ Clear"]
        fake_api.press(GROUP, card.message_id, card.buttons[0][0][1], user_id=OWNER)
        await eventually(lambda: len(engine.named("press")) == 1)
        # Armed now: the same message shows Pause.
        engine.goals["s1"] = goal.model_copy(update={"phase": "active"})
        await parts(app).channel.goal_changed("s1")
        await parts(app).presenter.flush()
        await eventually(
            lambda: fake_api.message(GROUP, card.message_id).buttons[0][0][0] == "⏸ Pause"
        )
    press = engine.named("press")[0].kwargs
    assert press["kind"] == "g" and press["action"] == "resume"
    assert press["short_id"] == goal.id[:8] and press["revision"] == goal.revision


async def test_a_very_long_reply_goes_as_a_document(fake_api: FakeBotApi, tmp_path: Path) -> None:
    engine = RecordingEngine()
    async with open_db(tmp_path / "p.db") as db, running_bot(fake_api, engine, db) as app:
        opening = fake_api.user_message(OWNER, OWNER, "write a novel")
        await eventually(lambda: len(engine.named("user_message")) == 1)
        body = "\n\n".join(f"Chapter {i}. " + "word " * 800 for i in range(12))
        await parts(app).channel.reply("s1", body, reply_to=opening.message_id)
    summary, doc = fake_api.bot_messages(OWNER)
    assert summary.document is None and summary.reply_to == opening.message_id
    assert summary.text.startswith("Chapter 0.") and "attached as answer.md" in summary.text
    assert "Chapter 1." not in summary.text
    assert doc.document is not None and doc.document["file_name"] == "answer.md"
    assert doc.reply_to == opening.message_id
    assert fake_api.files[f"documents/{doc.document['file_id']}"] == body.encode()


async def test_a_task_goal_alone_posts_no_goal_card(fake_api: FakeBotApi, tmp_path: Path) -> None:
    engine = RecordingEngine()
    async with open_db(tmp_path / "p.db") as db, running_bot(fake_api, engine, db) as app:
        fake_api.user_message(OWNER, OWNER, "/status")
        await eventually(lambda: len(fake_api.bot_messages(OWNER)) == 1)
        presenter = parts(app).presenter
        engine.set_goal("s1", source="task", objective="- greet works")
        await parts(app).channel.goal_changed("s1")
        await presenter.flush()
        del engine.goals["s1"]
        await parts(app).channel.goal_changed("s1")
        await presenter.flush()
        assert len(fake_api.bot_messages(OWNER)) == 1
        engine.set_goal("s1", objective="ship it")  # a user goal gets its card
        await parts(app).channel.goal_changed("s1")
        await presenter.flush()
    texts = [m.text for m in fake_api.bot_messages(OWNER)]
    assert len(texts) == 2 and "ship it" in texts[1]


async def test_an_option_asked_before_new_is_out_of_date(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    async with open_db(tmp_path / "p.db") as db, running_bot(fake_api, engine, db) as app:
        fake_api.user_message(OWNER, OWNER, "start")
        await eventually(lambda: len(engine.named("user_message")) == 1)
        await parts(app).channel.ask("s1", "Which database?", ["SQLite", "PostgreSQL"])
        question = fake_api.bot_messages(OWNER)[-1]
        data = question.buttons[0][0][1]
        fake_api.user_message(OWNER, OWNER, "/new")
        await eventually(lambda: len(engine.named("new_session")) == 1)
        pressed = fake_api.press_raw(OWNER, question.message_id, data, user_id=OWNER)
        await eventually(lambda: pressed in fake_api.callback_answers)
        await parts(app).presenter.flush()
    assert fake_api.callback_answers[pressed]["text"] == "This question is out of date."
    # The ended session got no message, and the new one none on its behalf.
    assert len(engine.named("user_message")) == 1


async def test_an_older_homes_goal_card_is_edited_in_place_and_moves_into_the_engine(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    # Before the engine kept the goal card's message, the bot kept it in its meta table: a
    # home from then keeps editing the same card, and the id moves into the engine once.
    engine = RecordingEngine()
    async with open_db(tmp_path / "p.db") as db:
        async with running_bot(fake_api, engine, db) as app:
            fake_api.user_message(GROUP, OWNER, "/status")
            await eventually(lambda: len(fake_api.bot_messages(GROUP)) == 1)
            engine.set_goal("s1", phase="paused")
            await parts(app).channel.goal_changed("s1")
            await eventually(lambda: len(fake_api.bot_messages(GROUP)) == 2)
        card = fake_api.bot_messages(GROUP)[-1]
        assert engine.goal_cards["s1"] == (chat_key(GROUP), str(card.message_id))
        # The older home: the id in the meta table, the engine knowing none.
        del engine.goal_cards["s1"]
        await db.set_meta(goal_card_key("s1"), f"{GROUP}:{card.message_id}")
        async with running_bot(fake_api, engine, db) as app:
            engine.goals["s1"] = engine.goals["s1"].model_copy(update={"objective": "ship it"})
            await parts(app).channel.goal_changed("s1")
            await parts(app).presenter.flush()
            await eventually(lambda: "ship it" in fake_api.message(GROUP, card.message_id).text)
        assert len(fake_api.bot_messages(GROUP)) == 2  # edited, never posted anew
        assert engine.goal_cards["s1"] == (chat_key(GROUP), str(card.message_id))
        assert not await db.get_meta(goal_card_key("s1"))
