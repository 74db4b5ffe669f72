"""Slack's Events API among replicas: two replicas (each the real engine over one PostgreSQL,
fenced by its chat leases, and the real bolt app) behind the fake Slack; events POSTed to
either are stored before the 200, dispatched once by the conversation's one owner, and a
request with a bad signature is stored nowhere."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import aiohttp

from bot.channels import ChannelQueue
from bot.compose import open_plangate
from bot.slack import keys
from bot.slack.app import SlackConfig, SlackFrontEnd, serve_slack
from bot.slack.render import SLACK_LIMITS
from bot.telegram.ingress import Replicas
from engine.app import EngineConfig
from engine.model.script import say
from engine.model.scripted import ScriptedProvider
from storage.postgres.inbox import PgUpdateInbox
from tests.fakeslack.server import FakeSlack
from tests.replicas.live import free_port

OWNER = "U0OWNER1"
DM = "D0OWNER1"


@asynccontextmanager
async def slack_replicas(
    slack: FakeSlack, tmp_path: Path, dsn: str, *, ttls: tuple[float, float] = (30.0, 30.0)
) -> AsyncIterator[list[tuple[str, Replicas]]]:
    """Two replicas serving the Events API; yields (events URL, parts) for each."""
    stop = asyncio.Event()
    workspace = tmp_path / "work"
    workspace.mkdir(exist_ok=True)
    config = EngineConfig(workspace=workspace, owner_ids=frozenset({keys.person_key(OWNER)}))
    tasks: list[asyncio.Task[None]] = []
    delivering: list[asyncio.Task[None]] = []
    out: list[tuple[str, Replicas]] = []
    async with AsyncExitStack() as stack:
        for name, ttl in zip(("s0", "s1"), ttls, strict=True):
            slot = ChannelQueue(SLACK_LIMITS)
            opened = await stack.enter_async_context(
                open_plangate(
                    tmp_path / "home",
                    model=ScriptedProvider([say("Hi.")] * 20),
                    channel=slot,
                    config=config,
                    database_url=dsn,
                    replica=name,
                )
            )
            front = SlackFrontEnd(
                opened.engine,
                opened.storage.db,
                SlackConfig(
                    bot_token=slack.bot_token,
                    signing_secret=slack.signing_secret,
                    api_url=slack.api_url,
                    owner_ids=(OWNER,),
                    interval_s=0.0,
                    replayed=True,
                ),
            )
            delivering.append(asyncio.create_task(slot.deliver(front.channel)))
            db = opened.storage.db
            assert not isinstance(db, type(None))
            parts = Replicas(
                PgUpdateInbox(db, fenced=True),  # type: ignore[arg-type]
                opened.storage.leases,
                replica=name,
                ttl_s=ttl,
                poll_s=0.1,
            )
            port = free_port()
            tasks.append(
                asyncio.create_task(
                    serve_slack(
                        front,
                        opened.engine,
                        stop=stop,
                        listen=("127.0.0.1", port),
                        replicas=parts,
                    )
                )
            )
            await _accepting(port)
            out.append((f"http://127.0.0.1:{port}/slack/events", parts))
        try:
            yield out
        finally:
            stop.set()
            await asyncio.wait_for(asyncio.gather(*tasks), 30)
            for task in delivering:
                task.cancel()


async def _accepting(port: int) -> None:
    async def loop() -> None:
        while True:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.02)
                continue
            writer.close()
            return

    await asyncio.wait_for(loop(), 10)


async def _until(check: object, timeout_s: float = 30.0) -> None:
    async def loop() -> None:
        while not check():  # type: ignore[operator]
            await asyncio.sleep(0.02)

    await asyncio.wait_for(loop(), timeout_s)


def _answers(slack: FakeSlack) -> list[str]:
    return [m.text for m in slack.bot_messages(DM)]


async def test_events_posted_to_either_replica_are_handled_once_by_one_owner(
    tmp_path: Path, pg_dsn: str
) -> None:
    slack = FakeSlack()
    await slack.start()
    slack.channel(DM, im=True)
    try:
        async with slack_replicas(slack, tmp_path, pg_dsn) as reps:
            sent = 0
            for i in range(4):
                slack.events_url = reps[i % 2][0]
                await slack.user_message(DM, OWNER, "status")
                sent += 1
            # Slack repeats an event it saw no quick answer to: to the other replica, here.
            event_id = slack.http_deliveries[-1][0]
            slack.events_url = reps[0][0]
            payload = {
                "token": "verification",
                "team_id": slack.team,
                "api_app_id": "A01",
                "event": {"type": "message", "channel": DM, "user": OWNER, "text": "status",
                          "ts": "1.000001", "channel_type": "im", "team": slack.team},
                "type": "event_callback",
                "event_id": event_id,
                "event_time": 1,
            }  # fmt: skip
            await slack.post_event(payload, retry_num=1)
            assert all(status == 200 for _, status in slack.http_deliveries)
            await _until(lambda: len(_answers(slack)) >= sent)
            # A forged request (no valid signature) is refused and stored nowhere.
            body = json.dumps(payload | {"event_id": "EvFORGED"}).encode()
            stamp = str(int(time.time()))
            bad = (
                "v0="
                + hmac.new(b"wrong", f"v0:{stamp}:".encode() + body, hashlib.sha256).hexdigest()
            )
            async with (
                aiohttp.ClientSession() as session,
                session.post(
                    reps[1][0],
                    data=body,
                    headers={
                        "Content-Type": "application/json",
                        "X-Slack-Request-Timestamp": stamp,
                        "X-Slack-Signature": bad,
                    },
                ) as response,
            ):
                assert response.status == 401
            inbox = reps[0][1].inbox
            await _until_done(inbox)
            rows = await inbox._db.pool.fetch(  # noqa: SLF001
                "SELECT update_id, chat, done_by FROM update_inbox WHERE source = 'slack'"
            )
    finally:
        with contextlib.suppress(Exception):
            await slack.stop()
    # Four events stored once each (the repeat too), all done by one owner of the DM.
    assert len(rows) == sent
    assert "EvFORGED" not in {r["update_id"] for r in rows}
    assert len({r["done_by"] for r in rows}) == 1
    assert {r["chat"] for r in rows} == {keys.chat_ref(keys.chat_key(DM))}
    assert len(_answers(slack)) == sent


async def _until_done(inbox: PgUpdateInbox) -> None:
    async def loop() -> None:
        while await inbox.pending_chats("slack"):
            await asyncio.sleep(0.02)

    await asyncio.wait_for(loop(), 30)


async def test_a_channel_an_owner_invited_on_one_replica_is_kept_by_the_next_owner(
    tmp_path: Path, pg_dsn: str
) -> None:
    channel = "C0SHARED"
    chat = keys.chat_ref(keys.chat_key(channel))
    slack = FakeSlack()
    await slack.start()
    try:
        async with slack_replicas(slack, tmp_path, pg_dsn, ttls=(1.0, 30.0)) as reps:
            inbox = reps[0][1].inbox
            db = inbox._db  # noqa: SLF001
            # s0 owns the channel when an owner invites the bot.
            lease = await reps[0][1].leases.acquire(chat, "s0", 30.0)
            assert lease is not None
            slack.events_url = reps[1][0]
            await slack.member_joined(channel, slack.bot_user, inviter=OWNER)
            await _until_done(inbox)
            assert channel in (await db.get_meta("slack.channels") or "")
            # The channel moves to s1, whose list was read before the invitation.
            await db.pool.execute(
                "UPDATE chat_leases SET replica = 's1', epoch = epoch + 1, "
                "expires_at = extract(epoch FROM now()) + 3600 WHERE chat = $1",
                chat,
            )
            slack.events_url = reps[0][0]
            await slack.mention(channel, OWNER, "status")
            await _until_done(inbox)
            await _until(lambda: len(slack.bot_messages(channel)) >= 1)
            rows = await db.pool.fetch(
                "SELECT done_by FROM update_inbox WHERE chat = $1 ORDER BY ord", chat
            )
    finally:
        with contextlib.suppress(Exception):
            await slack.stop()
    assert [r["done_by"] for r in rows] == ["s0", "s1"]
    assert slack.count("conversations.leave") == 0
