"""The card's way from review to work, through the real Application: straight to "In progress",
never "Paused" on the way; and no goal card while only a task's criteria stand as the goal."""

from __future__ import annotations

from pathlib import Path

from bot.telegram.app import parts
from tests.engine.helpers import EXECUTION, PLANNING, settle
from tests.fakebot.server import FakeBotApi
from tests.keys import chat
from tests.telegram.app_support import OWNER, eventually
from tests.telegram.live import button, card, live_bot


async def test_approve_goes_from_review_to_in_progress_without_a_paused_card(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    async with live_bot(fake_api, tmp_path, [*PLANNING, *EXECUTION]) as live:
        engine = live.engine
        fake_api.user_message(OWNER, OWNER, "/plan Add a greeting module")
        await eventually(lambda: len(fake_api.bot_messages(OWNER)) >= 1)
        sid = await engine.session_for_chat(chat(OWNER))
        await settle(engine, sid)
        await parts(live.app).presenter.flush()
        review = await card(fake_api, live, sid, chat_id=OWNER)
        qid = fake_api.press(OWNER, review.message_id, button(review, "✅ Approve"), user_id=OWNER)
        await eventually(lambda: qid in fake_api.callback_answers)
        await eventually(lambda: (live.workspace / "test_greet.py").exists())
        await settle(engine, sid)
        await parts(live.app).presenter.flush()
        drawn = [*fake_api.message(OWNER, review.message_id).edits]
        drawn.append(fake_api.message(OWNER, review.message_id).text)
        after_review = drawn[next(i for i, t in enumerate(drawn) if "review" in t.lower()) :]
        assert any("Done" in t for t in after_review)
        assert not [t for t in after_review if "Paused" in t]
        # The started tasks' criteria were the session's task goal: never a goal card.
        assert not [m for m in fake_api.bot_messages(OWNER) if m.text.startswith("🎯")]
