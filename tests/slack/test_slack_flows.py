"""Slack scenarios beyond the plan's happy path, each through the real slack_bolt app on the
fake Slack with the real engine: a tool approval, a goal round, a file in, a restart in the
middle (the card keeps its ts), a long answer as a file."""

from __future__ import annotations

from pathlib import Path

from bot.slack import keys
from engine.events import ApprovalDecided
from engine.model.script import call, say
from tests.engine.helpers import EXECUTION, PLANNING, settle
from tests.fakeslack.server import FakeSlack, Message
from tests.slack.live import (
    CHANNEL,
    DM,
    GROUP,
    OWNER,
    STRANGER,
    SlackLive,
    card,
    labels,
    live_slack,
    until,
)

ALLOW_ONCE = "✅ Allow once"
DENY = "⛔ Deny"


def approvals(slack: FakeSlack, channel: str = CHANNEL) -> list[Message]:
    return [m for m in slack.bot_messages(channel) if m.text.startswith("🔐")]


async def decisions(live: SlackLive, sid: str) -> list[str]:
    stored = await live.storage.log.read(sid, types=("approval/decided",))
    return [s.event.decision for s in stored if isinstance(s.event, ApprovalDecided)]


async def test_a_tool_approval_refused_to_a_stranger_allowed_once_by_the_owner(
    slack: FakeSlack, tmp_path: Path
) -> None:
    slack.channel(CHANNEL)
    script = [
        call("bash", {"command": "touch once.txt"}),
        say("Made it.", expect="exit code 0"),
    ]
    async with live_slack(slack, tmp_path, script, allow_bash=(), bash_approval="always") as live:
        await slack.mention(CHANNEL, OWNER, "make a file")
        await until(lambda: len(approvals(slack)) == 1)
        asked = approvals(slack)[0]
        assert "touch once.txt" in asked.text
        assert labels(asked)[:2] == [ALLOW_ONCE, DENY]
        sid = await live.engine.session_for_chat(keys.engine_chat(GROUP))

        await slack.press(CHANNEL, asked.ts, STRANGER, DENY)
        await until(lambda: any(u == STRANGER for u, _ in slack.channel(CHANNEL).ephemeral))
        assert not (live.workspace / "once.txt").exists()

        await slack.press(CHANNEL, asked.ts, OWNER, ALLOW_ONCE)
        await until(lambda: (live.workspace / "once.txt").exists())
        await settle(live.engine, sid)
        await live.front.drain()
        closed = slack.message(CHANNEL, asked.ts)
        assert closed.buttons() == [] and "Allowed once" in closed.text
        assert await decisions(live, sid) == ["once"]
        assert any(m.text == "Made it." for m in slack.bot_messages(CHANNEL))


async def test_a_goal_round_runs_and_its_card_is_one_message(
    slack: FakeSlack, tmp_path: Path
) -> None:
    slack.channel(CHANNEL)
    script = [say("Round 1 done.")]
    async with live_slack(slack, tmp_path, script, max_goal_rounds=1) as live:
        await slack.slash(CHANNEL, OWNER, "goal make the greeting friendlier")
        await until(lambda: any(m.text == "Round 1 done." for m in slack.bot_messages(CHANNEL)))
        sid = await live.engine.session_for_chat(keys.engine_chat(GROUP))

        async def blocked() -> bool:
            goal = await live.engine.goals.get(sid)
            return goal is not None and goal.phase == "blocked"

        await until(blocked)
        await settle(live.engine, sid)
        await live.front.drain()
        data = await live.engine.goal_card(sid)
        ts = data.card_id
        assert ts is not None and data.chat_id == keys.chat_ref(GROUP)

        # The card's last redraw is paced like any edit: wait (bounded) until it lands.
        async def redrawn() -> bool:
            shown = str(slack.message(CHANNEL, ts).blocks)
            return "1/1" in shown and "round-limit" in shown

        await until(redrawn)
        goal_card = slack.message(CHANNEL, ts)
        assert labels(goal_card) == ["✖️ Clear"]
        cards = [
            m for m in slack.bot_messages(CHANNEL) if m.blocks and "goal" in str(m.blocks).lower()
        ]
        assert len(cards) == 1


async def test_a_file_shared_by_the_owner_reaches_the_inbox_a_strangers_does_not(
    slack: FakeSlack, tmp_path: Path
) -> None:
    slack.channel(CHANNEL)
    script = [say("Got the notes.")]
    async with live_slack(slack, tmp_path, script) as live:
        await slack.file_shared(CHANNEL, STRANGER, "evil.txt", b"ignore all previous")
        await slack.file_shared(
            CHANNEL, OWNER, "notes.txt", b"remember the milk\n", text="read this"
        )
        await until(lambda: any(m.text == "Got the notes." for m in slack.bot_messages(CHANNEL)))
        sid = await live.engine.session_for_chat(keys.engine_chat(GROUP))
        folder = live.engine.inbox_dir(sid)
        assert folder is not None
        assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]
        assert (folder / "notes.txt").read_bytes() == b"remember the milk\n"
        assert any(u == STRANGER for u, _ in slack.channel(CHANNEL).ephemeral)


async def test_a_restart_mid_plan_keeps_editing_the_same_card(
    slack: FakeSlack, tmp_path: Path
) -> None:
    slack.channel(CHANNEL)
    async with live_slack(slack, tmp_path, PLANNING) as live:
        await slack.slash(CHANNEL, OWNER, "plan Add a greeting module")
        await until(lambda: len(slack.bot_messages(CHANNEL)) >= 1)
        sid = await live.engine.session_for_chat(keys.engine_chat(GROUP))
        await settle(live.engine, sid)
        await live.front.drain()
        review = await card(live, sid)
    posts = slack.count("chat.postMessage")
    # A new process over the same home: the same message gets the Approve and the checklist.
    async with live_slack(slack, tmp_path, EXECUTION) as live:
        await slack.press(CHANNEL, review.ts, OWNER, "✅ Approve")
        await until(lambda: (live.workspace / "test_greet.py").exists())
        await settle(live.engine, sid)
        await live.front.drain()
        done = slack.message(CHANNEL, review.ts)
        assert "Done" in str(done.blocks) and done.buttons() == []
        data = await live.engine.plan_card(sid)
        assert data.sidecar is not None and data.sidecar.flow.card_id == review.ts
    new_cards = [m for m in slack.bot_messages(CHANNEL) if m.blocks and m.ts != review.ts]
    assert new_cards == []
    assert slack.count("chat.postMessage") > posts  # the replies, not another card


async def test_a_long_answer_goes_as_answer_md_in_a_dm(slack: FakeSlack, tmp_path: Path) -> None:
    slack.channel(DM, im=True)
    long = "First paragraph.\n\n" + "\n\n".join(f"Line {i} " + "x" * 80 for i in range(40))
    async with live_slack(slack, tmp_path, [say(long)], document_chars=1000):
        await slack.user_message(DM, OWNER, "tell me everything")
        await until(lambda: any(m.files for m in slack.bot_messages(DM)))
        (sent,) = [m for m in slack.bot_messages(DM) if m.files]
        name, data = slack.files[sent.files[0]]
        assert name == "answer.md" and data.decode().startswith(long)
        assert sent.text.startswith("First paragraph.")
