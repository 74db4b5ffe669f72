"""The fake Bot API itself, driven by the real PTB Bot over HTTP: it must behave like Telegram."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from telegram import Bot, BotCommand, InlineKeyboardButton, InlineKeyboardMarkup
from telegram.error import BadRequest, Conflict, InvalidToken, RetryAfter

from tests.fakebot.server import FakeBotApi

CHAT = 77


def kb(data: str = "x") -> InlineKeyboardMarkup:
    return InlineKeyboardMarkup([[InlineKeyboardButton("B", callback_data=data)]])


async def test_get_me_has_a_username(bot: Bot, fake_api: FakeBotApi) -> None:
    me = await bot.get_me()
    assert me.username == fake_api.username and me.is_bot


async def test_long_poll_returns_as_soon_as_an_update_arrives(
    bot: Bot, fake_api: FakeBotApi
) -> None:
    poll = asyncio.ensure_future(bot.get_updates(timeout=30, read_timeout=40))
    await fake_api.wait_for(lambda: fake_api.count("getUpdates") == 1)
    await asyncio.sleep(0.05)
    assert not poll.done()  # really waiting
    fake_api.user_message(CHAT, CHAT, "hello")
    updates = await asyncio.wait_for(poll, 10)  # far below the 30 s long-poll timeout
    assert [u.message.text for u in updates if u.message] == ["hello"]


async def test_offset_acknowledges_updates(bot: Bot, fake_api: FakeBotApi) -> None:
    fake_api.user_message(CHAT, CHAT, "one")
    fake_api.user_message(CHAT, CHAT, "two")
    first = await bot.get_updates(timeout=0)
    assert [u.message.text for u in first if u.message] == ["one", "two"]
    again = await bot.get_updates(offset=first[0].update_id + 1, timeout=0)
    assert [u.message.text for u in again if u.message] == ["two"]
    assert await bot.get_updates(offset=first[-1].update_id + 1, timeout=0) == ()


async def test_empty_long_poll_times_out_empty(bot: Bot, fake_api: FakeBotApi) -> None:
    assert await bot.get_updates(timeout=0) == ()


async def test_edit_history_and_keyboard_removed_by_text_edit(
    bot: Bot, fake_api: FakeBotApi
) -> None:
    fake_api.chat(CHAT)
    m = await bot.send_message(CHAT, "v1", reply_markup=kb())
    await bot.edit_message_text("v2", chat_id=CHAT, message_id=m.message_id)
    stored = fake_api.message(CHAT, m.message_id)
    assert stored.text == "v2" and stored.edits == ["v1"]
    assert stored.buttons == []  # Telegram drops the keyboard when an edit omits it


async def test_not_modified_and_not_found(bot: Bot, fake_api: FakeBotApi) -> None:
    fake_api.chat(CHAT)
    m = await bot.send_message(CHAT, "same", reply_markup=kb())
    with pytest.raises(BadRequest, match="Message is not modified"):
        await bot.edit_message_text(
            "same", chat_id=CHAT, message_id=m.message_id, reply_markup=kb()
        )
    with pytest.raises(BadRequest, match="Message is not modified"):
        await bot.edit_message_reply_markup(CHAT, m.message_id, reply_markup=kb())
    with pytest.raises(BadRequest, match="Message to edit not found"):
        await bot.edit_message_text("x", chat_id=CHAT, message_id=999)
    user_msg = fake_api.user_message(CHAT, CHAT, "mine")
    with pytest.raises(BadRequest, match="Message can't be edited"):
        await bot.edit_message_text("x", chat_id=CHAT, message_id=user_msg.message_id)


async def test_limits_and_parse_errors(bot: Bot, fake_api: FakeBotApi) -> None:
    fake_api.chat(CHAT)
    with pytest.raises(BadRequest, match="Message is too long"):
        await bot.send_message(CHAT, "x" * 4097)
    await bot.send_message(CHAT, "😀" * 2048)  # 4,096 UTF-16 units exactly
    with pytest.raises(BadRequest, match="Message is too long"):
        await bot.send_message(CHAT, "😀" * 2048 + "x")
    with pytest.raises(BadRequest, match="Button_data_invalid"):
        await bot.send_message(CHAT, "x", reply_markup=kb("x" * 65))
    await bot.send_message(CHAT, "x", reply_markup=kb("x" * 64))
    with pytest.raises(BadRequest, match="Can't parse entities: can't find end tag"):
        await bot.send_message(CHAT, "<b>open", parse_mode="HTML")
    with pytest.raises(BadRequest, match="Message text is empty"):
        await bot.send_message(CHAT, "<b> </b>", parse_mode="HTML")
    with pytest.raises(BadRequest, match="Chat not found"):
        await bot.send_message(999999, "x")
    with pytest.raises(BadRequest, match="Message to be replied not found"):
        await bot.send_message(CHAT, "x", reply_to_message_id=4242)


async def test_429_carries_retry_after(bot: Bot, fake_api: FakeBotApi) -> None:
    fake_api.chat(CHAT)
    fake_api.fail_next("sendMessage", 2, retry_after=5)
    for _ in range(2):
        with pytest.raises(RetryAfter) as info:
            await bot.send_message(CHAT, "x")
        assert "Retry in 5" in str(info.value)
    await bot.send_message(CHAT, "x")
    assert fake_api.count("sendMessage") == 3


async def test_commands_pins_documents_and_files(bot: Bot, fake_api: FakeBotApi) -> None:
    await bot.set_my_commands(
        [BotCommand("show_plan", "Show the plan"), BotCommand("help", "Help")]
    )
    assert [c["command"] for c in fake_api.commands] == ["show_plan", "help"]
    with pytest.raises(BadRequest, match="Bot_command_invalid"):
        await bot.set_my_commands([BotCommand("show-plan", "Show the plan")])
    fake_api.chat(CHAT)
    doc = await bot.send_document(CHAT, b"# Plan\nstep", filename="plan.md")
    assert doc.document is not None and doc.document.file_name == "plan.md"
    f = await bot.get_file(doc.document.file_id)
    assert bytes(await f.download_as_bytearray()) == b"# Plan\nstep"
    assert await bot.pin_chat_message(CHAT, doc.message_id)
    assert fake_api.chats[CHAT].pinned == [doc.message_id]


async def test_callback_answer_only_once(bot: Bot, fake_api: FakeBotApi) -> None:
    fake_api.chat(CHAT)
    m = await bot.send_message(CHAT, "card", reply_markup=kb("p:approve:abcdefgh:1"))
    qid = fake_api.press(CHAT, m.message_id, "p:approve:abcdefgh:1", user_id=CHAT)
    assert await bot.answer_callback_query(qid, "ok")
    with pytest.raises(BadRequest, match="Query is too old"):
        await bot.answer_callback_query(qid, "again")
    with pytest.raises(ValueError):
        fake_api.press(CHAT, m.message_id, "not-on-screen", user_id=CHAT)


async def test_group_member_chat_and_leave(bot: Bot, fake_api: FakeBotApi) -> None:
    fake_api.chat(-500, title="Team")
    chat = await bot.get_chat(-500)
    assert chat.title == "Team"
    member = await bot.get_chat_member(-500, fake_api.bot_id)
    assert member.status == "administrator"
    assert await bot.leave_chat(-500)
    with pytest.raises(Exception, match="not a member"):
        await bot.send_message(-500, "x")


async def test_wrong_token_and_unknown_method(fake_api: FakeBotApi) -> None:
    async with httpx.AsyncClient() as client:
        r = await client.post(f"{fake_api.base_url}{fake_api.token}/noSuchMethod")
        assert r.status_code == 404
    with pytest.raises(InvalidToken):
        async with Bot("1:wrong", base_url=fake_api.base_url):
            pass


async def test_forum_topic_messages_keep_their_thread(bot: Bot, fake_api: FakeBotApi) -> None:
    opened = fake_api.user_message(-700, 5, "/plan x", thread_id=9)
    sent = await bot.send_message(-700, "in topic", message_thread_id=9)
    assert sent.message_thread_id == 9 and sent.is_topic_message
    reply = await bot.send_message(-700, "reply", reply_to_message_id=opened.message_id)
    assert fake_api.message(-700, reply.message_id).thread_id == 9
    fake_api.chat(-800)
    with pytest.raises(BadRequest, match="Message thread not found"):
        await bot.send_message(-800, "x", message_thread_id=3)


async def test_a_second_poller_terminates_the_first(bot: Bot, fake_api: FakeBotApi) -> None:
    first = asyncio.ensure_future(bot.get_updates(timeout=30, read_timeout=40))
    await fake_api.wait_for(lambda: fake_api.count("getUpdates") == 1)
    async with Bot(fake_api.token, base_url=fake_api.base_url) as other_instance:
        second = asyncio.ensure_future(other_instance.get_updates(timeout=30, read_timeout=40))
        with pytest.raises(Conflict, match="terminated by other getUpdates request"):
            await asyncio.wait_for(first, 10)
        fake_api.user_message(CHAT, CHAT, "hi")
        assert len(await asyncio.wait_for(second, 10)) == 1


async def test_group_limit_trips_at_21_and_recovers_as_the_window_rolls() -> None:
    now = [1000.0]
    api = FakeBotApi(group_limit_per_minute=20, clock=lambda: now[0])
    await api.start()
    group, private = -100777, 555
    try:
        async with Bot(api.token, base_url=api.base_url, base_file_url=api.base_file_url) as bot:
            api.chat(group)
            api.chat(private)
            first = await bot.send_message(group, "m0")
            for i in range(1, 10):
                now[0] += 1.0
                await bot.send_message(group, f"m{i}")
            for i in range(10):  # edits count too (both kinds)
                now[0] += 1.0
                if i % 2:
                    await bot.edit_message_reply_markup(
                        group, first.message_id, reply_markup=kb(str(i))
                    )
                else:
                    await bot.edit_message_text(f"e{i}", chat_id=group, message_id=first.message_id)
            # 20 counted calls in 19 s: the 21st is refused, with Telegram's text and wait.
            with pytest.raises(RetryAfter) as info:
                await bot.send_message(group, "over")
            assert "Retry in 41" in str(info.value)
            assert api.group_429s == 1
            # Not counted: a private chat, pins and chat actions in the group.
            for _ in range(25):
                await bot.send_message(private, "p")
            assert await bot.pin_chat_message(group, first.message_id)
            await bot.send_chat_action(group, "typing")
            with pytest.raises(RetryAfter):
                await bot.send_document(group, b"x", filename="a.md")
            assert api.group_429s == 2
            now[0] += 41.0  # the first call (t=1000) leaves the window: one slot frees
            await bot.send_message(group, "again")
            with pytest.raises(RetryAfter) as info:
                await bot.send_message(group, "too soon")
            assert "Retry in 1" in str(info.value)
            assert api.group_429s == 3
    finally:
        await api.stop()
    texts = [m.text for m in api.bot_messages(group)]
    assert "over" not in texts and "again" in texts and "too soon" not in texts


async def test_group_limit_is_off_by_default(bot: Bot, fake_api: FakeBotApi) -> None:
    fake_api.chat(-100778)
    for i in range(25):
        await bot.send_message(-100778, f"m{i}")
    assert fake_api.group_429s == 0 and len(fake_api.bot_messages(-100778)) == 25
