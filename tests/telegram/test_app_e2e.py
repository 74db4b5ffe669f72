"""End to end: the real Engine, real SQLite and files, the scripted model, real PTB over HTTP.

A group chat: the owner's /plan, the planning turn, the review card, a non-owner's Approve
refused, the owner's Approve, the checklist run to done and archived, a stale Approve refused.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bot.telegram.app import parts
from bot.telegram.keys import msg_id, tg_flow
from engine.app import Engine
from engine.events import UserMessage
from engine.model.script import ScriptStep, call, say
from engine.model.scripted import ScriptedProvider
from engine.model.types import ModelReply
from tests.engine.helpers import EXECUTION, GREET_PY, PLAN_MD, PLANNING, settle
from tests.fakebot.server import FakeBotApi, FakeMessage
from tests.keys import chat, chat_key
from tests.telegram.app_support import GROUP, OWNER, STALE, STRANGER, eventually
from tests.telegram.live import Live, button, card, labels, live_bot, until


async def test_plan_review_approve_run_to_done_in_a_group(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    async with live_bot(fake_api, tmp_path, [*PLANNING, *EXECUTION]) as live:
        engine = live.engine
        fake_api.user_message(GROUP, OWNER, "/plan Add a greeting module")
        # Wait for the handler's reply before asking for the session (no racing creation).
        await eventually(lambda: len(fake_api.bot_messages(GROUP)) >= 1)
        sid = await engine.session_for_chat(chat(GROUP))
        await settle(engine, sid)
        await parts(live.app).presenter.flush()

        # The review card carries the plan and Approve / Keep planning / Discard.
        review = await card(fake_api, live, sid)
        assert labels(review) == ["✅ Approve", "✏️ Keep planning", "🗑 Discard"]
        assert "Greeting module" in review.text and "review" in review.text.lower()
        assert "Implementation steps" in review.text and "Done when" in review.text
        data = await engine.plan_card(sid)
        assert data.sidecar is not None and tg_flow(data.sidecar.flow).review_ids == []
        assert any(m.text == "The plan is ready for review." for m in fake_api.bot_messages(GROUP))
        approve = button(review, "✅ Approve")

        # A non-owner's Approve: an alert, and nothing changes.
        qid = fake_api.press(GROUP, review.message_id, approve, user_id=STRANGER)
        await eventually(lambda: qid in fake_api.callback_answers)
        assert fake_api.callback_answers[qid]["show_alert"] is True
        assert await engine.plans.state(sid) == "post_init"
        assert labels(fake_api.message(GROUP, review.message_id)) == labels(review)

        # The owner's Approve: the checklist runs to the end on the same card.
        qid = fake_api.press(GROUP, review.message_id, approve, user_id=OWNER)
        await eventually(lambda: qid in fake_api.callback_answers)
        assert (fake_api.callback_answers[qid]["text"] or "").startswith("Approved")
        await eventually(lambda: (live.workspace / "test_greet.py").exists())
        await settle(engine, sid)
        await parts(live.app).presenter.flush()
        assert await engine.plans.state(sid) == "none"  # archived
        done = fake_api.message(GROUP, review.message_id)
        assert "Done" in done.text and "2/2" in done.text and done.buttons == []
        assert any("1/2" in t or "0/2" in t for t in done.edits)  # it ticked through
        assert (live.workspace / "greet.py").read_text() == GREET_PY
        final = [m for m in fake_api.bot_messages(GROUP) if m.text.startswith("All done")]
        assert len(final) == 1

        # The old Approve pressed again (a stale card): refused, nothing runs.
        qid = fake_api.press_raw(GROUP, review.message_id, approve, user_id=OWNER)
        await eventually(lambda: qid in fake_api.callback_answers)
        assert fake_api.callback_answers[qid]["text"] == STALE
        assert await engine.plans.state(sid) == "none"


class GatedProvider:
    """Our ModelProvider port, gated: call number ``gate_at`` waits until released."""

    def __init__(self, script: Sequence[ScriptStep], *, gate_at: int) -> None:
        self.inner = ScriptedProvider(list(script))
        self.gate_at = gate_at
        self.calls = 0
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def complete(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        *,
        max_tokens: int | None = None,
    ) -> ModelReply:
        self.calls += 1
        if self.calls == self.gate_at:
            self.entered.set()
            await self.release.wait()
        return await self.inner.complete(messages, tools)


async def test_discard_while_the_agent_works_cancels_the_turn(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    model = GatedProvider(PLANNING, gate_at=2)
    async with live_bot(fake_api, tmp_path, [], model=model) as live:
        engine = live.engine
        fake_api.user_message(GROUP, OWNER, "/plan Add a greeting module")
        await asyncio.wait_for(model.entered.wait(), 10)  # the turn is mid-step
        sid = await engine.session_for_chat(chat(GROUP))
        assert engine.agents.is_busy(sid)
        fake_api.user_message(GROUP, OWNER, "/discard")
        await until(lambda: _idle_and_none(engine, sid))
        await until(lambda: _ended(engine, sid))
        await parts(live.app).presenter.flush()
        plan_card = (await engine.plan_card(sid)).sidecar
        assert plan_card is not None and tg_flow(plan_card.flow).card_id is not None
        shown = fake_api.message(GROUP, tg_flow(plan_card.flow).card_id)
    assert model.calls == 2  # the blocked model call was cancelled, nothing after it
    assert "Discarded" in shown.text and shown.buttons == []
    assert not any("ready for review" in m.text for m in fake_api.bot_messages(GROUP))


async def _ended(engine: Engine, sid: str) -> bool:
    return (await engine.plan_card(sid)).ended is not None


async def _idle_and_none(engine: Engine, sid: str) -> bool:
    return engine.agents.is_idle(sid) and await engine.plans.state(sid) == "none"


async def test_goal_with_three_rounds_runs_exactly_three_and_shows_round_limit(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    script = [say(f"Round {i} done.") for i in (1, 2, 3)]
    async with live_bot(fake_api, tmp_path, script, max_goal_rounds=3) as live:
        engine = live.engine
        fake_api.user_message(GROUP, OWNER, "/goal make the greeting friendlier")
        await eventually(lambda: len(fake_api.bot_messages(GROUP)) >= 1)
        sid = await engine.session_for_chat(chat(GROUP))

        async def blocked() -> bool:
            goal = await engine.goals.get(sid)
            return goal is not None and goal.phase == "blocked"

        await until(blocked)
        await settle(engine, sid)
        await parts(live.app).presenter.flush()
        goal = await engine.goals.get(sid)
        assert goal is not None and goal.blocked is not None
        assert goal.blocked.code == "round-limit" and goal.rounds_started == 3
        stored = await engine.goal_card(sid)  # the engine keeps where the goal card is
        assert stored.chat_id == chat_key(GROUP) and stored.card_id is not None
        goal_card = fake_api.message(GROUP, msg_id(stored.card_id))
    rounds = [m for m in fake_api.bot_messages(GROUP) if m.text.startswith("Round ")]
    assert [m.text for m in rounds] == ["Round 1 done.", "Round 2 done.", "Round 3 done."]
    assert "round-limit" in goal_card.text and "3/3" in goal_card.text
    assert labels(goal_card) == ["✖️ Clear"]


async def test_a_restart_mid_plan_keeps_editing_the_same_card(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    async with live_bot(fake_api, tmp_path, PLANNING) as live:
        fake_api.user_message(GROUP, OWNER, "/plan Add a greeting module")
        await eventually(lambda: len(fake_api.bot_messages(GROUP)) >= 1)
        sid = await live.engine.session_for_chat(chat(GROUP))
        await settle(live.engine, sid)
        await parts(live.app).presenter.flush()
        review = await card(fake_api, live, sid)
    sends = fake_api.count("sendMessage")
    # A new process over the same home: the same card gets the Approve and the checklist.
    async with live_bot(fake_api, tmp_path, EXECUTION) as live:
        qid = fake_api.press(GROUP, review.message_id, button(review, "✅ Approve"), user_id=OWNER)
        await eventually(lambda: qid in fake_api.callback_answers)
        await until(lambda: _plan_state_is(live.engine, sid, "none"))
        await settle(live.engine, sid)
        await parts(live.app).presenter.flush()
    done = fake_api.message(GROUP, review.message_id)
    assert "Done" in done.text and "2/2" in done.text
    new_sends = [c for c in fake_api.calls_of("sendMessage")[sends:]]
    assert all("Greeting module" not in str(c.params.get("text")) for c in new_sends)


async def _plan_state_is(engine: Engine, sid: str, state: str) -> bool:
    return await engine.plans.state(sid) == state


async def test_a_429_storm_during_the_run_still_ends_with_the_right_card(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    async with live_bot(fake_api, tmp_path, [*PLANNING, *EXECUTION]) as live:
        engine = live.engine
        fake_api.user_message(GROUP, OWNER, "/plan Add a greeting module")
        await eventually(lambda: len(fake_api.bot_messages(GROUP)) >= 1)
        sid = await engine.session_for_chat(chat(GROUP))
        await settle(engine, sid)
        await parts(live.app).presenter.flush()
        review = await card(fake_api, live, sid)
        fake_api.storm(4, retry_after=1)
        fake_api.press(GROUP, review.message_id, button(review, "✅ Approve"), user_id=OWNER)
        await until(lambda: _plan_state_is(engine, sid, "none"))
        await settle(engine, sid)
        await parts(live.app).presenter.flush()
    done = fake_api.message(GROUP, review.message_id)
    assert "Done" in done.text and "2/2" in done.text and done.buttons == []


PLAN_MD_V2 = PLAN_MD.replace(
    "2. Test — write test_greet.py and run it.", "2. Test — write and run it."
)
FEEDBACK_TURN = [
    call("write_file", {"path": "{plan_md}", "content": PLAN_MD_V2}),
    call("plan", {"op": "submit"}),
    say("Updated the plan."),
]


async def test_keep_planning_in_private_hears_the_feedback_and_reviews_again(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    async with live_bot(fake_api, tmp_path, [*PLANNING, *FEEDBACK_TURN]) as live:
        engine = live.engine
        fake_api.user_message(OWNER, OWNER, "/plan Add a greeting module")
        await eventually(lambda: len(fake_api.bot_messages(OWNER)) >= 1)
        sid = await engine.session_for_chat(chat(OWNER))
        await settle(engine, sid)
        await parts(live.app).presenter.flush()
        data = await engine.plan_card(sid)
        assert data.state == "review" and data.sidecar is not None
        first = fake_api.message(OWNER, tg_flow(data.sidecar.flow).card_id or 0)
        keep = next(d for row in first.buttons for t, d in row if t == "✏️ Keep planning")

        fake_api.press(OWNER, first.message_id, keep, user_id=OWNER)
        await eventually(
            lambda: any(
                m.text.startswith("What should change?") for m in fake_api.bot_messages(OWNER)
            )
        )
        # While the planner works on the feedback: no Approve, but Discard stays.
        await eventually(lambda: labels(fake_api.message(OWNER, first.message_id)) == ["🗑 Discard"])

        fake_api.user_message(OWNER, OWNER, "Make step 2 shorter")
        await until(lambda: _has_feedback(live, sid))
        await settle(engine, sid)
        await parts(live.app).presenter.flush()
        again = await engine.plan_card(sid)
        assert again.state == "review" and again.sidecar is not None
        second = fake_api.message(OWNER, tg_flow(again.sidecar.flow).card_id or 0)
    # The same card, edited: it carries the new plan text and the review keyboard again.
    assert second.message_id == first.message_id
    assert labels(second) == ["✅ Approve", "✏️ Keep planning", "🗑 Discard"]
    assert "write and run it" in second.text
    # A private chat's closing reply carries the usage footer (PLANGATE_USAGE_FOOTER=private).
    assert any(m.text.startswith("Updated the plan.\n\n— ") for m in fake_api.bot_messages(OWNER))


async def _has_feedback(live: Live, sid: str) -> bool:
    events = [e.event for e in await live.storage.log.read(sid)]
    return any(isinstance(e, UserMessage) and e.source.kind == "feedback" for e in events)


async def test_a_forum_topic_is_its_own_session_and_its_cards_stay_in_it(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    async with live_bot(fake_api, tmp_path, PLANNING) as live:
        engine = live.engine
        fake_api.user_message(GROUP, OWNER, "/plan Add a greeting module", thread_id=7)
        await eventually(lambda: len(fake_api.bot_messages(GROUP)) >= 1)
        sid = await engine.session_for_chat(chat(GROUP, 7))
        await settle(engine, sid)
        await parts(live.app).presenter.flush()
        fake_api.user_message(GROUP, OWNER, "/status")  # the general topic: another session
        await eventually(lambda: any(m.thread_id is None for m in fake_api.bot_messages(GROUP)))
        other = await engine.session_for_chat(chat(GROUP))
        data = await engine.plan_card(sid)
    assert other != sid
    assert data.state == "review" and data.sidecar is not None
    assert tg_flow(data.sidecar.flow).thread_id == 7
    in_topic = [m for m in fake_api.bot_messages(GROUP) if m.thread_id == 7]
    assert tg_flow(data.sidecar.flow).card_id in [m.message_id for m in in_topic]
    assert any(m.text == "The plan is ready for review." for m in in_topic)
    status = [m for m in fake_api.bot_messages(GROUP) if m.thread_id is None]
    assert len(status) == 1 and "Plan: none" in status[0].text


async def test_plan_on_an_active_plan_offers_revise_on_the_card(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    first_step = [*EXECUTION[:3], say("Step 1 is done.")]
    async with live_bot(fake_api, tmp_path, [*PLANNING, *first_step]) as live:
        engine = live.engine
        fake_api.user_message(GROUP, OWNER, "/plan Add a greeting module")
        await eventually(lambda: len(fake_api.bot_messages(GROUP)) >= 1)
        sid = await engine.session_for_chat(chat(GROUP))
        await settle(engine, sid)
        await parts(live.app).presenter.flush()
        review = await card(fake_api, live, sid)
        fake_api.press(GROUP, review.message_id, button(review, "✅ Approve"), user_id=OWNER)
        # Step 1, then continuations that change nothing until the run stalls. (Paused with
        # nothing done is also the instant between the approval's commit and the run's start.)
        await until(lambda: _paused(engine, sid, done=1))
        await settle(engine, sid)
        await parts(live.app).presenter.flush()
        assert await engine.plans.state(sid) == "active"

        fake_api.user_message(GROUP, OWNER, "/plan")
        await eventually(
            lambda: labels(fake_api_card(fake_api, review)) == ["✏️ Revise plan", "Cancel"]
        )
        offer = fake_api_card(fake_api, review)
        assert "1/2" in offer.text
        fake_api.press(GROUP, offer.message_id, button(offer, "Cancel"), user_id=OWNER)
        # The run stalled: paused, with Resume.
        await eventually(
            lambda: labels(fake_api_card(fake_api, review)) == ["▶️ Resume", "🗑 Discard"]
        )
        assert await engine.plans.state(sid) == "active"


def fake_api_card(api: FakeBotApi, review: FakeMessage) -> FakeMessage:
    """The live plan card: the review card, unless a restick moved it below."""
    cards = [
        m for m in api.bot_messages(GROUP) if m.text.startswith("📋") and "moved" not in m.text
    ]
    return cards[-1] if cards else review


async def _paused(engine: Engine, sid: str, *, done: int = 0) -> bool:
    data = await engine.plan_card(sid)
    tasks = data.sidecar.tasks if data.sidecar is not None else []
    return data.state == "paused" and sum(t.status == "completed" for t in tasks) >= done


async def _has_reply(api: FakeBotApi, text: str) -> bool:
    return any(m.text == text for m in api.bot_messages(GROUP))


async def test_a_goal_live_at_a_restart_comes_back_paused_with_resume(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    gated = GatedProvider([say("Round 1 done.")], gate_at=1)
    async with live_bot(fake_api, tmp_path, [], model=gated, max_goal_rounds=2) as live:
        fake_api.user_message(GROUP, OWNER, "/goal make the greeting friendlier")
        await asyncio.wait_for(gated.entered.wait(), 10)  # round 1 is mid-call
        sid = await live.engine.session_for_chat(chat(GROUP))
    # The process stopped mid-round. The next one comes up with the goal disarmed.
    async with live_bot(fake_api, tmp_path, [say("Round 2 done.")], max_goal_rounds=2) as live:
        restored = live.restored
        assert [r.session_id for r in restored] == [sid]
        await parts(live.app).presenter.flush()
        goal_card = fake_api.bot_messages(GROUP)[-1]
        assert "Paused by the restart" in goal_card.text
        assert labels(goal_card) == ["▶️ Resume", "✖️ Clear"]
        assert not live.engine.goals.is_armed(sid)
        fake_api.press(GROUP, goal_card.message_id, button(goal_card, "▶️ Resume"), user_id=OWNER)
        await until(lambda: _has_reply(fake_api, "Round 2 done."))

        async def blocked() -> bool:
            goal = await live.engine.goals.get(sid)
            return goal is not None and goal.phase == "blocked"

        await until(blocked)
    assert not any(m.text == "Round 1 done." for m in fake_api.bot_messages(GROUP))
