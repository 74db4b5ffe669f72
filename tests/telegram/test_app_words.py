"""Who may give the agent words, end to end (docs/roles.md, "Giving the agent words").

The real Engine over real SQLite and files, the scripted model through the real openai SDK,
the real PTB Application against the fake Bot API. Olga is the owner, Ana (and Ben) approvers.
Each test shows one way an approver could steer the agent, refused, and the owner's same
command still working.
"""

from __future__ import annotations

from pathlib import Path

from engine.events import FeedbackSource, HumanSource, UserMessage
from engine.model.script import call
from engine.model.script import say as model_say
from engine.tools.ask import ASK_SENT_TEXT
from tests.engine.helpers import EXECUTION, PLANNING, settle
from tests.fakebot.server import FakeBotApi, FakeMessage
from tests.keys import chat, person
from tests.telegram.app_support import GROUP, OWNER, eventually
from tests.telegram.live import Live, button, live_bot, until
from tests.telegram.test_app_e2e import FEEDBACK_TURN
from tests.telegram.test_app_roles import (
    ANA,
    APPROVE,
    BEN,
    BOT,
    _done,
    answered,
    archived,
    named,
    review_card,
    say,
)

APPROVER_REFUSAL = "Sorry, that is not for you. You are an approver here"


async def _human_texts(live: Live, sid: str) -> list[str]:
    """What the agent was told in people's words (goal rounds and checklist prompts aside)."""
    stored = await live.storage.log.read(sid, types=("user/message",))
    return [
        s.event.text
        for s in stored
        if isinstance(s.event, UserMessage) and isinstance(s.event.source, HumanSource)
    ]


async def test_goal_pause_with_words_sets_no_goal_for_an_approver_nor_pauses_for_anyone(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    named(fake_api)
    script = [model_say("Working on the greeting.")]
    async with live_bot(fake_api, tmp_path, script, max_goal_rounds=1) as live:
        engine = live.engine
        await say(fake_api, OWNER, f"/team add {ANA} approver")
        sid = await engine.session_for_chat(chat(GROUP))

        # Ana's "/goal pause <words>" is a goal objective in disguise: refused as the owner's.
        refused = await say(fake_api, ANA, "/goal pause and then rewrite the whole repo")
        assert refused.startswith(APPROVER_REFUSAL), refused
        assert await engine.goals.get(sid) is None
        assert not engine.goals.is_armed(sid)

        # Nor is it a pause for the owner: the words are the objective of a goal (the owner's
        # /goal <objective> still sets and arms one); Ana's bare /goal pause then pauses it.
        goal_set = await say(fake_api, OWNER, "/goal pause the world")
        assert goal_set.startswith("Goal set."), goal_set
        goal = await engine.goals.get(sid)
        assert goal is not None and goal.objective == "pause the world"
        paused = await say(fake_api, ANA, "/goal pause")
        assert not paused.startswith("Sorry"), paused
        assert not engine.goals.is_armed(sid)
        await settle(engine, sid)


async def test_a_reply_to_an_answered_question_opens_no_turn(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    named(fake_api)
    script = [
        call("ask_user", {"question": "Which greeting?"}),
        model_say("Waiting for your answer.", expect=ASK_SENT_TEXT),
        model_say("Hi it is.", expect="Hi"),
        # The owner's reply to the same (answered) question is still heard: owners always.
        model_say("Noted, Olga.", expect="Olga says hello"),
    ]
    async with live_bot(fake_api, tmp_path, script) as live:
        engine = live.engine
        await say(fake_api, OWNER, f"/team add {ANA} approver")
        fake_api.user_message(GROUP, OWNER, BOT + "write a greeting")
        sid = await engine.session_for_chat(chat(GROUP))

        def found(text: str) -> FakeMessage | None:
            return next((m for m in fake_api.bot_messages(GROUP) if text in m.text), None)

        await eventually(lambda: found("Which greeting?") is not None)
        question = found("Which greeting?")
        assert question is not None
        await settle(engine, sid)
        # Ana answers the open question: heard, once.
        fake_api.user_message(GROUP, ANA, "Hi", reply_to=question.message_id)
        await eventually(lambda: found("Hi it is.") is not None)
        await settle(engine, sid)

        # Ana replies to the same question again: it is answered, so this is her own words.
        refused = await say(fake_api, ANA, "now delete the tests", reply_to=question.message_id)
        assert refused.startswith(APPROVER_REFUSAL), refused
        await settle(engine, sid)
        assert "now delete the tests" not in await _human_texts(live, sid)

        # Even past a front end: the engine hears no answer when no question is open, and
        # says so in the chat.
        before = len(fake_api.bot_messages(GROUP))
        await engine.user_message(
            sid, "and push to main", actor=person(ANA), message_id=None, answer=True
        )
        await settle(engine, sid)
        assert "and push to main" not in await _human_texts(live, sid)
        await eventually(
            lambda: any(APPROVER_REFUSAL in m.text for m in fake_api.bot_messages(GROUP)[before:])
        )

        # The owner's reply to it is heard.
        fake_api.user_message(GROUP, OWNER, "Olga says hello", reply_to=question.message_id)
        await eventually(lambda: found("Noted, Olga.") is not None)
        await settle(engine, sid)


async def test_execute_text_from_an_approver_is_not_passed_to_the_agent(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    named(fake_api)
    script = [*PLANNING, *EXECUTION, model_say("Added the docstring.")]
    async with live_bot(fake_api, tmp_path, script) as live:
        engine = live.engine
        await say(fake_api, OWNER, f"/team add {ANA} approver")
        sid, _review = await review_card(fake_api, live)

        # Ana's /execute with words: refused whole (nothing approved, nothing sent).
        refused = await say(fake_api, ANA, "/execute and also disable the tests")
        assert refused.startswith(APPROVER_REFUSAL), refused
        assert await engine.plans.state(sid) == "post_init"
        assert "and also disable the tests" not in await _human_texts(live, sid)

        # The owner's /execute with words approves and passes the words on.
        approved = await say(fake_api, OWNER, "/execute add a docstring too")
        assert approved.startswith("Approved"), approved
        await until(lambda: _done(live, sid), timeout_s=60)
        await settle(engine, sid)
        assert "add a docstring too" in await _human_texts(live, sid)


async def test_a_removed_approvers_vote_no_longer_counts(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    named(fake_api)
    fake_api.first_names[BEN] = "Ben"
    script = [*PLANNING, *EXECUTION]
    async with live_bot(fake_api, tmp_path, script, plan_approvals=2) as live:
        engine = live.engine
        for who in (ANA, BEN):
            await say(fake_api, OWNER, f"/team add {who} approver")
        sid, review = await review_card(fake_api, live)
        approve = button(review, APPROVE)

        first = await answered(
            fake_api, fake_api.press(GROUP, review.message_id, approve, user_id=ANA)
        )
        assert first["text"] == "Approval 1 of 2: it needs another approver."
        removed = await say(fake_api, OWNER, f"/team remove {ANA}")
        assert "is no longer an approver" in removed

        # Ben's press is now the first that counts: the plan stays in review.
        second = await answered(
            fake_api, fake_api.press(GROUP, review.message_id, approve, user_id=BEN)
        )
        assert second["text"] == "Approval 1 of 2: it needs another approver.", second
        assert await engine.plans.state(sid) == "post_init"
        data = await engine.plan_card(sid)
        assert data.approvals == ("Ben",), data.approvals

        # The owner's approval completes it; removing Ben then does not un-approve the plan.
        third = await answered(
            fake_api, fake_api.press(GROUP, review.message_id, approve, user_id=OWNER)
        )
        assert str(third["text"]).startswith("Approved"), third
        await say(fake_api, OWNER, f"/team remove {BEN}")
        await until(lambda: _done(live, sid), timeout_s=60)
        [plan] = archived(live)
        assert plan["archive_reason"] == "completed"
        assert [a["user_id"] for a in plan["approved_by"]] == [person(BEN), person(OWNER)]


async def test_an_approvers_feedback_after_keep_planning_is_heard_once(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    named(fake_api)
    async with live_bot(fake_api, tmp_path, [*PLANNING, *FEEDBACK_TURN]) as live:
        engine = live.engine
        await say(fake_api, OWNER, f"/team add {ANA} approver")
        sid, review = await review_card(fake_api, live)
        keep = button(review, "✏️ Keep planning")
        toast = await answered(
            fake_api, fake_api.press(GROUP, review.message_id, keep, user_id=ANA)
        )
        assert str(toast["text"]).startswith("What should change?"), toast
        # Her next message is the feedback: the planner hears it as feedback.
        fake_api.user_message(GROUP, ANA, "Make step 2 shorter")
        await until(lambda: _feedback_heard(live, sid))
        await settle(engine, sid)
        # Once: her next message to the bot is her own words, refused.
        refused = await say(fake_api, ANA, BOT + "and delete the tests")
        assert refused.startswith(APPROVER_REFUSAL), refused
        await settle(engine, sid)
        assert "and delete the tests" not in await _human_texts(live, sid)


async def _feedback_heard(live: Live, sid: str) -> bool:
    stored = await live.storage.log.read(sid, types=("user/message",))
    return any(
        isinstance(s.event, UserMessage)
        and isinstance(s.event.source, FeedbackSource)
        and s.event.text == "Make step 2 shorter"
        and s.event.source.user_id == person(ANA)
        for s in stored
    )
