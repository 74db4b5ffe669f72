"""The plan card's life in a real group: Telegram's limits in force, the shipped pacing.

The fake Bot API enforces about 20 calls a minute per group (a call over it answers 429); the
outbox paces as shipped (about a call a second per chat, 20 per rolling minute per group). The
real engine, real storage, the real openai SDK against the fake model server.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path

from bot.telegram.app import parts
from bot.telegram.keys import tg_flow
from engine.events import PlanChanged
from engine.model.script import ScriptedCall, ScriptStep, call, say
from tests.engine.helpers import EXECUTION, PLAN_MD, PLANNING, settle
from tests.fakebot.server import FakeBotApi, FakeMessage
from tests.keys import chat
from tests.telegram.app_support import GROUP, OWNER, eventually
from tests.telegram.live import Live, button, card, labels, live_bot, until

APPROVE = "✅ Approve"
# Calls a person does not see as chat traffic (and Telegram does not count against a group).
NOT_COUNTED = {"getUpdates", "answerCallbackQuery", "sendChatAction"}


def group(api: FakeBotApi) -> FakeBotApi:
    api.group_limit_per_minute = 20
    return api


def chat_calls(api: FakeBotApi, since: int) -> Counter[str]:
    return Counter(c.method for c in api.calls[since:] if c.method not in NOT_COUNTED)


def carries_approve(msg: FakeMessage) -> bool:
    return APPROVE in labels(msg)


async def reviewed(api: FakeBotApi, live: Live) -> tuple[str, FakeMessage]:
    """/plan in the group; the planning turn; the settled review card."""
    api.user_message(GROUP, OWNER, "/plan Add a greeting module")
    await eventually(lambda: len(api.bot_messages(GROUP)) >= 1)
    sid = await live.engine.session_for_chat(chat(GROUP))
    await settle(live.engine, sid)
    await parts(live.app).presenter.flush()
    review = await card(api, live, sid)
    assert labels(review) == [APPROVE, "✏️ Keep planning", "🗑 Discard"]
    return sid, review


def archived_flow(live: Live) -> dict[str, object]:
    found = sorted((live.storage.home).glob("**/archive/*.json"))
    assert len(found) == 1, found
    return dict(json.loads(found[0].read_text())["flow"])


async def test_plan_to_a_settled_review_takes_at_most_four_calls(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    api = group(fake_api)
    async with live_bot(api, tmp_path, PLANNING, group_pacing=True, edit_interval_s=1.5) as live:
        first = len(api.calls)
        _sid, review = await reviewed(api, live)
        calls = chat_calls(api, first)
    # The card is the answer to /plan and carries the plan; the turn's reply is the other.
    assert sum(calls.values()) <= 4, calls
    assert "Implementation steps" in review.text and "Done when" in review.text
    assert api.group_429s == 0
    assert review.reply_to is not None  # a reply to the /plan message
    assert "pinChatMessage" not in calls  # pinning is off in groups by default


async def test_approve_on_a_reposted_card_ends_done_on_that_card(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    api = group(fake_api)
    async with live_bot(
        api, tmp_path, [*PLANNING, *EXECUTION], group_pacing=True, edit_interval_s=1.5
    ) as live:
        sid, old = await reviewed(api, live)
        api.user_message(GROUP, OWNER, "/show-plan")
        # The new card: pressed as soon as Telegram has it, long before the old card's
        # "moved below" edit has gone through the group's pacing.
        await api.wait_for(
            lambda: any(
                carries_approve(m) and m.message_id > old.message_id
                for m in api.bot_messages(GROUP)
            ),
            timeout_s=15,
        )
        pressed = next(
            m
            for m in api.bot_messages(GROUP)
            if carries_approve(m) and m.message_id > old.message_id
        )
        api.press(GROUP, pressed.message_id, button(pressed, APPROVE), user_id=OWNER)
        await until(lambda: _archived(live, sid), timeout_s=60)
        await settle(live.engine, sid)
        await parts(live.app).presenter.flush()
        done = api.message(GROUP, pressed.message_id)
        assert "Done" in done.text and "2/2" in done.text and done.buttons == []
        assert not any(carries_approve(m) for m in api.bot_messages(GROUP))
        assert "moved below" in api.message(GROUP, old.message_id).text
        assert archived_flow(live)["card_id"] == str(pressed.message_id)
        assert api.group_429s == 0


async def test_a_press_on_an_old_copy_of_the_card_is_out_of_date(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    async with live_bot(fake_api, tmp_path, PLANNING) as live:
        sid, old = await reviewed(fake_api, live)
        approve = button(old, APPROVE)
        fake_api.user_message(GROUP, OWNER, "/show-plan")
        await until(lambda: _card_moved(live, sid, old.message_id))
        # The same plan at the same revision, but not the card flow names: nothing changes.
        qid = fake_api.press_raw(GROUP, old.message_id, approve, user_id=OWNER)
        await eventually(lambda: qid in fake_api.callback_answers)
        assert fake_api.callback_answers[qid]["text"] == "This card is out of date."
        assert await live.engine.plans.state(sid) == "post_init"


def long_plan(steps: int) -> str:
    lines = [
        f"{i}. Step {i} — do part {i}.\n   - Done when: part {i} exists"
        for i in range(1, steps + 1)
    ]
    context = (
        "## Context\n- **Problem:** many parts.\n- **Target state:** all parts.\n"
        "- **Intent:** the owner asked.\n"
    )
    return "# Many parts\n\n" + context + "\n## Implementation steps\n" + "\n".join(lines) + "\n"


def planning_of(markdown: str) -> list[ScriptStep]:
    return [
        call("plan", {"op": "init", "title": "Many parts", "mode": "design"}),
        call("write_file", {"path": "{plan_md}", "content": markdown}),
        call("plan", {"op": "submit"}),
        say("The plan is ready for review."),
    ]


def batched_execution(tasks: int) -> list[ScriptStep]:
    """Each model step starts and completes one task (two plan calls in one batch)."""
    step = ScriptStep(
        tool_calls=(
            ScriptedCall("plan", {"op": "start"}),
            ScriptedCall("plan", {"op": "complete", "evidence": "done"}),
        )
    )
    return [*([step] * tasks), say(f"All {tasks} tasks done.")]


async def test_a_200_task_plan_runs_to_the_end_with_no_message_after_the_press(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    tasks = 200
    api = group(fake_api)
    script = [*planning_of(long_plan(tasks)), *batched_execution(tasks)]
    async with live_bot(
        api, tmp_path, script, group_pacing=True, edit_interval_s=1.5, max_steps=50
    ) as live:
        sid, review = await reviewed(api, live)
        sidecar = (await live.engine.plan_card(sid)).sidecar
        assert sidecar is not None
        doc = api.message(GROUP, tg_flow(sidecar.flow).review_ids[0])
        assert doc.document is not None and doc.reply_to == review.message_id
        first = len(api.calls)
        last_id = max(m.message_id for m in api.messages(GROUP))
        seq = len(await live.storage.log.read(sid))
        api.press(GROUP, review.message_id, button(review, APPROVE), user_id=OWNER)
        # A 429 storm in the middle of the run changes nothing the owner sees in the end.
        await until(lambda: _started(live, sid, 20), timeout_s=60)
        api.storm(3, retry_after=1)
        await until(lambda: _archived(live, sid), timeout_s=240)
        await settle(live.engine, sid, timeout_s=60)
        await parts(live.app).presenter.flush()
        events = [e.event for e in await live.storage.log.read(sid)][seq:]
        changes = sum(isinstance(e, PlanChanged) for e in events)
        calls = chat_calls(api, first)
        done = api.message(GROUP, review.message_id)
        assert "Done" in done.text and f"{tasks}/{tasks}" in done.text and done.buttons == []
        # No human message after the press: the run went on across the per-turn step cap.
        humans = [m for m in api.messages(GROUP) if not m.from_bot and m.message_id > last_id]
        assert humans == []
        assert changes >= 2 * tasks
        assert sum(calls.values()) <= 0.5 * changes, (calls, changes)
        assert api.group_429s == 0
        assert archived_flow(live)["card_id"] == str(review.message_id)


def question_turn(*, changes_plan: bool) -> list[ScriptStep]:
    """The planner answers a question; with ``changes_plan`` it edits the plan first."""
    if changes_plan:
        edited = PLAN_MD.replace("and run it", "then run it")
        first = call("write_file", {"path": "{plan_md}", "content": edited})
    else:
        first = call("read_file", {"path": "{plan_md}"})
    return [first, say("Step 2 runs the test.")]


async def ask_while_held(api: FakeBotApi, live: Live) -> asyncio.Event:
    """The owner asks the planner a question; its model call is held in flight until set."""
    assert live.model_server is not None
    release = live.model_server.hold_next()
    asked = len(live.model_server.chat_requests)
    api.user_message(GROUP, OWNER, f"@{api.username} what does step 2 do?")
    # The planner's step began (and its pre-step ran) before anything the test does next.
    await until(lambda: _requests(live, asked + 1))
    return release


async def test_approve_while_the_planner_answers_runs_the_checklist_after_that_turn(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    script = [*PLANNING, *question_turn(changes_plan=False), *EXECUTION]
    async with live_bot(fake_api, tmp_path, script) as live:
        sid, review = await reviewed(fake_api, live)
        release = await ask_while_held(fake_api, live)
        qid = fake_api.press(GROUP, review.message_id, button(review, APPROVE), user_id=OWNER)
        await eventually(lambda: qid in fake_api.callback_answers)
        assert "when the current step ends" in (fake_api.callback_answers[qid]["text"] or "")
        release.set()
        # Nobody writes again: the checklist runs when the answering turn ends.
        await until(lambda: _archived(live, sid), timeout_s=30)
        assert (live.workspace / "greet.py").exists()


async def test_approve_lapses_when_the_planner_changes_the_plan_meanwhile(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    script = [*PLANNING, *question_turn(changes_plan=True)]
    async with live_bot(fake_api, tmp_path, script) as live:
        sid, review = await reviewed(fake_api, live)
        release = await ask_while_held(fake_api, live)
        fake_api.press(GROUP, review.message_id, button(review, APPROVE), user_id=OWNER)
        await until(lambda: _pending(live, sid))
        release.set()
        await settle(live.engine, sid)
        await parts(live.app).presenter.flush()
        assert await live.engine.plans.state(sid) == "post_init"
        assert any("approval lapsed" in m.text for m in fake_api.bot_messages(GROUP))
        again = await card(fake_api, live, sid)
        assert labels(again) == [APPROVE, "✏️ Keep planning", "🗑 Discard"]
        sidecar = (await live.engine.plan_card(sid)).sidecar
        assert sidecar is not None and f":{sidecar.revision}" in button(again, APPROVE)
        assert "then run it" in again.text


async def test_keep_planning_then_an_unchanged_plan_brings_approve_back(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    script = [*PLANNING, say("Nothing needs to change.")]
    async with live_bot(fake_api, tmp_path, script) as live:
        sid, review = await reviewed(fake_api, live)
        keep = button(review, "✏️ Keep planning")
        fake_api.press(GROUP, review.message_id, keep, user_id=OWNER)
        await eventually(
            lambda: labels(fake_api.message(GROUP, review.message_id)) == ["🗑 Discard"]
        )
        prompt = next(m for m in fake_api.bot_messages(GROUP) if "What should change?" in m.text)
        fake_api.user_message(GROUP, OWNER, "Looks fine after all", reply_to=prompt.message_id)
        await until(lambda: _turns(live, sid, 2))
        await settle(live.engine, sid)
        await eventually(
            lambda: (
                labels(fake_api.message(GROUP, review.message_id))
                == [APPROVE, "✏️ Keep planning", "🗑 Discard"]
            )
        )


async def test_revise_hides_approve_until_the_planner_has_answered(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    first_step = [*EXECUTION[:3], say("Step 1 is done.")]
    script = [*PLANNING, *first_step, say("Ok, revised nothing yet.")]
    async with live_bot(fake_api, tmp_path, script) as live:
        sid, review = await reviewed(fake_api, live)
        # A stop after step 1 so the checklist does not run on through the script.
        fake_api.press(GROUP, review.message_id, button(review, APPROVE), user_id=OWNER)
        await until(lambda: _started(live, sid, 1))
        fake_api.user_message(GROUP, OWNER, "/stop")
        await settle(live.engine, sid)
        fake_api.user_message(GROUP, OWNER, "/plan")
        await eventually(lambda: "✏️ Revise plan" in labels(_live_card(fake_api)))
        offer = _live_card(fake_api)
        fake_api.press(GROUP, offer.message_id, button(offer, "✏️ Revise plan"), user_id=OWNER)
        await until(lambda: _plan_state(live, sid, "post_init"))
        await parts(live.app).presenter.flush()
        await eventually(lambda: labels(_live_card(fake_api)) == ["🗑 Discard"])


def _live_card(api: FakeBotApi) -> FakeMessage:
    cards = [m for m in api.bot_messages(GROUP) if m.text.startswith("📋") and m.buttons]
    return cards[-1]


async def _archived(live: Live, sid: str) -> bool:
    return await live.engine.plans.state(sid) == "none" and any(
        live.storage.home.glob("**/archive/*.json")
    )


async def _card_moved(live: Live, sid: str, old: int) -> bool:
    data = await live.engine.plan_card(sid)
    return data.sidecar is not None and tg_flow(data.sidecar.flow).card_id not in (None, old)


async def _started(live: Live, sid: str, count: int) -> bool:
    sidecar = await live.engine.plans.current(sid)
    return sidecar is None or sum(t.status == "completed" for t in sidecar.tasks) >= count


async def _requests(live: Live, count: int) -> bool:
    assert live.model_server is not None
    return len(live.model_server.chat_requests) >= count


async def _pending(live: Live, sid: str) -> bool:
    return live.engine.agents.controller(sid).pending_approval is not None


async def _plan_state(live: Live, sid: str, state: str) -> bool:
    return await live.engine.plans.state(sid) == state


async def _turns(live: Live, sid: str, count: int) -> bool:
    ends = await live.storage.log.read(sid, types=["turn/end"])
    return len(ends) >= count


async def _reply(api: FakeBotApi, text: str) -> bool:
    return any(m.text == text for m in api.bot_messages(GROUP))
