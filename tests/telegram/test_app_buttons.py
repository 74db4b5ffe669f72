"""Every press gets a visible answer, through the real Application and the real engine
(docs/roles.md, "Buttons answer"): done, refused with why, or out of date.

Real git repositories made in the test, the fake Bot API on loopback with a group's pacing,
real SQLite and plan files, bash in the real bubblewrap sandbox.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from bot.telegram.app import parts
from bot.telegram.keys import tg_flow
from tests.fakebot.server import FakeBotApi
from tests.keys import chat
from tests.projects.support import RoutedProvider, git, make_repo, planning, writing
from tests.telegram.app_support import (
    GROUP,
    OWNER,
    RecordingEngine,
    eventually,
    open_db,
    running_bot,
)
from tests.telegram.live import button, labels, live_bot, until
from tests.telegram.test_app_worktrees import (
    ALPHA,
    _approve_both,
    _card,
    _done,
    _is,
    _labels_are,
    _press,
    _reviewed,
)


async def _answer(api: FakeBotApi, qid: str) -> dict[str, Any]:
    await eventually(lambda: qid in api.callback_answers)
    return api.callback_answers[qid]


async def test_the_forum_discard_after_a_merge_in_another_topic_answers_and_works(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "work", {"README.md": "hello\n"})
    model = RoutedProvider(
        {
            "Add alpha": [*planning("Alpha", "write alpha.py"), *writing({"alpha.py": "A\n"})],
            "Add beta": [*planning("Beta", "write beta.py"), *writing({"beta.py": "B\n"})],
        },
        hold="Add alpha",
    )
    async with live_bot(fake_api, tmp_path, [], model=model, group_pacing=True) as live:
        engine = live.engine
        alpha, beta = await _approve_both(fake_api, live, model)
        await until(lambda: _done(engine, alpha))
        await until(lambda: _done(engine, beta))
        await parts(live.app).presenter.flush()
        beta_card = await _card(fake_api, live, beta)
        record = await engine.worktrees.record(beta)
        assert record is not None

        # Topic A's plan is merged.
        alpha_card = await _card(fake_api, live, alpha)
        fake_api.press(GROUP, alpha_card.message_id, button(alpha_card, "🔀 Merge"), user_id=OWNER)
        await until(lambda: _is(engine, alpha, "merged"))
        assert (repo / "alpha.py").exists()

        # Topic B's Discard changes: answered in words, and the card asks to confirm.
        drop = button(beta_card, "🗑 Discard changes")
        asked = await _answer(
            fake_api, fake_api.press(GROUP, beta_card.message_id, drop, user_id=OWNER)
        )
        assert asked["text"], asked
        await until(lambda: _labels_are(fake_api, live, beta, ["Yes, discard changes", "Cancel"]))
        shown = await _card(fake_api, live, beta)
        assert shown.message_id == beta_card.message_id
        yes = button(shown, "Yes, discard changes")
        done = await _answer(fake_api, fake_api.press(GROUP, shown.message_id, yes, user_id=OWNER))
        assert done["text"], done
        await until(lambda: _is(engine, beta, "discarded"))
        assert not Path(record.path).exists()
        assert git(repo, "branch", "--list", "plangate/*") == ""
        assert not (repo / "beta.py").exists() and (repo / "alpha.py").exists()
        await until(lambda: _labels_are(fake_api, live, beta, []))


async def test_after_a_restart_the_card_says_why_the_run_stopped(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    scripts = {"Add gamma": [*planning("Gamma", "write gamma.py"), *writing({"gamma.py": "G\n"})]}
    model = RoutedProvider(scripts, hold="Add gamma")
    async with live_bot(fake_api, tmp_path, [], model=model) as live:
        sid = await _reviewed(fake_api, live, ALPHA, "Add gamma")
        await _press(fake_api, live, sid, "✅ Approve")
        # The checklist run is armed and its turn is working when plangate stops.
        await asyncio.wait_for(model.held.wait(), 20)
    async with live_bot(fake_api, tmp_path, [], model=RoutedProvider(scripts)) as live:
        engine = live.engine
        sid = await engine.session_for_chat(chat(GROUP, ALPHA))
        fake_api.user_message(GROUP, OWNER, "/show_plan", thread_id=ALPHA)

        async def says_why() -> bool:
            await parts(live.app).presenter.flush()
            data = await engine.plan_card(sid)
            if data.sidecar is None or tg_flow(data.sidecar.flow).card_id is None:
                return False
            text = fake_api.message(GROUP, tg_flow(data.sidecar.flow).card_id).text
            return "Paused by the restart" in text

        await until(says_why)
        assert labels(await _card(fake_api, live, sid))[0] == "▶️ Resume"


async def test_a_press_the_engine_fails_on_is_answered_with_the_failure(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    class Exploding(RecordingEngine):
        async def press(self, session_id, press, *, actor, message_id=None, actor_name=""):  # type: ignore[no-untyped-def]
            raise RuntimeError("boom")

    async with open_db(tmp_path / "p.db") as db, running_bot(fake_api, Exploding(), db):
        fake_api.user_message(OWNER, OWNER, "/status")
        await eventually(lambda: len(fake_api.bot_messages(OWNER)) == 1)
        shown = fake_api.bot_messages(OWNER)[0]
        qid = fake_api.press_raw(OWNER, shown.message_id, "p:approve:abcd1234:1", user_id=OWNER)
        answer = await _answer(fake_api, qid)
    assert answer == {
        "text": "⚠️ That failed (RuntimeError); the log has the details.",
        "show_alert": True,
    }
