from __future__ import annotations

import asyncio

import pytest
from telegram import Bot, InlineKeyboardButton, InlineKeyboardMarkup
from telegram.error import BadRequest, RetryAfter

from bot.telegram.outbox import Dropped, EditResult, Outbox
from tests.fakebot.clock import ManualClock
from tests.fakebot.server import FakeBotApi

CHAT = 42
GROUP = -100500


def kb(*labels: str) -> InlineKeyboardMarkup:
    return InlineKeyboardMarkup([[InlineKeyboardButton(x, callback_data=f"d:{x}")] for x in labels])


def make(bot: Bot, clock: ManualClock, **kw: object) -> Outbox:
    return Outbox(bot, clock=clock, sleep=clock.sleep, **kw)  # type: ignore[arg-type]


async def test_send_then_edit_delivers_text_and_keyboard(fake_api: FakeBotApi, bot: Bot) -> None:
    fake_api.chat(CHAT)
    clock = ManualClock()
    out = make(bot, clock)
    msg = await out.send_text(CHAT, "<b>card</b> v1", reply_markup=kb("A"))
    result = await out.edit(CHAT, msg.message_id, "<b>card</b> v2", reply_markup=kb("B"))
    assert result == EditResult("edited")
    stored = fake_api.message(CHAT, msg.message_id)
    assert stored.text == "card v2"
    assert stored.buttons == [[("B", "d:B")]]
    assert stored.edits == ["card v1"]


async def test_unchanged_edit_makes_no_call(fake_api: FakeBotApi, bot: Bot) -> None:
    fake_api.chat(CHAT)
    out = make(bot, ManualClock())
    msg = await out.send_text(CHAT, "same", reply_markup=kb("A"))
    assert (await out.edit(CHAT, msg.message_id, "same", reply_markup=kb("A"))).outcome == (
        "unchanged"
    )
    assert fake_api.count("editMessageText") == 0
    assert fake_api.count("editMessageReplyMarkup") == 0


async def test_keyboard_only_change_uses_reply_markup_edit(fake_api: FakeBotApi, bot: Bot) -> None:
    fake_api.chat(CHAT)
    out = make(bot, ManualClock())
    msg = await out.send_text(CHAT, "text", reply_markup=kb("A"))
    assert (await out.edit_keyboard(CHAT, msg.message_id, None)).outcome == "edited"
    assert fake_api.count("editMessageReplyMarkup") == 1
    assert fake_api.count("editMessageText") == 0
    assert fake_api.message(CHAT, msg.message_id).buttons == []


async def test_not_modified_is_success(fake_api: FakeBotApi, bot: Bot) -> None:
    fake_api.chat(CHAT)
    msg = await make(bot, ManualClock()).send_text(CHAT, "<b>x</b>")
    out = make(bot, ManualClock())  # as after a restart: this outbox knows nothing of msg
    # <strong> renders to the same entities, so Telegram says "not modified".
    result = await out.edit(CHAT, msg.message_id, "<strong>x</strong>", reply_markup=None)
    assert result.outcome == "not_modified" and result.ok
    assert fake_api.count("editMessageText") == 1


async def test_edit_not_found_is_reported_for_a_repost(fake_api: FakeBotApi, bot: Bot) -> None:
    fake_api.chat(CHAT)
    lost: list[tuple[int, int]] = []
    reposted = asyncio.Event()
    out: Outbox

    async def on_lost(chat_id: int, message_id: int) -> None:
        lost.append((chat_id, message_id))
        await out.send_text(chat_id, "reposted card")  # the same lane: must not deadlock
        reposted.set()

    out = make(bot, ManualClock(), on_edit_lost=on_lost)
    msg = await out.send_text(CHAT, "card")
    await bot.delete_message(CHAT, msg.message_id)
    result = await out.edit(CHAT, msg.message_id, "card v2", reply_markup=None)
    assert result.outcome == "not_found" and not result.ok
    await asyncio.wait_for(reposted.wait(), 5)
    assert lost == [(CHAT, msg.message_id)]
    assert [m.text for m in fake_api.bot_messages(CHAT)] == ["reposted card"]


async def test_edits_are_coalesced_to_the_latest_state(fake_api: FakeBotApi, bot: Bot) -> None:
    fake_api.chat(CHAT)
    out = make(bot, ManualClock(), chat_burst=1)
    msg = await out.send_text(CHAT, "v0")
    futures = [out.edit(CHAT, msg.message_id, f"v{i}", reply_markup=None) for i in range(1, 11)]
    results = await asyncio.gather(*futures)
    assert {r.outcome for r in results} == {"edited"}
    assert fake_api.message(CHAT, msg.message_id).text == "v10"
    assert fake_api.count("editMessageText") == 1


async def test_pacing_waits_about_a_second_per_chat_after_a_burst(
    fake_api: FakeBotApi, bot: Bot
) -> None:
    fake_api.chat(CHAT)
    clock = ManualClock()
    out = make(bot, clock, chat_burst=3, chat_interval_s=1.0)
    await asyncio.gather(*(out.send_text(CHAT, f"m{i}") for i in range(6)))
    assert [m.text for m in fake_api.bot_messages(CHAT)] == [f"m{i}" for i in range(6)]
    # Three go at once (the burst), then one per second.
    assert clock.sleeps == pytest.approx([1.0, 1.0, 1.0])


async def test_group_at_most_20_calls_per_rolling_minute(fake_api: FakeBotApi, bot: Bot) -> None:
    fake_api.chat(GROUP)
    clock = ManualClock()
    fake_api.clock = clock
    out = make(bot, clock, chat_burst=30, chat_interval_s=0.001)
    start = clock.now
    await asyncio.gather(*(out.send_text(GROUP, f"g{i}") for i in range(25)))
    times = [c.at for c in fake_api.calls_of("sendMessage")]
    assert len(times) == 25
    assert sum(1 for t in times if t < start + 60) == 20
    for t in times:
        assert sum(1 for u in times if t - 60 < u <= t) <= 20


async def test_retry_after_pauses_the_chat_and_ends_with_the_final_text(
    fake_api: FakeBotApi, bot: Bot
) -> None:
    fake_api.chat(CHAT)
    clock = ManualClock()
    out = make(bot, clock, chat_burst=1)
    msg = await out.send_text(CHAT, "v0")
    fake_api.storm(3, retry_after=7)
    first = out.edit(CHAT, msg.message_id, "v1", reply_markup=None)
    await asyncio.sleep(0)
    later = [out.edit(CHAT, msg.message_id, f"v{i}", reply_markup=None) for i in range(2, 30)]
    results = await asyncio.gather(first, *later)
    assert all(r.ok for r in results)
    assert fake_api.message(CHAT, msg.message_id).text == "v29"
    # Each 429 paused the chat for the full retry_after; no call was made in between.
    assert clock.sleeps.count(7.0) == 3
    assert fake_api.count("editMessageText") <= 3 + 2


async def test_retry_after_on_one_chat_does_not_block_another(
    fake_api: FakeBotApi, bot: Bot
) -> None:
    fake_api.chat(CHAT)
    fake_api.chat(CHAT + 1)
    clock = ManualClock()
    out = make(bot, clock)
    fake_api.fail_next("sendMessage", 1, retry_after=30)
    a = asyncio.ensure_future(out.send_text(CHAT, "a"))
    await fake_api.wait_for(lambda: fake_api.count("sendMessage") == 1)
    b = await out.send_text(CHAT + 1, "b")
    await a
    assert b.text == "b"
    assert [m.text for m in fake_api.bot_messages(CHAT)] == ["a"]


async def test_five_429s_in_a_row_do_not_drop_a_reply(fake_api: FakeBotApi, bot: Bot) -> None:
    fake_api.chat(CHAT)
    clock = ManualClock()
    out = make(bot, clock)
    fake_api.fail_next("sendMessage", 5, retry_after=3)
    msg = await out.send_text(CHAT, "the reply")
    assert msg.text == "the reply"
    assert fake_api.count("sendMessage") == 6
    assert clock.sleeps.count(3.0) == 5


async def test_three_502s_on_send_lose_nothing_and_keep_the_order(
    fake_api: FakeBotApi, bot: Bot
) -> None:
    fake_api.chat(CHAT)
    clock = ManualClock()
    out = make(bot, clock)
    fake_api.fail_status("sendMessage", 3, code=502)
    await asyncio.gather(*(out.send_text(CHAT, f"r{i}") for i in range(4)))
    assert [m.text for m in fake_api.bot_messages(CHAT)] == ["r0", "r1", "r2", "r3"]
    # Backed off 1, 2, 4 s: a gateway that is down is not hammered.
    assert clock.sleeps[:3] == [1.0, 2.0, 4.0]


async def test_past_the_deadline_a_send_fails_once_and_the_chat_is_told(
    fake_api: FakeBotApi, bot: Bot
) -> None:
    fake_api.chat(CHAT)
    clock = ManualClock()
    failed: list[tuple[int, int | None]] = []

    async def on_failed(chat_id: int, message_id: int | None, err: Exception) -> None:
        failed.append((chat_id, message_id))

    out = make(bot, clock, deadline_s=600.0, on_delivery_failed=on_failed)
    fake_api.fail_next("sendMessage", 5, retry_after=120)
    with pytest.raises(RetryAfter):
        await out.send_text(CHAT, "lost")
    await out.flush()
    # Tried at 0, 120 ... 480 s (a sixth try would be past 600 s), then one short notice.
    assert fake_api.count("sendMessage") == 6
    texts = [m.text for m in fake_api.bot_messages(CHAT)]
    assert len(texts) == 1 and "kept refusing" in texts[0]
    assert failed == [(CHAT, None)]


async def test_interactive_goes_ahead_of_queued_progress_edits(
    fake_api: FakeBotApi, bot: Bot
) -> None:
    fake_api.chat(CHAT)
    clock = ManualClock()
    out = make(bot, clock)
    cards = [await out.send_text(CHAT, f"card{i} v0") for i in range(3)]
    fake_api.fail_next("editMessageText", 1, retry_after=5)  # the lane stalls on progress
    progress = [
        out.edit(CHAT, c.message_id, f"card{i} v{n}", reply_markup=None)
        for n in (1, 2)
        for i, c in enumerate(cards)
    ]
    await fake_api.wait_for(lambda: fake_api.count("editMessageText") == 1)
    reply = asyncio.ensure_future(out.send_text(CHAT, "the answer to /status"))
    await asyncio.sleep(0)  # queued (the task ran up to its wait)
    pressed = out.edit(CHAT, cards[2].message_id, "card2 pressed", reply_markup=kb("Yes"),
                       interactive=True)  # fmt: skip
    results = await asyncio.gather(*progress, pressed)
    await reply
    assert all(r.ok for r in results)
    order = [
        (c.params.get("text"), c.params.get("message_id"))
        for c in fake_api.calls
        if c.method in ("sendMessage", "editMessageText")
    ][3:]
    # Each card's progress coalesced to its last state; the first one drew a 429, and while
    # the chat waited the reply and the press's edit (which took card2's progress over)
    # were queued: they go first, then the progress edits.
    assert [t for t, _ in order] == [
        "card0 v2",
        "the answer to /status",
        "card2 pressed",
        "card0 v2",
        "card1 v2",
    ]
    assert fake_api.message(CHAT, cards[2].message_id).text == "card2 pressed"


async def test_progress_edits_are_never_starved_by_a_stream_of_sends(
    fake_api: FakeBotApi, bot: Bot
) -> None:
    fake_api.chat(CHAT)
    out = make(bot, ManualClock())
    card = await out.send_text(CHAT, "v0")
    sends = [asyncio.ensure_future(out.send_text(CHAT, f"s{i}")) for i in range(12)]
    edit = out.edit(CHAT, card.message_id, "v1", reply_markup=None)
    await asyncio.gather(*sends, edit)
    methods = [c.method for c in fake_api.calls if c.method in ("sendMessage", "editMessageText")]
    assert methods.index("editMessageText") <= 1 + 4 + 1


async def test_low_priority_sends_wait_for_everything_and_are_capped(
    fake_api: FakeBotApi, bot: Bot
) -> None:
    fake_api.chat(GROUP)
    clock = ManualClock()
    out = make(bot, clock)
    fake_api.fail_next("sendMessage", 1, retry_after=2)
    first = asyncio.ensure_future(out.send_text(GROUP, "owner reply 1"))
    await asyncio.sleep(0)
    low = [
        asyncio.ensure_future(out.send_text(GROUP, f"refusal {i}", priority="low"))
        for i in range(5)
    ]
    second = asyncio.ensure_future(out.send_text(GROUP, "owner reply 2"))
    done = await asyncio.gather(*low, return_exceptions=True)
    await asyncio.gather(first, second)
    assert sum(isinstance(d, Dropped) for d in done) == 3
    assert [m.text for m in fake_api.bot_messages(GROUP)] == [
        "owner reply 1",
        "owner reply 2",
        "refusal 0",
        "refusal 1",
    ]


async def test_too_long_text_is_refused_by_the_fake(fake_api: FakeBotApi, bot: Bot) -> None:
    fake_api.chat(CHAT)
    out = make(bot, ManualClock())
    with pytest.raises(BadRequest, match="Message is too long"):
        await out.send_text(CHAT, "<b>" + "é" * 4097 + "</b>")
    ok = await out.send_text(CHAT, "<b>" + "&amp;" * 4096 + "</b>")  # 4,096 visible units
    assert fake_api.message(CHAT, ok.message_id).text == "&" * 4096


async def test_callback_data_over_64_bytes_is_refused(fake_api: FakeBotApi, bot: Bot) -> None:
    fake_api.chat(CHAT)
    out = make(bot, ManualClock())
    markup = InlineKeyboardMarkup([[InlineKeyboardButton("x", callback_data="é" * 33)]])
    with pytest.raises(BadRequest, match="Button_data_invalid"):
        await out.send_text(CHAT, "x", reply_markup=markup)


async def test_malformed_html_is_refused_with_telegrams_words(
    fake_api: FakeBotApi, bot: Bot
) -> None:
    fake_api.chat(CHAT)
    out = make(bot, ManualClock())
    with pytest.raises(BadRequest, match="Can't parse entities: unsupported start tag"):
        await out.send_text(CHAT, "<div>x</div>")


async def test_document_pin_typing(fake_api: FakeBotApi, bot: Bot) -> None:
    fake_api.chat(CHAT)
    out = make(bot, ManualClock())
    doc = await out.send_document(CHAT, b"# Plan\n", "plan.md", caption_html="<b>plan</b>")
    stored = fake_api.message(CHAT, doc.message_id)
    assert stored.document is not None and stored.document["file_name"] == "plan.md"
    assert fake_api.files[f"documents/{stored.document['file_id']}"] == b"# Plan\n"
    card = await out.send_text(CHAT, "card")
    assert await out.pin(CHAT, card.message_id)
    assert fake_api.chats[CHAT].pinned == [card.message_id]
    await out.typing(CHAT)
    await out.flush()  # typing is sent in the background
    assert fake_api.chats[CHAT].chat_actions == ["typing"]


async def test_pin_refused_without_rights_is_false(fake_api: FakeBotApi, bot: Bot) -> None:
    fake_api.chat(GROUP).bot_can_pin = False
    out = make(bot, ManualClock())
    card = await out.send_text(GROUP, "card")
    assert not await out.pin(GROUP, card.message_id)


async def test_aclose_fails_queued_and_inflight_operations(fake_api: FakeBotApi, bot: Bot) -> None:
    fake_api.chat(CHAT)
    clock = ManualClock()
    gate = asyncio.Event()

    async def blocked_sleep(seconds: float) -> None:
        await gate.wait()  # the lane stays paused until closed

    out = Outbox(bot, clock=clock, sleep=blocked_sleep, chat_burst=1)
    first = await out.send_text(CHAT, "v0")
    waiting = asyncio.ensure_future(out.send_text(CHAT, "never sent"))
    edit = out.edit(CHAT, first.message_id, "v1", reply_markup=None)
    await asyncio.sleep(0.01)
    await out.aclose()
    with pytest.raises(RuntimeError, match="outbox closed"):
        await waiting
    assert (await edit).outcome == "failed"
    with pytest.raises(RuntimeError):
        await out.send_text(CHAT, "after close")
    assert [m.text for m in fake_api.bot_messages(CHAT)] == ["v0"]


async def test_sends_to_an_upgraded_group_follow_it_to_the_supergroup(
    fake_api: FakeBotApi, bot: Bot
) -> None:
    old, new = -77, -1000077
    fake_api.chat(old, type="group")
    moved: list[tuple[int, int]] = []

    async def on_moved(old_id: int, new_id: int) -> None:
        moved.append((old_id, new_id))

    out = make(bot, ManualClock(), on_chat_migrated=on_moved)
    card = await out.send_text(old, "card")
    fake_api.migrate_group(old, new, by_user_id=1, announce=False)
    first, second = await asyncio.gather(out.send_text(old, "one"), out.send_text(old, "two"))
    assert (first.chat_id, second.chat_id) == (new, new)
    assert [m.text for m in fake_api.bot_messages(new)] == ["one", "two"]
    assert fake_api.count("sendMessage") == 4  # one refusal with migrate_to_chat_id, no more
    result = await out.edit(old, card.message_id, "card v2", reply_markup=None)
    assert result.outcome == "failed"  # the old group's messages stay where they are
    await out.flush()
    assert moved == [(old, new)]
