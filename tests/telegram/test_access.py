"""Access decisions: a pure table, then the gate in the real Application on the wire."""

from __future__ import annotations

import asyncio

import pytest
from telegram import Update
from telegram.ext import CallbackQueryHandler, ContextTypes, MessageHandler, filters

from bot.telegram.access import ALERT_TEXT, AccessGate, UpdateFacts, decide, parse_command
from tests.fakebot.clock import ManualClock
from tests.fakebot.fixtures import app_builder, running_app
from tests.fakebot.server import FakeBotApi

OWNER, OTHER = 1001, 2002
GROUP, ADDED, STRANGE = -1001, -1002, -1003
OWNERS, ALLOWED = {OWNER}, {GROUP}


def msg(chat_id: int = GROUP, user_id: int = OWNER, **kw: object) -> UpdateFacts:
    chat_type = "private" if chat_id > 0 else "supergroup"
    return UpdateFacts(kind="message", chat_id=chat_id, chat_type=chat_type, user_id=user_id, **kw)  # type: ignore[arg-type]


def press(chat_id: int, user_id: int) -> UpdateFacts:
    chat_type = "private" if chat_id > 0 else "supergroup"
    return UpdateFacts(kind="callback", chat_id=chat_id, chat_type=chat_type, user_id=user_id)


def member(chat_id: int, user_id: int, *, joined: bool) -> UpdateFacts:
    return UpdateFacts(
        kind="my_chat_member",
        chat_id=chat_id,
        chat_type="supergroup",
        user_id=user_id,
        bot_joined=joined,
    )


ANON = {"as_chat": True, "sender_chat_id": GROUP}

CASES = [
    # (facts, expecting_reply, refused_recently) -> (action, owner, feedback)
    (msg(OWNER, OWNER), False, False, ("allow", True, False)),
    (msg(OTHER, OTHER), False, False, ("ignore", False, False)),
    (msg(OTHER, OTHER, command="help"), False, False, ("ignore", False, False)),
    (msg(STRANGE, OWNER, command="help"), False, False, ("leave", True, False)),
    (msg(ADDED, OWNER, command="plan"), False, False, ("allow", True, False)),
    (msg(GROUP, OWNER), False, False, ("ignore", True, False)),
    (msg(GROUP, OWNER, command="plan"), False, False, ("allow", True, False)),
    (msg(GROUP, OWNER, mentions_bot=True), False, False, ("allow", True, False)),
    (msg(GROUP, OWNER, reply_to_bot=True), False, False, ("allow", True, False)),
    (msg(GROUP, OWNER), True, False, ("allow", True, True)),
    (msg(GROUP, OWNER, command="discard"), True, False, ("allow", True, False)),
    (msg(GROUP, OWNER, command="x", command_for_other_bot=True), 0, 0, ("ignore", True, False)),
    (msg(GROUP, OWNER, command="plan", **ANON), False, False, ("refuse", False, False)),
    (msg(GROUP, OTHER), False, False, ("ignore", False, False)),
    (msg(GROUP, OTHER, command="show_plan"), False, False, ("allow", False, False)),
    (msg(GROUP, OTHER, command="status"), False, False, ("allow", False, False)),
    (msg(GROUP, OTHER, command="help"), False, False, ("allow", False, False)),
    (msg(GROUP, OTHER, command="start"), False, False, ("allow", False, False)),
    (msg(GROUP, OTHER, command="plan"), False, False, ("refuse", False, False)),
    (msg(GROUP, OTHER, command="plan"), False, True, ("ignore", False, False)),
    (msg(GROUP, OTHER, mentions_bot=True), False, False, ("refuse", False, False)),
    (msg(GROUP, OTHER, reply_to_bot=True), False, False, ("refuse", False, False)),
    (msg(GROUP, OTHER), True, False, ("ignore", False, False)),
    (press(GROUP, OTHER), False, False, ("alert", False, False)),
    (press(GROUP, OWNER), False, False, ("allow", True, False)),
    (press(OTHER, OTHER), False, False, ("ignore", False, False)),
    (member(STRANGE, OWNER, joined=True), False, False, ("group_added", True, False)),
    (member(STRANGE, OTHER, joined=True), False, False, ("leave", False, False)),
    (member(GROUP, OTHER, joined=True), False, False, ("ignore", False, False)),
    (member(ADDED, OTHER, joined=False), False, False, ("group_gone", False, False)),
    (UpdateFacts(kind="other", chat_id=GROUP), False, False, ("ignore", False, False)),
]  # fmt: skip


@pytest.mark.parametrize(("facts", "expecting", "refused", "expected"), CASES)
def test_decision_table(
    facts: UpdateFacts, expecting: bool, refused: bool, expected: tuple[str, bool, bool]
) -> None:
    d = decide(
        facts,
        owner_ids=OWNERS,
        allowed_chat_ids=ALLOWED,
        added_groups={ADDED},
        expecting_reply=expecting,
        refused_recently=refused,
    )
    assert (d.action, d.owner, d.feedback) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/show-plan", ("show_plan", False)),
        ("/show_plan", ("show_plan", False)),
        ("/show-plan@plangate_test_bot", ("show_plan", False)),
        ("/Status@other_bot now", ("status", True)),
        ("/help me", ("help", False)),
        ("hello /help", (None, False)),
        ("/", (None, False)),
    ],
)
def test_parse_command(text: str, expected: tuple[str | None, bool]) -> None:
    assert parse_command(text, bot_username="plangate_test_bot") == expected


# ---- on the wire ------------------------------------------------------------------------


class Probe:
    """Records what reached the handlers (group 0), with the gate's decision."""

    def __init__(self, gate: AccessGate) -> None:
        self.gate = gate
        self.seen: list[tuple[str, bool, bool]] = []
        self.presses: list[str] = []

    async def on_message(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        d = self.gate.decision(update)
        assert d is not None and update.message is not None
        self.seen.append((update.message.text or "", d.owner, d.feedback))
        await update.message.reply_text("heard")

    async def on_press(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        assert update.callback_query is not None
        self.presses.append(update.callback_query.data or "")
        await update.callback_query.answer("done")


def build(fake_api: FakeBotApi, clock: ManualClock) -> tuple[object, AccessGate, Probe]:
    gate = AccessGate(owner_ids=OWNERS, allowed_chat_ids=ALLOWED, clock=clock)
    probe = Probe(gate)
    app = app_builder(fake_api).build()
    app.add_handler(gate.handler(), group=-1)
    app.add_handler(MessageHandler(filters.ALL, probe.on_message))
    app.add_handler(CallbackQueryHandler(probe.on_press))
    return app, gate, probe


async def settle(fake_api: FakeBotApi) -> None:
    """Wait until the Application has fetched every injected update and gone idle."""
    await fake_api.drain()
    await asyncio.sleep(0.05)


async def test_owner_private_chat_heard_non_owner_private_ignored(fake_api: FakeBotApi) -> None:
    app, _, probe = build(fake_api, ManualClock())
    async with running_app(app):  # type: ignore[arg-type]
        fake_api.user_message(OWNER, OWNER, "fix the bug")
        fake_api.user_message(OTHER, OTHER, "hi bot")
        await settle(fake_api)
    assert probe.seen == [("fix the bug", True, False)]
    assert [m.text for m in fake_api.bot_messages(OWNER)] == ["heard"]
    assert fake_api.bot_messages(OTHER) == []


async def test_group_not_added_by_owner_is_left(fake_api: FakeBotApi) -> None:
    app, gate, probe = build(fake_api, ManualClock())
    async with running_app(app):  # type: ignore[arg-type]
        fake_api.bot_added(STRANGE, by_user_id=OTHER)
        await settle(fake_api)
    assert fake_api.count("leaveChat") == 1
    assert not fake_api.chats[STRANGE].bot_is_member
    assert STRANGE not in gate.added_groups
    assert probe.seen == []


async def test_group_added_by_owner_is_allowed(fake_api: FakeBotApi) -> None:
    added: list[int] = []

    async def on_added(chat_id: int) -> None:
        added.append(chat_id)

    gate = AccessGate(owner_ids=OWNERS, allowed_chat_ids=ALLOWED, on_group_added=on_added)
    probe = Probe(gate)
    app = app_builder(fake_api).build()
    app.add_handler(gate.handler(), group=-1)
    app.add_handler(MessageHandler(filters.TEXT, probe.on_message))
    async with running_app(app):
        fake_api.bot_added(STRANGE, by_user_id=OWNER)
        await settle(fake_api)
        fake_api.user_message(STRANGE, OWNER, "/plan add caching")
        await settle(fake_api)
    assert added == [STRANGE]
    assert fake_api.count("leaveChat") == 0
    assert probe.seen == [("/plan add caching", True, False)]


async def test_non_owner_in_group_read_only_and_one_refusal_per_minute(
    fake_api: FakeBotApi,
) -> None:
    clock = ManualClock()
    app, gate, probe = build(fake_api, clock)
    async with running_app(app):  # type: ignore[arg-type]
        fake_api.user_message(GROUP, OTHER, "@plangate_test_bot delete everything")
        fake_api.user_message(GROUP, OTHER, "/plan something")
        fake_api.user_message(GROUP, OTHER, "just chatting")
        await settle(fake_api)
        clock.advance(61)
        fake_api.user_message(GROUP, OTHER, "/goal pause")
        fake_api.user_message(GROUP, OTHER, "/status")
        # The user's answers this minute are spent (a refusal and /status): dropped, counted.
        fake_api.user_message(GROUP, OTHER, "/show-plan@plangate_test_bot")
        await settle(fake_api)
        clock.advance(61)
        fake_api.user_message(GROUP, OTHER, "/show-plan@plangate_test_bot")
        await settle(fake_api)
    assert probe.seen == [
        ("/status", False, False),
        ("/show-plan@plangate_test_bot", False, False),
    ]
    texts = [m.text for m in fake_api.bot_messages(GROUP)]
    assert texts.count("heard") == 2
    refusals = [
        t for t in texts if t.startswith("Sorry, that is not for you. You are a member here")
    ]
    assert len(refusals) == 2  # one per minute
    assert gate.answers.dropped == 1


async def test_anonymous_admin_counts_as_non_owner(fake_api: FakeBotApi) -> None:
    app, _, probe = build(fake_api, ManualClock())
    async with running_app(app):  # type: ignore[arg-type]
        fake_api.user_message(GROUP, OWNER, "/plan x", anonymous_admin=True)
        await settle(fake_api)
    assert probe.seen == []
    assert fake_api.bot_messages(GROUP)[0].text.startswith("Sorry")


async def test_owner_group_chatter_ignored_until_expected(fake_api: FakeBotApi) -> None:
    app, gate, probe = build(fake_api, ManualClock())
    async with running_app(app):  # type: ignore[arg-type]
        fake_api.user_message(GROUP, OWNER, "talking to colleagues")
        await settle(fake_api)
        gate.expect_reply((GROUP, 0), OWNER)
        fake_api.user_message(GROUP, OTHER, "not me")
        fake_api.user_message(GROUP, OWNER, "add a rollback step")
        fake_api.user_message(GROUP, OWNER, "and more chatter")
        await settle(fake_api)
    # "and more chatter" went unheard: the one expected answer was taken.
    assert probe.seen == [("add a rollback step", True, True)]


async def test_owner_replies_and_mentions_are_heard(fake_api: FakeBotApi) -> None:
    app, _, probe = build(fake_api, ManualClock())
    async with running_app(app):  # type: ignore[arg-type]
        fake_api.user_message(GROUP, OWNER, "@plangate_test_bot status please")
        await settle(fake_api)
        bot_reply = fake_api.bot_messages(GROUP)[-1]
        fake_api.user_message(GROUP, OWNER, "thanks, go on", reply_to=bot_reply.message_id)
        await settle(fake_api)
    assert [s[0] for s in probe.seen] == ["@plangate_test_bot status please", "thanks, go on"]


async def test_non_owner_press_gets_alert_and_changes_nothing(fake_api: FakeBotApi) -> None:
    app, _, probe = build(fake_api, ManualClock())
    async with running_app(app):  # type: ignore[arg-type]
        fake_api.chat(GROUP)
        card = await app.bot.send_message(  # type: ignore[attr-defined]
            GROUP,
            "card",
            reply_markup={
                "inline_keyboard": [[{"text": "Go", "callback_data": "p:approve:abcdefgh:1"}]]
            },
        )
        qid = fake_api.press(GROUP, card.message_id, "p:approve:abcdefgh:1", user_id=OTHER)
        await settle(fake_api)
        own = fake_api.press(GROUP, card.message_id, "p:approve:abcdefgh:1", user_id=OWNER)
        await settle(fake_api)
    assert fake_api.callback_answers[qid] == {
        "text": ALERT_TEXT,
        "show_alert": True,
    }
    assert fake_api.callback_answers[own] == {"text": "done", "show_alert": False}
    assert probe.presses == ["p:approve:abcdefgh:1"]  # only the owner's press reached it
    assert fake_api.message(GROUP, card.message_id).text == "card"


APPROVER = AP = 3003


def tap(user_id: int, kind: str, action: str) -> UpdateFacts:
    return UpdateFacts(
        kind="callback",
        chat_id=GROUP,
        chat_type="supergroup",
        user_id=user_id,
        press=(kind, action),
    )


ROLE_CASES = [
    # (facts, role looked up, expecting_reply, answering) -> (action, role, feedback, answer)
    (tap(APPROVER, "p", "approve"), "approver", False, False, ("allow", "approver", False, False)),
    (tap(APPROVER, "a", "deny"), "approver", False, False, ("allow", "approver", False, False)),
    (tap(APPROVER, "g", "resume"), "approver", False, False, ("alert", "approver", False, False)),
    (tap(OTHER, "p", "approve"), "member", False, False, ("alert", "member", False, False)),
    (tap(OTHER, "q", ""), "member", False, False, ("alert", "member", False, False)),
    (tap(APPROVER, "q", ""), "approver", False, False, ("allow", "approver", False, False)),
    (msg(GROUP, AP, command="execute"), "approver", 0, 0, ("allow", "approver", False, False)),
    (msg(GROUP, APPROVER, command="stop"), "approver", 0, 0, ("allow", "approver", False, False)),
    (msg(GROUP, APPROVER, command="plan"), "approver", 0, 0, ("refuse", "approver", False, False)),
    (
        msg(GROUP, APPROVER, command="team", command_args="add @ana approver"),
        "approver", 0, 0, ("refuse", "approver", False, False),
    ),
    (msg(GROUP, OTHER, command="team"), "member", 0, 0, ("allow", "member", False, False)),
    (msg(GROUP, APPROVER), "approver", True, False, ("allow", "approver", True, False)),
    (msg(GROUP, AP, mentions_bot=True), "approver", 0, 0, ("refuse", "approver", False, False)),
    (msg(GROUP, APPROVER, reply_to_bot=True), "approver", 0, 1, ("allow", "approver", False, True)),
    (msg(GROUP, OTHER, reply_to_bot=True), "member", 0, 1, ("refuse", "member", False, False)),
    (msg(GROUP, AP, command="plan", **ANON), "approver", 0, 0, ("refuse", "member", False, False)),
    (tap(OWNER, "g", "clear_yes"), "member", False, False, ("allow", "owner", False, False)),
    (tap(AP, "v", "send"), "approver", False, False, ("alert", "approver", False, False)),
]  # fmt: skip


@pytest.mark.parametrize(("facts", "role", "expecting", "answering", "expected"), ROLE_CASES)
def test_decisions_follow_the_role_rule(
    facts: UpdateFacts, role: str, expecting: bool, answering: bool, expected: tuple[object, ...]
) -> None:
    d = decide(
        facts,
        owner_ids=OWNERS,
        allowed_chat_ids=ALLOWED,
        added_groups={ADDED},
        expecting_reply=bool(expecting),
        role=role,  # type: ignore[arg-type]
        answering=bool(answering),
    )
    assert (d.action, d.role, d.feedback, d.answer) == expected
