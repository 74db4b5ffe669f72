"""Webhook ingress among replicas, in one process: two real ``serve()`` on two ports share one
PostgreSQL inbox (and one lease table); updates POSTed to either are stored before the 200,
each processed once, by the chat's one owner, in order."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

from bot.telegram.app import serve
from bot.telegram.ingress import SHARED_SECRET_KEY, Replicas
from bot.telegram.routes import GROUPS_KEY
from engine.api import RestoredGoal
from engine.keys import ChatKey
from engine.leases import LocalChatLeases
from storage.postgres.db import PgDatabase
from storage.postgres.inbox import PgUpdateInbox
from tests.fakebot.server import FakeBotApi
from tests.telegram.app_support import OWNER, RecordingEngine, eventually
from tests.telegram.test_app_webhook import HOOK_URL, SECRET, free_port, listening, webhook_settings


class ReplicaEngine(RecordingEngine):
    """The recording engine, told of chats taken and lost as the real one is."""

    async def chat_taken(self, chat: ChatKey) -> list[RestoredGoal]:
        self.calls.append(_call("chat_taken", chat))
        return TAKEN.pop(chat, [])

    async def chat_lost(self, chat: ChatKey) -> None:
        self.calls.append(_call("chat_lost", chat))


def _call(name: str, *args: Any) -> Any:
    from tests.telegram.app_support import Call

    return Call(name, args)


# The lease tables the rigs made, for the checks after a clean stop.
LEASES: list[LocalChatLeases] = []
# What chat_taken finds paused in a chat (a goal that came up disarmed), once.
TAKEN: dict[ChatKey, list[RestoredGoal]] = {}


@asynccontextmanager
async def replicas(
    api: FakeBotApi,
    dsn: str,
    n: int = 2,
    *,
    engine: ReplicaEngine | None = None,
    leases: LocalChatLeases | None = None,
    ttls: tuple[float, ...] = (),
    **settings: Any,
) -> AsyncIterator[list[tuple[str, ReplicaEngine, PgDatabase]]]:
    """``n`` replicas serving; yields (proxy origin, engine, database) for each. ``engine``:
    the first replica's (a restart keeps what it knew)."""
    leases = leases or LocalChatLeases()
    LEASES.append(leases)
    stop = asyncio.Event()
    async with AsyncExitStack() as stack:
        out: list[tuple[str, ReplicaEngine, PgDatabase]] = []
        tasks = []
        for i in range(n):
            db = await stack.enter_async_context(await PgDatabase.open(dsn))
            mine = engine if engine is not None and i == 0 else ReplicaEngine()
            port = free_port()
            ttl = ttls[i] if i < len(ttls) else 30.0
            parts = Replicas(PgUpdateInbox(db), leases, replica=f"r{i}", ttl_s=ttl, poll_s=0.1)
            config = webhook_settings(api, port, **settings)
            tasks.append(asyncio.create_task(serve(config, mine, db, stop=stop, replicas=parts)))
            await listening("127.0.0.1", port)
            out.append((f"http://127.0.0.1:{port}", mine, db))
        try:
            yield out
        finally:
            stop.set()
            await asyncio.wait_for(asyncio.gather(*tasks), 20)


async def _stored(db: PgDatabase) -> int:
    return int(await db.pool.fetchval("SELECT count(*) FROM update_inbox"))


async def test_updates_posted_to_either_replica_are_stored_then_processed_once_in_order(
    fake_api: FakeBotApi, tmp_path: Path, pg_dsn: str
) -> None:
    chats = [-1001, -1002, -1003, OWNER]
    rng = random.Random(7)
    async with replicas(fake_api, pg_dsn, allowed_chat_ids=frozenset(chats)) as reps:
        db = reps[0][2]
        sent: dict[int, list[str]] = {c: [] for c in chats}
        for i in range(24):
            chat = chats[i % len(chats)]
            text = f"m{i}"
            # In a group the agent hears what is addressed to the bot.
            fake_api.user_message(chat, OWNER, f"@{fake_api.username} {text}")
            sent[chat].append(text)
            proxy = rng.choice(reps)[0]
            assert await fake_api.deliver_webhook(proxy_to=proxy) == 200
            # The 200 came after the update was stored.
            assert await _stored(db) == i + 1
        # A repeat to the other replica is stored once and never processed again.
        fake_api.user_message(chats[0], OWNER, f"@{fake_api.username} twice")
        sent[chats[0]].append("twice")
        update = fake_api.pending()[0]
        assert await fake_api.deliver_webhook(update, proxy_to=reps[0][0]) == 200
        assert await fake_api.deliver_webhook(update, proxy_to=reps[1][0]) == 200
        assert await _stored(db) == 25

        def by_chat(engine: ReplicaEngine) -> dict[int, list[str]]:
            chat_of = {sid: key[0] for key, sid in engine.keys.items()}
            got: dict[int, list[str]] = {}
            for call in engine.named("user_message"):
                got.setdefault(chat_of[call.args[0]], []).append(call.args[1].split()[-1])
            return got

        def heard() -> dict[int, list[str]]:
            got: dict[int, list[str]] = {c: [] for c in chats}
            for _, engine, _ in reps:
                for chat, texts in by_chat(engine).items():
                    got[chat] += texts
            return got

        await eventually(lambda: heard() == sent)
        # One owner per chat: each chat's messages all went to one replica's engine, which
        # ran the takeover first.
        for chat in chats:
            owners = [e for _, e, _ in reps if chat in by_chat(e)]
            assert len(owners) == 1
            assert [c.args[0] for c in owners[0].named("chat_taken")].count(f"tg:{chat}") == 1
        assert await PgUpdateInbox(db).pending_chats() == []
        held = [x for r in ("r0", "r1") for x in await LEASES[-1].held_by(r)]
        assert sorted(x.chat for x in held) == sorted(f"tg:{c}" for c in chats)
    # A clean stop releases every lease, after the engine's shutdown.
    for chat in chats:
        assert await LEASES[-1].holder(f"tg:{chat}") is None


async def test_a_wrong_or_missing_secret_is_refused_and_stores_nothing(
    fake_api: FakeBotApi, tmp_path: Path, pg_dsn: str
) -> None:
    async with replicas(fake_api, pg_dsn, n=1) as reps:
        proxy, engine, db = reps[0]
        fake_api.user_message(OWNER, OWNER, "forged")
        assert await fake_api.deliver_webhook(proxy_to=proxy, secret_token="wrong") == 403
        assert await fake_api.deliver_webhook(proxy_to=proxy, secret_token=None) == 403
        assert await _stored(db) == 0
        assert await fake_api.deliver_webhook(proxy_to=proxy) == 200
        await eventually(lambda: len(engine.named("user_message")) == 1)
    assert fake_api.webhook is not None and fake_api.webhook.secret_token == SECRET
    assert fake_api.webhook.url == HOOK_URL and fake_api.webhook.max_connections == 1


async def test_without_a_configured_secret_the_replicas_share_one(
    fake_api: FakeBotApi, tmp_path: Path, pg_dsn: str
) -> None:
    async with replicas(fake_api, pg_dsn, webhook_secret=None) as reps:
        shared = await reps[0][2].get_meta(SHARED_SECRET_KEY)
        assert shared and fake_api.webhook is not None
        assert fake_api.webhook.secret_token == shared
        for proxy, _, _ in reps:
            fake_api.user_message(OWNER, OWNER, f"via {proxy}")
            assert await fake_api.deliver_webhook(proxy_to=proxy) == 200
        await eventually(lambda: sum(len(e.named("user_message")) for _, e, _ in reps) == 2)


async def test_paused_goals_are_announced_by_the_replica_that_takes_the_chat_only(
    fake_api: FakeBotApi, tmp_path: Path, pg_dsn: str
) -> None:
    mine, theirs = -1001, -1002
    chats = frozenset({mine, theirs})
    async with replicas(fake_api, pg_dsn, n=1, allowed_chat_ids=chats) as reps:
        proxy, engine, _ = reps[0]
        for chat in (mine, theirs):
            fake_api.user_message(chat, OWNER, f"@{fake_api.username} hello")
            assert await fake_api.deliver_webhook(proxy_to=proxy) == 200
        await eventually(lambda: len(engine.named("user_message")) == 2)
    # A restart: both sessions' goals come up disarmed; another replica holds `theirs`.
    sessions = {chat: engine.keys[(chat, 0)] for chat in (mine, theirs)}
    restored = {
        chat: RestoredGoal(session_id=sid, goal=engine.set_goal(sid, rounds_started=1))
        for chat, sid in sessions.items()
    }
    engine.restored = list(restored.values())
    TAKEN[f"tg:{mine}"] = [restored[mine]]
    leases = LocalChatLeases()
    await leases.acquire(f"tg:{theirs}", "other", 3600)
    async with replicas(
        fake_api, pg_dsn, n=1, engine=engine, leases=leases, allowed_chat_ids=chats
    ) as reps:
        proxy, _, _ = reps[0]
        fake_api.user_message(mine, OWNER, "/status")
        assert await fake_api.deliver_webhook(proxy_to=proxy) == 200
        await fake_api.wait_for(lambda: _paused(fake_api, mine), timeout_s=30)
    assert not _paused(fake_api, theirs)
    # A replica starts the engine without recovering any chat: it loaded every chat that
    # needed attention, those other replicas hold too, whose writes the fence then refused.
    assert [call.args for call in engine.named("start")] == [(False,), (False,)]


def _paused(api: FakeBotApi, chat: int) -> bool:
    return any("Paused by the restart" in m.text for m in api.bot_messages(chat))


async def test_a_group_an_owner_added_on_one_replica_is_kept_by_the_next_owner(
    fake_api: FakeBotApi, tmp_path: Path, pg_dsn: str
) -> None:
    group, chat = -1005, "tg:-1005"
    leases = LocalChatLeases()
    await leases.acquire(chat, "r0", 3600)  # r0 will own the group first
    async with replicas(fake_api, pg_dsn, leases=leases, ttls=(1.0, 30.0)) as reps:
        (proxy0, first, db), (proxy1, second, _) = reps
        fake_api.bot_added(group, by_user_id=OWNER)
        assert await fake_api.deliver_webhook(proxy_to=proxy1) == 200
        await _until_stored(db, group)
        # The group moves to r1 (r0 finds out at its next renewal); r1's gate was loaded
        # before the owner added the group.
        await leases.release(chat, "r0")
        await leases.acquire(chat, "r1", 3600)
        await eventually(lambda: len(first.named("chat_lost")) == 1)
        fake_api.user_message(group, OWNER, f"@{fake_api.username} still here?")
        assert await fake_api.deliver_webhook(proxy_to=proxy0) == 200
        await eventually(lambda: len(second.named("user_message")) == 1)
    assert first.named("user_message") == []
    assert fake_api.count("leaveChat") == 0


async def _until_stored(db: PgDatabase, group: int) -> None:
    async def loop() -> None:
        while str(group) not in (await db.get_meta(GROUPS_KEY) or ""):
            await asyncio.sleep(0.02)

    await asyncio.wait_for(loop(), 30)
