"""The pieces together, as the lead will wire them: gate + outbox + cards + callback data,
in the real Application (with AIORateLimiter as the backstop) over HTTP."""

from __future__ import annotations

import asyncio

from telegram import Update
from telegram.ext import AIORateLimiter, CallbackQueryHandler, CommandHandler, ContextTypes

from bot import presses as cb
from bot.telegram.access import AccessGate
from bot.telegram.cards import (
    APPROVE,
    CANCEL,
    DISCARD,
    KEEP_PLANNING,
    YES_DISCARD,
    PlanCardState,
    build_plan_card,
    to_markup,
)
from bot.telegram.keys import SessionKey, update_key
from bot.telegram.outbox import Outbox
from engine.plan.types import PlanSidecar
from tests.fakebot.clock import ManualClock
from tests.fakebot.server import FakeBotApi

from .test_access import settle

OWNER, OTHER, GROUP = 1001, 2002, -1001


class MiniBot:
    """A toy command plane: one plan per session key, its card, and the button handler."""

    def __init__(self, fake_api: FakeBotApi) -> None:
        self.clock = ManualClock()
        self.gate = AccessGate(owner_ids={OWNER}, allowed_chat_ids={GROUP}, clock=self.clock)
        self.plans: dict[SessionKey, PlanSidecar] = {}
        self.states: dict[SessionKey, PlanCardState] = {}
        self.cards: dict[SessionKey, int] = {}
        self.app = (
            __import__("tests.fakebot.fixtures", fromlist=["app_builder"])
            .app_builder(fake_api)
            .rate_limiter(AIORateLimiter())
            .build()
        )
        self.outbox = Outbox(self.app.bot, clock=self.clock, sleep=self.clock.sleep)
        self.app.add_handler(self.gate.handler(), group=-1)
        self.app.add_handler(CommandHandler("plan", self.plan))
        self.app.add_handler(CallbackQueryHandler(self.press))

    async def plan(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """Open a plan in review and post its card in the session's thread."""
        key = update_key(update)
        assert key is not None and update.message is not None
        sidecar = PlanSidecar(
            id=f"plan{key[1]:04d}xyz", session_id="s", title="Add caching", revision=3
        )
        self.plans[key], self.states[key] = sidecar, "review"
        view = build_plan_card(sidecar, "review")
        msg = await self.outbox.send_text(
            key[0],
            view.text,
            thread_id=key[1] or None,
            reply_to=update.message.message_id,
            reply_markup=to_markup(view),
        )
        self.cards[key] = msg.message_id

    async def press(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """Decide on a press: stale or forged -> out of date; else move the card."""
        q = update.callback_query
        key = update_key(update)
        assert q is not None and key is not None and q.message is not None
        data = cb.decode(q.data)
        sidecar = self.plans.get(key)
        if (
            data is None
            or sidecar is None
            or (data.short_id, data.revision) != (sidecar.id[:8], sidecar.revision)
        ):
            await q.answer("This card is out of date.")
            await self.outbox.edit_keyboard(key[0], q.message.message_id, None)
            return
        nxt: dict[str, PlanCardState] = {
            cb.PLAN_DISCARD: "confirm_discard",
            cb.PLAN_CANCEL: "review",
            cb.PLAN_DISCARD_YES: "none",
        }
        state = nxt.get(data.action, self.states[key])
        self.states[key] = state
        await q.answer()
        if state == "none":
            self.plans.pop(key)
            view = build_plan_card(sidecar, "review", note="Discarded.").without_buttons()
        else:
            view = build_plan_card(sidecar, state)
        await self.outbox.edit(key[0], self.cards[key], view.text, reply_markup=to_markup(view))


def buttons(fake_api: FakeBotApi, chat_id: int, message_id: int) -> list[str]:
    return [label for row in fake_api.message(chat_id, message_id).buttons for label, _ in row]


async def test_review_discard_confirm_cancel_and_stale_press(fake_api: FakeBotApi) -> None:
    mini = MiniBot(fake_api)
    async with mini.app:
        assert mini.app.updater is not None
        await mini.app.updater.start_polling(poll_interval=0.0, timeout=1)
        await mini.app.start()
        try:
            fake_api.user_message(GROUP, OWNER, "/plan caching")
            await settle(fake_api)
            await mini.outbox.flush()
            card = mini.cards[(GROUP, 0)]
            assert buttons(fake_api, GROUP, card) == [APPROVE, KEEP_PLANNING, DISCARD]
            data = dict(fake_api.message(GROUP, card).buttons[1])
            approve = fake_api.message(GROUP, card).buttons[0][0][1]

            fake_api.press(GROUP, card, data[DISCARD], user_id=OTHER)  # not an owner
            await settle(fake_api)
            assert buttons(fake_api, GROUP, card) == [APPROVE, KEEP_PLANNING, DISCARD]

            fake_api.fail_next("editMessageText", 2, retry_after=3)  # flood control
            fake_api.press(GROUP, card, data[DISCARD], user_id=OWNER)
            await settle(fake_api)
            await mini.outbox.flush()
            assert buttons(fake_api, GROUP, card) == [YES_DISCARD, CANCEL]
            confirm = dict(fake_api.message(GROUP, card).buttons[0])
            assert cb.decode(confirm[CANCEL]) == cb.CallbackData("p", "cancel", "plan0000", 3)

            fake_api.press(GROUP, card, confirm[CANCEL], user_id=OWNER)
            await settle(fake_api)
            await mini.outbox.flush()
            assert buttons(fake_api, GROUP, card) == [APPROVE, KEEP_PLANNING, DISCARD]

            mini.plans[(GROUP, 0)].revision = 4  # the plan moved on; the card did not
            fake_api.press(GROUP, card, approve, user_id=OWNER)
            fake_api.press_raw(GROUP, card, "p:approve:forged:4", user_id=OWNER)
            await settle(fake_api)
            await mini.outbox.flush()
            answers = list(fake_api.callback_answers.values())
            assert (
                answers[-2:]
                == [
                    {"text": "This card is out of date.", "show_alert": False},
                ]
                * 2
            )
            assert buttons(fake_api, GROUP, card) == []
            assert mini.states[(GROUP, 0)] == "review"
        finally:
            await mini.app.updater.stop()
            await mini.app.stop()
            await mini.outbox.aclose()


async def test_forum_topics_are_separate_sessions(fake_api: FakeBotApi) -> None:
    mini = MiniBot(fake_api)
    async with mini.app:
        assert mini.app.updater is not None
        await mini.app.updater.start_polling(poll_interval=0.0, timeout=1)
        await mini.app.start()
        try:
            fake_api.user_message(GROUP, OWNER, "/plan a", thread_id=11)
            fake_api.user_message(GROUP, OWNER, "/plan b", thread_id=12)
            general = fake_api.user_message(GROUP, OWNER, "hello @plangate_test_bot")
            await settle(fake_api)
            # A reply chain in the General topic is not a topic: key thread 0.
            fake_api.user_message(GROUP, OWNER, "/plan c", reply_to=general.message_id)
            await settle(fake_api)
            await mini.outbox.flush()
            await asyncio.sleep(0)
        finally:
            await mini.app.updater.stop()
            await mini.app.stop()
            await mini.outbox.aclose()
    assert set(mini.cards) == {(GROUP, 11), (GROUP, 12), (GROUP, 0)}
    assert fake_api.message(GROUP, mini.cards[(GROUP, 11)]).thread_id == 11
    assert fake_api.message(GROUP, mini.cards[(GROUP, 12)]).thread_id == 12
    assert fake_api.message(GROUP, mini.cards[(GROUP, 0)]).thread_id is None
