"""Who the Slack front end works for: channels an owner invited it to (or the setting names),
owners by Slack user id, never a bot or someone of another workspace; refusals said to the
sender alone within the answer budget; every envelope acknowledged at once; the Events API's
retries handled once."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from bot.slack import keys
from bot.slack.app import ALLOWED_KEY, SlackConfig, SlackFrontEnd, serve_http
from engine.model.script import say
from tests.fakeslack.server import FakeSlack
from tests.slack.live import APPROVER, CHANNEL, DM, GROUP, OWNER, STRANGER, live_slack, until

OTHER = "C0OTHER1"


async def test_invited_by_an_owner_it_stays_by_anyone_else_it_leaves(
    slack: FakeSlack, tmp_path: Path
) -> None:
    slack.channel(OTHER)
    slack.channel("C0ELSE01")
    async with live_slack(slack, tmp_path, [say("Hello.")], allowed_channels=()) as live:
        await slack.member_joined(OTHER, slack.bot_user, inviter=OWNER)
        await slack.member_joined("C0ELSE01", slack.bot_user, inviter=STRANGER)
        await until(lambda: slack.count("conversations.leave") == 1)
        await live.front.drain()
        left = [c.params["channel"] for c in slack.calls if c.method == "conversations.leave"]
        assert left == ["C0ELSE01"]
        assert await live.storage.db.get_meta(ALLOWED_KEY) == f'["{OTHER}"]'
        # Where it stays, the owner is heard.
        await slack.mention(OTHER, OWNER, "hi")
        await until(lambda: any(m.text == "Hello." for m in slack.bot_messages(OTHER)))
        # A channel nobody allowed: the bot leaves instead of answering.
        slack.channel("C0STRAY1")
        await slack.mention("C0STRAY1", OWNER, "status")
        await until(lambda: slack.count("conversations.leave") == 2)
        assert slack.bot_messages("C0STRAY1") == []


async def test_strangers_bots_and_other_workspaces_are_never_owners(
    slack: FakeSlack, tmp_path: Path
) -> None:
    slack.channel(CHANNEL)
    slack.channel(DM, im=True)
    # Someone of another organisation (Slack Connect) whose id is an owner's is not one.
    slack.user(OWNER)
    slack.users[OWNER]["team_id"] = "T99"
    async with live_slack(slack, tmp_path, []) as live:
        await slack.slash(CHANNEL, OWNER, "plan take over")
        await slack.slash(CHANNEL, STRANGER, "discard")
        await until(lambda: len(slack.channel(CHANNEL).ephemeral) == 2)
        assert all("member" in text for _, text in slack.channel(CHANNEL).ephemeral)
        assert "/plangate show-plan" in slack.channel(CHANNEL).ephemeral[0][1]
        # A bot's message in a DM is not heard at all.
        await slack.event(
            {
                "type": "message",
                "channel": DM,
                "user": "U0OTHERBOT",
                "bot_id": "B9",
                "text": "run rm -rf",
                "ts": "1.000001",
                "channel_type": "im",
            }
        )
        await live.front.drain()
        assert slack.bot_messages(CHANNEL) == [] and slack.bot_messages(DM) == []
        # A flood of strangers: refusals stop at the chat's budget (three a minute).
        for i in range(8):
            await slack.slash(CHANNEL, f"U0CROWD{i}", "execute")
        await live.front.drain()
        assert len(slack.channel(CHANNEL).ephemeral) == 3
        assert live.front.budget.dropped >= 7
    assert all(a.after_s < 3.0 for a in slack.acks)


async def test_events_over_http_are_signed_and_a_retry_is_handled_once(
    slack: FakeSlack, tmp_path: Path
) -> None:
    slack.channel(DM, im=True)
    async with live_slack(slack, tmp_path, [say("Once.")]) as live:
        front = SlackFrontEnd(
            live.engine,
            live.storage.db,
            SlackConfig(
                bot_token=slack.bot_token,
                signing_secret=slack.signing_secret,
                api_url=slack.api_url,
                owner_ids=(OWNER,),
                interval_s=0.0,
            ),
        )
        await front.start()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        stop = asyncio.Event()
        serving = asyncio.create_task(serve_http(front, stop, host="127.0.0.1", port=port))
        try:
            slack.events_url = f"http://127.0.0.1:{port}/slack/events"
            for _ in range(100):
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=1):
                        break
                except OSError:
                    await asyncio.sleep(0.02)
            event = {
                "type": "message",
                "channel": DM,
                "user": OWNER,
                "text": "say it once",
                "ts": "1700000100.000001",
                "channel_type": "im",
                "team": slack.team,
            }
            slack.user(OWNER)
            payload = {
                "token": "verification",
                "team_id": slack.team,
                "api_app_id": "A01",
                "event": event,
                "type": "event_callback",
                "event_id": "EvRETRY1",
                "event_time": 1,
            }
            await slack.post_event(payload)
            await slack.post_event(payload, retry_num=1)
            # A forged request (a wrong signature) is refused.
            slack.signing_secret, real = "wrong", slack.signing_secret
            await slack.post_event(payload | {"event_id": "EvFORGED"})
            slack.signing_secret = real
            sid = await live.engine.session_for_chat(keys.engine_chat(keys.chat_key(DM)))
            await until(lambda: any(m.text.startswith("Once.") for m in slack.bot_messages(DM)))
            await front.drain()
            stored = await live.storage.log.read(sid, types=("user/message",))
            assert len(stored) == 1
        finally:
            stop.set()
            await serving
            await front.aclose()
    assert [status for _, status in slack.http_deliveries] == [200, 200, 401]


async def test_the_owner_names_an_approver_by_mention_and_their_press_is_an_approvers(
    slack: FakeSlack, tmp_path: Path
) -> None:
    slack.channel(CHANNEL)
    slack.user(APPROVER, "Ada")
    async with live_slack(slack, tmp_path, []) as live:
        await slack.slash(CHANNEL, OWNER, f"team add <@{APPROVER}> approver")
        await until(lambda: len(slack.bot_messages(CHANNEL)) == 1)
        await live.front.drain()
        role = await live.engine.role_of(keys.chat_ref(GROUP), keys.person_key(APPROVER))
        assert role == "approver"
        await slack.slash(CHANNEL, OWNER, "team")
        await until(lambda: len(slack.bot_messages(CHANNEL)) == 2)
        assert "Ada" in slack.bot_messages(CHANNEL)[-1].text
