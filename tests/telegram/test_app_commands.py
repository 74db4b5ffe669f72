"""The application's command and message handlers, real PTB over HTTP to the fake Bot API."""

from __future__ import annotations

from pathlib import Path

from telegram import Bot

from bot.channels import ChannelQueue
from bot.telegram.app import parts
from bot.telegram.channel import TELEGRAM_LIMITS
from bot.telegram.keys import tg_flow
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


async def test_menu_registers_show_plan_not_show_dash_plan(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    async with open_db(tmp_path / "p.db") as db, running_bot(fake_api, RecordingEngine(), db):
        names = [c["command"] for c in fake_api.commands]
    assert names == [
        "plan",
        "show_plan",
        "execute",
        "discard",
        "goal",
        "stop",
        "new",
        "project",
        "status",
        "setup",
        "usage",
        "team",
        "whoami",
        "help",
    ]


async def test_plan_in_group_replies_and_posts_a_card_pinned_only_when_set(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    async with open_db(tmp_path / "p.db") as db, running_bot(fake_api, engine, db):
        fake_api.user_message(GROUP, OWNER, "/plan first")
        await eventually(lambda: len(engine.named("set_plan_flow")) == 1)
    # Pinning is off in groups by default: a pin is a call and a notification for everyone.
    assert fake_api.chat(GROUP).pinned == []
    engine = RecordingEngine()
    settings = settings_for(fake_api, pin_cards="always")
    async with (
        open_db(tmp_path / "q.db") as db,
        running_bot(fake_api, engine, db, settings=settings),
    ):
        cmd = fake_api.user_message(GROUP, OWNER, "/plan add a login page\nwith OAuth")
        await eventually(lambda: len(engine.named("set_plan_flow")) == 1)
        await eventually(lambda: fake_api.chat(GROUP).pinned != [])
    call = engine.named("command")[0]
    assert call.args == ("s1", "plan", "add a login page\nwith OAuth")
    assert call.kwargs == {"actor": OWNER}
    bot_msgs = [m for m in fake_api.bot_messages(GROUP) if m.message_id > cmd.message_id]
    reply, card = bot_msgs[0], bot_msgs[1]
    assert reply.text == "Planning." and reply.reply_to == cmd.message_id
    assert "Add login" in card.text and "nothing is changed" in card.text
    flow = engine.named("set_plan_flow")[0].kwargs
    assert flow["chat_id"] == GROUP and flow["card_id"] == card.message_id
    assert fake_api.chat(GROUP).pinned == [card.message_id]


async def test_show_plan_forms_restick_the_card_and_strip_the_old_one(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    settings = settings_for(fake_api, pin_cards="always")
    async with (
        open_db(tmp_path / "p.db") as db,
        running_bot(fake_api, engine, db, settings=settings),
    ):
        engine.open_plan("s1")
        engine.keys[(GROUP, 0)] = "s1"
        engine.write_plan("s1", "## Context\nx\n\n## Implementation steps\n1. Do it")
        forms = ["/show-plan", "/show_plan", f"/show-plan@{fake_api.username}", "/show_plan x"]
        for count, form in enumerate(forms, start=1):
            fake_api.user_message(GROUP, OWNER, form)

            def resticked(n: int = count) -> bool:
                return len(engine.named("set_plan_flow")) == n

            await eventually(resticked)
        fake_api.user_message(GROUP, OWNER, "/show-plan@some_other_bot")
        fake_api.user_message(GROUP, OWNER, "/status")
        await eventually(lambda: len(engine.named("command")) == 5)
    assert [c.args[1] for c in engine.named("command")] == ["show_plan"] * 4 + ["status"]
    cards = [m for m in fake_api.bot_messages(GROUP) if "Add login" in m.text]
    # Four cards were posted; only the last one keeps its buttons.
    assert len(cards) == 4
    assert [bool(c.buttons) for c in cards] == [False, False, False, True]
    assert fake_api.chat(GROUP).pinned == [cards[-1].message_id]  # old pins taken down
    assert all("moved below" in c.text for c in cards[:-1])
    assert tg_flow(engine.plans["s1"].flow).card_id == cards[-1].message_id


async def test_non_owner_show_plan_gets_a_copy_without_buttons(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    async with open_db(tmp_path / "p.db") as db, running_bot(fake_api, engine, db):
        fake_api.user_message(GROUP, OWNER, "/plan x")
        await eventually(lambda: len(engine.named("set_plan_flow")) == 1)
        card_id = tg_flow(engine.plans["s1"].flow).card_id
        engine.write_plan("s1", "## Implementation steps\n1. Do it")
        fake_api.user_message(GROUP, STRANGER, "/show-plan")
        await eventually(lambda: len(fake_api.bot_messages(GROUP)) == 3)
        fake_api.user_message(GROUP, STRANGER, "/plan take over")  # a control command
        # Another stranger: this one's two answers this minute are spent (bot.flood).
        fake_api.user_message(GROUP, STRANGER + 1, "/status")
        await eventually(lambda: len(fake_api.bot_messages(GROUP)) == 5)
    copy = fake_api.bot_messages(GROUP)[2]
    assert "Add login" in copy.text and copy.buttons == []
    # The refusal and the /status answer; the refusal is sent last when both wait.
    assert sum("Sorry" in m.text for m in fake_api.bot_messages(GROUP)[3:5]) == 1
    assert tg_flow(engine.plans["s1"].flow).card_id == card_id  # the live card did not move
    assert [(c.args[1], c.kwargs["actor"]) for c in engine.named("command")] == [
        ("plan", OWNER),
        ("show_plan", STRANGER),
        ("status", STRANGER + 1),  # the engine decides from the actor's role what to show
    ]


async def test_messages_reach_the_agent_only_when_addressed(
    fake_api: FakeBotApi, bot: Bot, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    async with open_db(tmp_path / "p.db") as db, running_bot(fake_api, engine, db):
        fake_api.user_message(OWNER, OWNER, "hello in private")
        fake_api.user_message(GROUP, OWNER, "just chatting")
        fake_api.user_message(GROUP, OWNER, f"@{fake_api.username} fix the tests")
        bot_msg = await bot.send_message(GROUP, "agent said")
        fake_api.user_message(GROUP, OWNER, "and the docs", reply_to=bot_msg.message_id)
        fake_api.user_message(GROUP, STRANGER, f"@{fake_api.username} do my homework")
        fake_api.user_message(GROUP, STRANGER, f"@{fake_api.username} please")
        fake_api.user_message(GROUP, OWNER, "marker", thread_id=None, reply_to=None)
        await eventually(
            lambda: (
                any("Sorry" in m.text for m in fake_api.bot_messages(GROUP))
                and len(engine.named("session_for_chat")) >= 3
            )
        )
        fake_api.user_message(OWNER, OWNER, "last")
        await eventually(lambda: len(engine.named("user_message")) == 4)
    texts = [(c.args[1], c.kwargs["actor"]) for c in engine.named("user_message")]
    assert texts == [
        ("hello in private", OWNER),
        ("fix the tests", OWNER),
        ("and the docs", OWNER),
        ("last", OWNER),
    ]
    refusals = [m for m in fake_api.bot_messages(GROUP) if "Sorry" in m.text]
    assert len(refusals) == 1  # once per user per chat per minute


async def test_forum_topics_are_sessions_of_their_own(fake_api: FakeBotApi, tmp_path: Path) -> None:
    engine = RecordingEngine()
    async with open_db(tmp_path / "p.db") as db, running_bot(fake_api, engine, db):
        fake_api.user_message(GROUP, OWNER, "/status", thread_id=7)
        fake_api.user_message(GROUP, OWNER, "/status")
        await eventually(lambda: len(fake_api.bot_messages(GROUP)) == 2)
    keys = [c.args for c in engine.named("session_for_chat")]
    assert keys == [(GROUP, 7), (GROUP, 0)]
    assert sorted(m.thread_id or 0 for m in fake_api.bot_messages(GROUP)) == [0, 7]


async def test_await_feedback_makes_the_next_owner_message_feedback(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    engine.outcomes["plan"] = Outcome(reply="What should change?", await_feedback=True)
    async with open_db(tmp_path / "p.db") as db, running_bot(fake_api, engine, db):
        fake_api.user_message(GROUP, OWNER, "/plan")
        await eventually(lambda: len(fake_api.bot_messages(GROUP)) == 1)
        fake_api.user_message(GROUP, OWNER, "shorter steps please")  # not addressed
        fake_api.user_message(GROUP, OWNER, "unrelated chatter")
        fake_api.user_message(GROUP, OWNER, "/status")
        await eventually(lambda: len(engine.named("command")) == 2)
    ask = fake_api.bot_messages(GROUP)[0]
    assert ask.reply_markup is not None and ask.reply_markup.get("force_reply") is True
    sent = [(c.args[1], c.kwargs["feedback"]) for c in engine.named("user_message")]
    assert sent == [("shorter steps please", True)]


async def test_stop_lists_the_dropped_messages(fake_api: FakeBotApi, tmp_path: Path) -> None:
    engine = RecordingEngine()
    engine.outcomes["stop"] = Outcome(reply="Stopped.", dropped=("fix a", "fix <b>"))
    async with open_db(tmp_path / "p.db") as db, running_bot(fake_api, engine, db):
        fake_api.user_message(OWNER, OWNER, "/stop")
        await eventually(lambda: len(fake_api.bot_messages(OWNER)) == 1)
    text = fake_api.bot_messages(OWNER)[0].text
    assert text == "Stopped.\n\nDropped 2 queued message(s):\n• fix a\n• fix <b>"


async def test_new_retires_the_old_cards_and_binds_a_fresh_session(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    async with open_db(tmp_path / "p.db") as db, running_bot(fake_api, engine, db):
        fake_api.user_message(OWNER, OWNER, "/plan x")
        await eventually(lambda: len(engine.named("set_plan_flow")) == 1)
        card_id = tg_flow(engine.plans["s1"].flow).card_id
        assert card_id is not None
        # Planning: only Discard (a live plan always offers it).
        assert len(fake_api.message(OWNER, card_id).buttons) == 1
        engine.write_plan("s1", "## Implementation steps\n1. Do it")
        fake_api.user_message(OWNER, OWNER, "/show_plan")
        await eventually(lambda: len(engine.named("set_plan_flow")) >= 2)
        await eventually(
            lambda: bool(
                fake_api.message(OWNER, tg_flow(engine.plans["s1"].flow).card_id or 0).buttons
            )
        )
        live = tg_flow(engine.plans["s1"].flow).card_id or 0
        fake_api.user_message(OWNER, OWNER, "/new")
        await eventually(lambda: fake_api.message(OWNER, live).buttons == [])
        fake_api.user_message(OWNER, OWNER, "hi")
        await eventually(lambda: len(engine.named("user_message")) == 1)
    assert engine.named("new_session")[0].kwargs == {"actor": OWNER}
    assert engine.named("user_message")[0].args[0] != "s1"


async def test_a_card_the_command_created_comes_after_the_reply(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    slot = ChannelQueue(TELEGRAM_LIMITS)
    engine.channel = slot  # the engine tells the channel while /plan is being decided
    async with (
        open_db(tmp_path / "p.db") as db,
        running_bot(fake_api, engine, db, notices=slot) as app,
    ):
        fake_api.user_message(GROUP, OWNER, "/plan x")
        await eventually(lambda: len(engine.named("set_plan_flow")) == 1)
        await parts(app).presenter.flush()
    texts = [m.text for m in fake_api.bot_messages(GROUP)]
    assert len(texts) == 2
    assert texts[0] == "Planning." and "Add login" in texts[1]
