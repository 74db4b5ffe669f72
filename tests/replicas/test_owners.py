"""The owner loop (bot/owners.py) on a real PostgreSQL inbox: two replicas' loops share the
chats, each chat's updates are processed by one of them, in order, once; a lease that lapses
moves the chat, and the replica that lost it stops and is told."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from bot.owners import ChatOwners
from engine.keys import ChatKey
from engine.leases import LocalChatLeases
from engine.ports import Lease
from storage.postgres.db import PgDatabase
from storage.postgres.inbox import InboxUpdate, PgUpdateInbox


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Replica:
    """One replica's loop with a record of what it did."""

    def __init__(self, name: str, inbox: PgUpdateInbox, leases: LocalChatLeases, clock: Clock):
        self.name = name
        self.seen: list[tuple[ChatKey, int]] = []
        self.events: list[tuple[str, ChatKey]] = []
        self.gate: asyncio.Event | None = None
        self.owners = ChatOwners(
            inbox,
            leases,
            replica=name,
            ttl_s=30.0,
            process=self.process,
            on_taken=self.taken,
            on_lost=self.lost,
            clock=clock,
        )

    async def process(self, item: InboxUpdate) -> None:
        if self.gate is not None:
            await self.gate.wait()
        self.seen.append((item.chat, item.ord))

    async def taken(self, chat: ChatKey) -> None:
        # The takeover recovery runs before any of the chat's updates.
        assert all(c != chat for c, _ in self.seen[len(self.seen) :])
        self.events.append(("taken", chat))

    async def lost(self, chat: ChatKey) -> None:
        self.events.append(("lost", chat))


@asynccontextmanager
async def two_replicas(dsn: str) -> AsyncIterator[tuple[PgUpdateInbox, Replica, Replica, Clock]]:
    clock = Clock()
    leases = LocalChatLeases(clock=clock)
    async with await PgDatabase.open(dsn) as one, await PgDatabase.open(dsn) as two:
        a = Replica("a", PgUpdateInbox(one), leases, clock)
        b = Replica("b", PgUpdateInbox(two), leases, clock)
        yield PgUpdateInbox(one), a, b, clock


async def put(inbox: PgUpdateInbox, uid: int, chat: ChatKey) -> None:
    payload = json.dumps({"update_id": uid})
    assert await inbox.put("telegram", str(uid), chat, payload, ord=uid)


async def settle(*replicas: Replica) -> None:
    for r in replicas:
        await r.owners.round()
    for r in replicas:
        await asyncio.wait_for(r.owners.idle(), 10)


async def test_each_chat_is_processed_by_one_replica_in_order_once(pg_dsn: str) -> None:
    async with two_replicas(pg_dsn) as (inbox, a, b, _clock):
        chats = [f"tg:-{n}" for n in range(1, 7)]
        uid = 0
        for _ in range(4):
            for chat in chats:
                uid += 1
                await put(inbox, uid, chat)
            # The replicas' rounds interleave with arrivals.
            await settle(a, b) if uid % 2 else await settle(b, a)
        await settle(a, b)
        assert await inbox.pending_chats() == []
        every = a.seen + b.seen
        assert sorted(o for _, o in every) == list(range(1, uid + 1))
        for chat in chats:
            by = {r.name for r in (a, b) for c, _ in r.seen if c == chat}
            assert len(by) == 1, chat
            orders = [o for c, o in every if c == chat]
            assert orders == sorted(orders)
        assert {c for _, c in a.events} | {c for _, c in b.events} == set(chats)
        assert all(kind == "taken" for r in (a, b) for kind, _ in r.events)


async def test_a_lapsed_lease_moves_the_chat_and_the_old_owner_stops(pg_dsn: str) -> None:
    async with two_replicas(pg_dsn) as (inbox, a, b, clock):
        await put(inbox, 1, "tg:-1")
        await settle(a)
        assert a.seen == [("tg:-1", 1)] and a.events == [("taken", "tg:-1")]
        # a is held up (a long pause) while its next update is processed.
        a.gate = asyncio.Event()
        await put(inbox, 2, "tg:-1")
        await a.owners.round()
        # b cannot take it while a's lease lives, and a renews it well inside its lifetime.
        clock.now += 20
        await b.owners.round()
        assert b.events == []
        await a.owners.round()  # renewed (20 s > 30 s / 3)
        clock.now += 20
        await b.owners.round()
        assert b.events == []
        # Now a stops renewing; past the lifetime b takes the chat and processes update 2.
        clock.now += 31
        await settle(b)
        assert b.events == [("taken", "tg:-1")] and b.seen == [("tg:-1", 2)]
        # a's next round finds its lease gone: told, and its stuck update is never marked.
        await a.owners.round()
        assert a.events[-1] == ("lost", "tg:-1")
        assert "tg:-1" not in a.owners.held
        a.gate.set()
        await asyncio.wait_for(a.owners.idle(), 10)
        assert a.seen == [("tg:-1", 1)]
        await put(inbox, 3, "tg:-1")
        await settle(a, b)
        assert b.seen == [("tg:-1", 2), ("tg:-1", 3)] and a.seen == [("tg:-1", 1)]


async def test_a_replica_restarted_under_its_name_takes_back_the_chats_it_let_lapse(
    pg_dsn: str,
) -> None:
    async with two_replicas(pg_dsn) as (inbox, a, _b, clock):
        await put(inbox, 1, "tg:-1")
        await settle(a)
        assert a.events == [("taken", "tg:-1")]
        # a dies (SIGKILL: nothing released) and comes back under the same PLANGATE_REPLICA_ID;
        # its chat has no update waiting, but a run of it was cut off and must be recovered.
        again = Replica("a", inbox, a.owners.leases, clock)  # type: ignore[arg-type]
        clock.now += 31
        await settle(again)
        assert again.events == [("taken", "tg:-1")]
        assert "tg:-1" in again.owners.held


class BusyLeases(LocalChatLeases):
    """The in-memory leases, whose acquire can answer "held" while the row is locked by the
    holder's own write in flight (PostgreSQL's lock timeout), as PgChatLeases does."""

    def __init__(self, clock: Clock) -> None:
        super().__init__(clock=clock)
        self.busy = False

    async def acquire(self, chat: ChatKey, replica: str, ttl_s: float) -> Lease | None:
        if self.busy:
            return None
        return await super().acquire(chat, replica, ttl_s)


async def test_a_renewal_that_waits_on_the_replicas_own_write_loses_nothing(
    pg_dsn: str,
) -> None:
    clock = Clock()
    leases = BusyLeases(clock)
    async with await PgDatabase.open(pg_dsn) as db:
        inbox = PgUpdateInbox(db)
        a = Replica("a", inbox, leases, clock)
        await put(inbox, 1, "tg:-1")
        await settle(a)
        leases.busy = True
        clock.now += 11
        await a.owners.round()
        assert a.events == [("taken", "tg:-1")]  # not lost
        assert "tg:-1" in a.owners.held
        leases.busy = False
        clock.now += 1
        await a.owners.round()
        held = await leases.holder("tg:-1")
        assert held is not None and (held.replica, held.epoch) == ("a", 1)
        assert held.expires_at == clock.now + 30


class AwayLeases(LocalChatLeases):
    """Leases behind a database that stops answering (a network partition)."""

    def __init__(self, clock: Clock) -> None:
        super().__init__(clock=clock)
        self.away = False

    async def acquire(self, chat: ChatKey, replica: str, ttl_s: float) -> Lease | None:
        if self.away:
            raise ConnectionRefusedError("the database is away")
        return await super().acquire(chat, replica, ttl_s)

    async def holder(self, chat: ChatKey) -> Lease | None:
        if self.away:
            raise ConnectionRefusedError("the database is away")
        return await super().holder(chat)


async def test_a_lease_not_renewed_within_its_lifetime_is_lost_even_without_the_database(
    pg_dsn: str,
) -> None:
    # Cut off from the database, the replica cannot hear that another took its chat; once the
    # lease's lifetime has passed since its last renewal another may have, so the chat's work
    # (its sandbox processes, its goal) stops here.
    clock = Clock()
    leases = AwayLeases(clock)
    async with await PgDatabase.open(pg_dsn) as db:
        inbox = PgUpdateInbox(db)
        a = Replica("a", inbox, leases, clock)
        await put(inbox, 1, "tg:-1")
        await settle(a)
        leases.away = True
        clock.now += 11
        with contextlib.suppress(ConnectionRefusedError):
            await a.owners.round()
        assert a.events == [("taken", "tg:-1")]  # within the lifetime: still held
        clock.now += 20
        with contextlib.suppress(ConnectionRefusedError):
            await a.owners.round()
        assert a.events == [("taken", "tg:-1"), ("lost", "tg:-1")]
        assert "tg:-1" not in a.owners.held
        # The database back: the lapsed chat is taken again at a new epoch, recovered first.
        leases.away = False
        await settle(a)
        assert a.events[-1] == ("taken", "tg:-1")
        held = await leases.holder("tg:-1")
        assert held is not None and (held.replica, held.epoch) == ("a", 2)
