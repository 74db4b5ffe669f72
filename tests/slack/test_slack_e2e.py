"""End to end on Slack: the real engine, real SQLite and files, the scripted model, the real
slack_bolt app over Socket Mode against the fake Slack.

A channel: the owner's ``/plangate plan``, the review card (Block Kit), a stranger's Approve
refused, the owner's Approve, the checklist ticking on the same message to Done.
"""

from __future__ import annotations

from pathlib import Path

from bot.slack import keys
from engine.api import PLAN_APPROVE
from tests.engine.helpers import EXECUTION, GREET_PY, PLANNING, settle
from tests.fakeslack.server import FakeSlack
from tests.slack.live import CHANNEL, GROUP, OWNER, STRANGER, card, labels, live_slack, until


async def test_plan_review_refused_press_approve_run_to_done(
    slack: FakeSlack, tmp_path: Path
) -> None:
    slack.channel(CHANNEL)
    async with live_slack(slack, tmp_path, [*PLANNING, *EXECUTION]) as live:
        engine = live.engine
        ack = await slack.slash(CHANNEL, OWNER, "plan Add a greeting module")
        assert ack.after_s < 3.0
        await until(lambda: len(slack.bot_messages(CHANNEL)) >= 1)
        sid = await engine.session_for_chat(keys.engine_chat(GROUP))
        await settle(engine, sid)
        await live.front.drain()

        review = await card(live, sid)
        assert labels(review) == ["✅ Approve", "✏️ Keep planning", "🗑 Discard"]
        assert "Greeting module" in str(review.blocks) and "review" in str(review.blocks).lower()
        value = review.buttons()[0][2]
        assert value.startswith(f"p:{PLAN_APPROVE}:")

        # A stranger's Approve: said to them alone, nothing changes.
        await slack.press(CHANNEL, review.ts, STRANGER, "✅ Approve")
        await until(lambda: any(u == STRANGER for u, _ in slack.channel(CHANNEL).ephemeral))
        assert await engine.plans.state(sid) == "post_init"
        assert labels(slack.message(CHANNEL, review.ts)) == labels(review)

        # The owner's Approve: the checklist runs to the end on the same message.
        await slack.press(CHANNEL, review.ts, OWNER, "✅ Approve")
        await until(lambda: (live.workspace / "test_greet.py").exists())
        await settle(engine, sid)
        await live.front.drain()
        assert await engine.plans.state(sid) == "none"
        done = slack.message(CHANNEL, review.ts)
        shown = str(done.blocks)
        assert "Done" in shown and "2/2" in shown and done.buttons() == []
        assert done.edits >= 2
        assert len([m for m in slack.bot_messages(CHANNEL) if m.buttons() or m.blocks]) == 1
        assert (live.workspace / "greet.py").read_text() == GREET_PY
        data = await engine.plan_card(sid)
        assert data.sidecar is not None and data.sidecar.flow.card_id == review.ts
    assert all(a.after_s < 3.0 for a in slack.acks)
