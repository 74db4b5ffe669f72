"""Checks end to end (docs/checks.md): the real Engine, SQLite and files, real bubblewrap, the
real openai SDK against the fake chat-completions server playing an agent's script, the real
PTB Application against the fake Bot API, in a group.

The model's tool results are checked by the script's ``expect``: a refused complete reaches
the model with the failing output, or the script diverges and the test fails.
"""

from __future__ import annotations

import json
from pathlib import Path

from bot.telegram.app import parts
from engine.events import ApprovalDecided, GoalCheck, GoalRoundSource, UserMessage
from engine.model.script import call, say
from engine.progress.stuck import StuckLimits
from tests.checks.support import (
    ALLOW_CHECK,
    CHECK,
    FIXED_APP_PY,
    PLANNING,
    execution,
    make_project,
)
from tests.checks.test_goal_checks_engine import goal_script
from tests.engine.helpers import settle
from tests.fakebot.server import FakeBotApi, FakeMessage
from tests.keys import chat
from tests.telegram.app_support import GROUP, OWNER, eventually
from tests.telegram.live import Live, button, card, labels, live_bot, until

BOT = "@plangate_test_bot "


async def _reviewed(api: FakeBotApi, live: Live) -> tuple[str, FakeMessage]:
    """/plan in the group, the planning turn, the review card (with its 🧪 block)."""
    before = len(api.bot_messages(GROUP))
    api.user_message(GROUP, OWNER, "/plan Fix the health check")
    await eventually(lambda: len(api.bot_messages(GROUP)) > before)
    sid = await live.engine.session_for_chat(chat(GROUP))
    await settle(live.engine, sid)
    await parts(live.app).presenter.flush()
    review = await card(api, live, sid)
    assert "✅ Approve" in labels(review)
    assert f"🧪 {CHECK} · step 1" in review.text
    return sid, review


async def _approve(api: FakeBotApi, review: FakeMessage) -> None:
    qid = api.press(GROUP, review.message_id, button(review, "✅ Approve"), user_id=OWNER)
    await eventually(lambda: qid in api.callback_answers)
    assert (api.callback_answers[qid]["text"] or "").startswith("Approved")


def _archived(live: Live) -> dict:
    [path] = sorted((live.workspace.parent / "home").glob("projects/*/session/archive/*.json"))
    return json.loads(path.read_text())


async def test_a_failing_check_refuses_complete_until_the_fix_and_done_shows_the_proof(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    make_project(tmp_path / "work")
    script = [*PLANNING, *execution()]
    async with live_bot(fake_api, tmp_path, script, allow_bash=ALLOW_CHECK) as live:
        engine = live.engine
        sid, review = await _reviewed(fake_api, live)
        await _approve(fake_api, review)
        await until(lambda: _plan_none(live, sid), timeout_s=90)
        await settle(engine, sid, timeout_s=60)
        await parts(live.app).presenter.flush()
        done = fake_api.message(GROUP, review.message_id)
        replies = [m.text for m in fake_api.bot_messages(GROUP)]
    # The script ran to its end: every expect held, the refusal's failure text included.
    assert any(t.startswith("Fixed: health() returns ok") for t in replies)
    assert (live.workspace / "app.py").read_text() == FIXED_APP_PY
    # The Done card: the check with plangate's result and the test file the agent changed.
    assert "Done" in done.text and done.buttons == []
    assert f"✅ {CHECK} exit 0 in " in done.text and "· task 1" in done.text
    assert "changed tests: test_app.py" in done.text
    # The archived sidecar holds plangate's evidence: the command and exit code 0.
    task = _archived(live)["tasks"][0]
    assert task["status"] == "completed"
    assert [(r["command"], r["exit_code"]) for r in task["check_results"]] == [(CHECK, 0)]
    assert "run by plangate" in task["evidence"] and "all green" not in task["evidence"]


async def _plan_none(live: Live, sid: str) -> bool:
    return await live.engine.plans.state(sid) == "none"


async def test_skip_of_a_checked_task_asks_the_owner(fake_api: FakeBotApi, tmp_path: Path) -> None:
    make_project(tmp_path / "work")
    script = [
        *PLANNING,
        # The approved run: start, claim done, refused, ask; a reply without a tool call
        # stops the run here (monologue=1: no continuation talks over the question).
        call("plan", {"op": "start"}),
        call("plan", {"op": "complete"}, expect="Started task 1"),
        say("The check fails; should I skip the task?", expect="checks-failed"),
        # The owner's own message: skip it. The first skip is denied, the second allowed.
        call("plan", {"op": "skip", "reason": "the monitor is retired"}, expect="skip it"),
        call(
            "plan",
            {"op": "skip", "reason": "the owner says the monitor is retired"},
            expect="skip-needs-owner",
        ),
        say("Skipped task 1 with your approval.", expect="Skipped (deferred)"),
    ]
    async with live_bot(
        fake_api, tmp_path, script, allow_bash=ALLOW_CHECK, stuck=StuckLimits(monologue=1)
    ) as live:
        engine = live.engine
        sid, review = await _reviewed(fake_api, live)
        await _approve(fake_api, review)
        await until(lambda: _stalled(live, sid), timeout_s=60)
        sidecar = await engine.plans.current(sid)
        assert sidecar is not None and [t.status for t in sidecar.tasks] == ["in_progress"]

        fake_api.user_message(GROUP, OWNER, BOT + "skip it, the monitor is retired")
        first = await _asked(fake_api, 1)
        assert "Allow plan skip?" in first.text
        assert "skip task 1 (Fix health) without its checks" in first.text and CHECK in first.text
        assert labels(first) == ["✅ Allow once", "⛔ Deny"]
        assert await _press(fake_api, first, "⛔ Deny") == "Denied."
        second = await _asked(fake_api, 2)
        sidecar = await engine.plans.current(sid)
        assert sidecar is not None and [t.status for t in sidecar.tasks] == ["in_progress"]
        assert await _press(fake_api, second, "✅ Allow once") == "Allowed once."
        await until(lambda: _plan_none(live, sid), timeout_s=60)
        await settle(engine, sid, timeout_s=60)
        await parts(live.app).presenter.flush()
        done = fake_api.message(GROUP, review.message_id)
        decided = await live.storage.log.read(sid, types=("approval/decided",))
    assert [s.event.decision for s in decided if isinstance(s.event, ApprovalDecided)] == [
        "deny",
        "once",
    ]
    assert f"⏭ {CHECK} skipped · task 1" in done.text
    task = _archived(live)["tasks"][0]
    assert task["status"] == "deferred" and task["check_results"] == []


async def _stalled(live: Live, sid: str) -> bool:
    return live.engine.agents.is_idle(sid) and (await live.engine.plan_card(sid)).state == "paused"


def _approvals(api: FakeBotApi) -> list[FakeMessage]:
    return [m for m in api.bot_messages(GROUP) if m.text.startswith("🔐")]


async def _asked(api: FakeBotApi, count: int) -> FakeMessage:
    await eventually(lambda: len(_approvals(api)) >= count)
    return _approvals(api)[count - 1]


async def _press(api: FakeBotApi, msg: FakeMessage, label: str) -> str:
    qid = api.press(GROUP, msg.message_id, button(msg, label), user_id=OWNER)
    await eventually(lambda: qid in api.callback_answers)
    return str(api.callback_answers[qid]["text"] or "")


async def test_a_goal_with_a_check_stays_active_until_the_check_passes(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    make_project(tmp_path / "work")
    async with live_bot(fake_api, tmp_path, goal_script(), allow_bash=ALLOW_CHECK) as live:
        engine = live.engine
        fake_api.user_message(GROUP, OWNER, f'/goal make the health test pass --check "{CHECK}"')
        await eventually(lambda: len(fake_api.bot_messages(GROUP)) >= 1)
        sid = await engine.session_for_chat(chat(GROUP))

        async def failed_once() -> bool:
            last = await engine.goals.last_check(sid)
            return last is not None and not last.passed

        await until(failed_once, timeout_s=60)
        goal = await engine.goals.get(sid)
        assert goal is not None and goal.phase == "active"  # the claim did not stand

        async def complete() -> bool:
            goal = await engine.goals.get(sid)
            return goal is not None and goal.phase == "complete"

        await until(complete, timeout_s=90)
        await settle(engine, sid, timeout_s=60)
        await parts(live.app).presenter.flush()
        data = await engine.goal_card(sid)
        events = [s.event for s in await live.storage.log.read(sid)]
        goal_cards = [m for m in fake_api.bot_messages(GROUP) if m.text.startswith("🎯")]
    assert [e.passed for e in events if isinstance(e, GoalCheck)] == [False, True]
    rounds = [
        e for e in events if isinstance(e, UserMessage) and isinstance(e.source, GoalRoundSource)
    ]
    assert len(rounds) == 2 and "AssertionError" in rounds[1].text
    assert data.last_check is not None and data.last_check.passed
    # The goal card showed the failed run, then the passing one.
    [goal_card] = goal_cards
    assert any("❌ Checks failed" in t for t in goal_card.edits)
    assert f"🧪 Checks: {CHECK}" in goal_card.text and "✅ Checks passed" in goal_card.text


async def test_a_fifo_made_by_noplan_bash_never_wedges_a_later_approve(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    """A FIFO named like a test, made by one NoPlan bash call (real bubblewrap), once made
    the checks' watch block for good at the next Approve: the plan runs to Done."""
    make_project(tmp_path / "work")
    noplan = [
        call("bash", {"command": "mkfifo test_fifo && ls -l test_fifo"}, expect="test_fifo"),
        say("Made a pipe."),
    ]
    script = [*noplan, *PLANNING, *execution()]
    async with live_bot(fake_api, tmp_path, script, allow_bash=ALLOW_CHECK) as live:
        fake_api.user_message(GROUP, OWNER, BOT + "make a pipe named test_fifo")
        await eventually(
            lambda: any(m.text.startswith("Made a pipe") for m in fake_api.bot_messages(GROUP))
        )
        assert (live.workspace / "test_fifo").is_fifo()
        sid, review = await _reviewed(fake_api, live)
        await _approve(fake_api, review)
        await until(lambda: _plan_none(live, sid), timeout_s=90)
        await settle(live.engine, sid, timeout_s=60)
        await parts(live.app).presenter.flush()
        done = fake_api.message(GROUP, review.message_id)
    assert "Done" in done.text
    assert f"✅ {CHECK} exit 0 in " in done.text
