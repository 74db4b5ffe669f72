"""Roles in a group, end to end: the real Engine over real SQLite and files, the scripted
model through the real openai SDK, the real PTB Application against the fake Bot API (with a
group's limit of 20 messages a minute).

Ana is made an approver; Max stays a member. What each may press or say is the one rule of
engine.roles.policy, checked by the gate and by the engine.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bot.telegram.access import ALERT_TEXT
from bot.telegram.app import parts
from bot.telegram.keys import tg_flow
from engine.events import ApprovalDecided
from engine.model.script import call
from engine.model.script import say as model_say
from engine.tools.ask import ASK_SENT_TEXT
from tests.engine.helpers import EXECUTION, PLANNING, settle
from tests.fakebot.server import FakeBotApi, FakeMessage
from tests.keys import chat, chat_key, person
from tests.telegram.app_support import GROUP, OWNER, eventually
from tests.telegram.live import Live, button, card, live_bot, until

ANA, MAX = 3003, 4004
APPROVE = "✅ Approve"
BOT = "@plangate_test_bot "


def named(api: FakeBotApi) -> None:
    api.first_names.update({ANA: "Ana", MAX: "Max", OWNER: "Olga"})


async def answered(api: FakeBotApi, qid: str) -> dict[str, Any]:
    await eventually(lambda: qid in api.callback_answers)
    return api.callback_answers[qid]


async def reply_to(api: FakeBotApi, msg: FakeMessage, *, count_before: int) -> str:
    """The bot's next message after ``count_before`` that replies to ``msg``."""

    def found() -> bool:
        return any(m.reply_to == msg.message_id for m in api.bot_messages(GROUP)[count_before:])

    await eventually(found)
    return next(
        m.text for m in api.bot_messages(GROUP)[count_before:] if m.reply_to == msg.message_id
    )


async def say(api: FakeBotApi, user_id: int, text: str, **kw: Any) -> str:
    """``user_id`` writes ``text`` in the group; returns the bot's reply to it."""
    before = len(api.bot_messages(GROUP))
    msg = api.user_message(GROUP, user_id, text, **kw)
    return await reply_to(api, msg, count_before=before)


async def review_card(api: FakeBotApi, live: Live) -> tuple[str, FakeMessage]:
    """The owner's /plan, the planning turn, and the review card it ends with."""
    before = len(api.bot_messages(GROUP))
    api.user_message(GROUP, OWNER, "/plan Add a greeting module")
    await eventually(lambda: len(api.bot_messages(GROUP)) > before)
    sid = await live.engine.session_for_chat(chat(GROUP))
    await settle(live.engine, sid)

    async def in_review() -> bool:
        await parts(live.app).presenter.flush()
        data = await live.engine.plan_card(sid)
        if (
            data.state != "review"
            or data.sidecar is None
            or tg_flow(data.sidecar.flow).card_id is None
        ):
            return False
        return APPROVE in api.message(GROUP, tg_flow(data.sidecar.flow).card_id).text + "".join(
            t
            for row in api.message(GROUP, tg_flow(data.sidecar.flow).card_id).buttons
            for t, _ in row
        )

    await until(in_review, timeout_s=60)
    review = await card(api, live, sid)
    assert APPROVE in [t for row in review.buttons for t, _ in row]
    return sid, review


def archived(live: Live) -> list[dict[str, Any]]:
    found = sorted(live.storage.home.glob("**/archive/*.json"))
    return [json.loads(p.read_text(encoding="utf-8")) for p in found]


async def test_an_approver_approves_a_member_cannot_and_team_add_is_the_owners(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    named(fake_api)
    async with live_bot(fake_api, tmp_path, [*PLANNING, *EXECUTION], group_pacing=True) as live:
        engine = live.engine
        sid, review = await review_card(fake_api, live)
        approve = button(review, APPROVE)

        # Ana writes in the group (the bot sees her @username); Max tries to make himself
        # and her approvers: refused, with what a member may do, and nobody's role changes.
        fake_api.user_message(GROUP, ANA, "I can review plans")
        refused = await say(fake_api, MAX, "/team add @user3003 approver")
        assert refused.startswith("Sorry, that is not for you. You are a member here")
        assert await engine.role_of(chat_key(GROUP), person(ANA)) == "member"
        assert await engine.role_of(chat_key(GROUP), person(MAX)) == "member"

        # A member's Approve: an alert saying what a member may do; nothing changes.
        alert = await answered(
            fake_api, fake_api.press(GROUP, review.message_id, approve, user_id=MAX)
        )
        assert alert == {"text": ALERT_TEXT, "show_alert": True}
        assert await engine.plans.state(sid) == "post_init"
        assert engine.agents.is_idle(sid)

        # The owner makes Ana an approver by her @username; /team lists her.
        added = await say(fake_api, OWNER, "/team add @user3003 approver")
        assert added == "Ana is now an approver in this chat."
        assert await engine.role_of(chat_key(GROUP), person(ANA)) == "approver"
        listing = await say(fake_api, MAX, "/team")
        assert "Ana (3003)" in listing and "You are: member." in listing

        # Ana's Approve runs the plan to its end, and the archive names her.
        toast = await answered(
            fake_api, fake_api.press(GROUP, review.message_id, approve, user_id=ANA)
        )
        assert str(toast["text"]).startswith("Approved")
        await until(lambda: _done(live, sid), timeout_s=60)
        [plan] = archived(live)
        assert plan["archive_reason"] == "completed"
        assert [a["user_id"] for a in plan["approved_by"]] == [person(ANA)]
        assert plan["approved_by"][0]["name"] == "Ana"
        assert (live.workspace / "greet.py").exists()
        # /status names the decision (Max's two answers this minute are spent: bot.flood).
        status = await say(fake_api, ANA, "/status")
        assert "Last decisions:" in status and "✅ Plan approved by Ana" in status


async def _done(live: Live, sid: str) -> bool:
    await settle(live.engine, sid)
    return await live.engine.plans.state(sid) == "none"


async def test_roles_survive_a_restart_and_a_removed_approvers_buttons_do_nothing(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    named(fake_api)
    async with live_bot(fake_api, tmp_path, PLANNING) as live:
        _, review = await review_card(fake_api, live)
        # The owner makes Ana an approver by replying to her message.
        hers = fake_api.user_message(GROUP, ANA, "me please")
        added = await say(fake_api, OWNER, "/team add approver", reply_to=hers.message_id)
        assert added == "Ana is now an approver in this chat."

    async with live_bot(fake_api, tmp_path, []) as live:
        engine = live.engine
        sid = await engine.session_for_chat(chat(GROUP))
        # After the restart the team is read back from the chat log.
        assert await engine.role_of(chat_key(GROUP), person(ANA)) == "approver"
        listing = await say(fake_api, OWNER, "/team")
        assert "Ana (3003)" in listing
        # A forum topic shares its group's team.
        in_topic = await say(fake_api, ANA, "/team", thread_id=7)
        assert "Ana (3003)" in in_topic and "You are: approver." in in_topic

        # The owner removes her by id; her old Approve button (still the live card's) now
        # gets the member's alert, and the plan stays in review.
        removed = await say(fake_api, OWNER, f"/team remove {ANA}")
        assert removed == "Ana is no longer an approver; they are a member now."
        approve = button(review, APPROVE)
        alert = await answered(
            fake_api, fake_api.press(GROUP, review.message_id, approve, user_id=ANA)
        )
        assert alert == {"text": ALERT_TEXT, "show_alert": True}
        assert await engine.plans.state(sid) == "post_init"
        # The engine's own check refuses her too (a press that got past a front end).
        data = await engine.plan_card(sid)
        assert data.sidecar is not None
        from engine.api import Press

        press = Press("p", "approve", data.sidecar.id[:8], data.sidecar.revision)
        outcome = await engine.press(
            sid, press, actor=person(ANA), message_id=str(review.message_id)
        )
        assert outcome.alert and "member" in (outcome.reply or "")
        assert await engine.plans.state(sid) == "post_init"


BEN = 5005


async def test_two_approvals_need_two_different_people(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    named(fake_api)
    fake_api.first_names[BEN] = "Ben"
    script = [*PLANNING, *EXECUTION]
    async with live_bot(fake_api, tmp_path, script, group_pacing=True, plan_approvals=2) as live:
        engine = live.engine
        for who in (ANA, BEN):
            assert (await say(fake_api, OWNER, f"/team add {who} approver")).endswith(
                "is now an approver in this chat."
            )
        sid, review = await review_card(fake_api, live)
        assert "0 of 2 approvals" in review.text
        approve = button(review, APPROVE)

        # Ana's press is one of two: the card says so and names her; nothing runs yet.
        toast = await answered(
            fake_api, fake_api.press(GROUP, review.message_id, approve, user_id=ANA)
        )
        assert toast["text"] == "Approval 1 of 2: it needs another approver."
        await parts(live.app).presenter.flush()
        await eventually(
            lambda: "1 of 2 approvals: Ana" in fake_api.message(GROUP, review.message_id).text
        )
        assert await engine.plans.state(sid) == "post_init"

        # Ana again: the same person twice does not count twice.
        again = await answered(
            fake_api, fake_api.press(GROUP, review.message_id, approve, user_id=ANA)
        )
        assert str(again["text"]).startswith("You approved this version already: 1 of 2")
        assert await engine.plans.state(sid) == "post_init"

        # Ben's press is the second: the plan runs, and the archive names both, in order.
        second = await answered(
            fake_api, fake_api.press(GROUP, review.message_id, approve, user_id=BEN)
        )
        assert str(second["text"]).startswith("Approved")
        await until(lambda: _done(live, sid), timeout_s=60)
        [plan] = archived(live)
        assert [(a["user_id"], a["name"]) for a in plan["approved_by"]] == [
            (person(ANA), "Ana"),
            (person(BEN), "Ben"),
        ]
        edits = fake_api.message(GROUP, review.message_id).edits
        final = fake_api.message(GROUP, review.message_id).text
        assert any("✅ Approved by Ana and Ben" in t for t in [*edits, final]), (edits, final)


async def test_an_approver_answers_the_agents_question_a_member_cannot(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    named(fake_api)
    script = [
        call("ask_user", {"question": "Which greeting?", "options": ["Hello", "Hi"]}),
        model_say("Waiting for your answer.", expect=ASK_SENT_TEXT),
        call("ask_user", {"question": "And the name?"}, expect="Hi"),
        model_say("Waiting again.", expect=ASK_SENT_TEXT),
        model_say("Greeting Ana.", expect="Ana it is"),
    ]
    async with live_bot(fake_api, tmp_path, script) as live:
        await say(fake_api, OWNER, f"/team add {ANA} approver")
        fake_api.user_message(GROUP, OWNER, BOT + "write a greeting")

        def question(text: str) -> FakeMessage | None:
            return next((m for m in fake_api.bot_messages(GROUP) if text in m.text), None)

        await eventually(lambda: question("Which greeting?") is not None)
        first = question("Which greeting?")
        assert first is not None
        # Max (a member) presses an option: the alert, and the question stays open.
        alert = await answered(
            fake_api, fake_api.press(GROUP, first.message_id, button(first, "Hi"), user_id=MAX)
        )
        assert alert == {"text": ALERT_TEXT, "show_alert": True}
        # Ana (an approver) presses it: the agent hears "Hi".
        fake_api.press(GROUP, first.message_id, button(first, "Hi"), user_id=ANA)
        await eventually(lambda: question("And the name?") is not None)
        second = question("And the name?")
        assert second is not None
        # Max replies to the question: refused with what a member may do; Ana's reply answers.
        refused = await say(fake_api, MAX, "Max it is", reply_to=second.message_id)
        assert refused.startswith("Sorry, that is not for you. You are a member here")
        fake_api.user_message(GROUP, ANA, "Ana it is", reply_to=second.message_id)
        await eventually(lambda: question("Greeting Ana.") is not None)
        sid = await live.engine.session_for_chat(chat(GROUP))
        await settle(live.engine, sid)


async def test_an_approver_answers_a_tool_approval_and_the_log_names_them(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    named(fake_api)
    script = [
        call("bash", {"command": "touch asked.txt"}),
        model_say("Done.", expect="exit code 0"),
    ]
    async with live_bot(fake_api, tmp_path, script, ask_bash=(("touch",),)) as live:
        engine = live.engine
        await say(fake_api, OWNER, f"/team add {ANA} approver")
        fake_api.user_message(GROUP, OWNER, BOT + "make the file")
        await eventually(lambda: any(m.text.startswith("🔐") for m in fake_api.bot_messages(GROUP)))
        asked = next(m for m in fake_api.bot_messages(GROUP) if m.text.startswith("🔐"))
        allow = next(d for row in asked.buttons for t, d in row if t.startswith("✅"))
        sid = await engine.session_for_chat(chat(GROUP))
        # A member's press: the alert; the engine's own check says no as well.
        alert = await answered(
            fake_api, fake_api.press(GROUP, asked.message_id, allow, user_id=MAX)
        )
        assert alert == {"text": ALERT_TEXT, "show_alert": True}
        assert not await engine.approvals.may_answer(sid, MAX)
        assert engine.pending_approval(sid) is not None
        # Ana's Allow once runs it, and the decision names her.
        toast = await answered(
            fake_api, fake_api.press(GROUP, asked.message_id, allow, user_id=ANA)
        )
        assert toast["text"] == "Allowed once."
        await eventually(lambda: (live.workspace / "asked.txt").exists())
        await settle(engine, sid)
        stored = await live.storage.log.read(sid, types=("approval/decided",))
        [decided] = [s.event for s in stored]
        assert isinstance(decided, ApprovalDecided)
        assert (decided.decision, decided.actor, decided.actor_name) == ("once", person(ANA), "Ana")
        status = await say(fake_api, OWNER, "/status")
        assert "🔐 touch asked.txt: allowed once by Ana" in status
