"""Chat leases (engine.ports.ChatLeases) against the in-memory one a SQLite home uses and the
PostgreSQL one replicas share; and the fence: a replica whose lease another took over can
neither append nor write a plan file (real PostgreSQL, two pools standing for two replicas)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from engine.errors import ConfigError, LeaseLost
from engine.keys import Chat
from engine.leases import LocalChatLeases
from engine.plan.types import PlanSidecar
from engine.ports import ChatLeases
from storage.open import open_storage
from storage.postgres.db import PgDatabase
from storage.postgres.leases import PgChatLeases
from tests.keys import chat
from tests.pg import pg_cluster, pg_dsn
from tests.storage.helpers import pg_store, says

__all__ = ["pg_cluster", "pg_dsn"]


class Clock:
    """The in-memory leases' clock, moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Leases:
    leases: ChatLeases
    # Makes every live lease lapse (a clock moved past them, or in PostgreSQL the rows' expiry
    # moved into the past: the server's clock is not ours to move).
    lapse: object


@pytest.fixture(params=["memory", "postgres"])
async def leases(request: pytest.FixtureRequest) -> AsyncIterator[Leases]:
    if request.param == "memory":
        clock = Clock()

        async def lapse_memory() -> None:
            clock.now += 10_000

        yield Leases(LocalChatLeases(clock=clock), lapse_memory)
        return
    async with pg_store(request) as db:

        async def lapse_pg() -> None:
            await db.pool.execute("UPDATE chat_leases SET expires_at = expires_at - 100000")

        yield Leases(PgChatLeases(db), lapse_pg)


async def _lapse(leases: Leases) -> None:
    await leases.lapse()  # type: ignore[operator]


async def test_a_free_chat_is_taken_at_epoch_one_and_renewed_at_the_same_epoch(
    leases: Leases,
) -> None:
    first = await leases.leases.acquire("c1", "a", 30)
    assert first is not None and (first.chat, first.replica, first.epoch) == ("c1", "a", 1)
    again = await leases.leases.acquire("c1", "a", 60)
    assert again is not None and again.epoch == 1
    assert again.expires_at > first.expires_at
    assert await leases.leases.holder("c1") == again
    assert await leases.leases.held_by("a") == [again]


async def test_another_replica_is_refused_a_live_lease_and_takes_a_lapsed_one_one_epoch_up(
    leases: Leases,
) -> None:
    await leases.leases.acquire("c1", "a", 30)
    assert await leases.leases.acquire("c1", "b", 30) is None
    await _lapse(leases)
    assert await leases.leases.holder("c1") is None
    assert await leases.leases.held_by("a") == []
    taken = await leases.leases.acquire("c1", "b", 30)
    assert taken is not None and (taken.replica, taken.epoch) == ("b", 2)
    assert await leases.leases.acquire("c1", "a", 30) is None


async def test_a_lapsed_or_released_lease_comes_back_one_epoch_up_even_to_its_holder(
    leases: Leases,
) -> None:
    await leases.leases.acquire("c1", "a", 30)
    await _lapse(leases)
    back = await leases.leases.acquire("c1", "a", 30)
    assert back is not None and back.epoch == 2
    await leases.leases.release("c1", "b")  # not the holder: nothing happens
    assert await leases.leases.holder("c1") == back
    await leases.leases.release("c1", "a")
    assert await leases.leases.holder("c1") is None
    taken = await leases.leases.acquire("c1", "b", 30)
    assert taken is not None and taken.epoch == 3


async def test_held_by_lists_only_the_replicas_own_live_leases_in_key_order(
    leases: Leases,
) -> None:
    for key in ("c3", "c1", "c2"):
        await leases.leases.acquire(key, "a", 30)
    await leases.leases.acquire("c9", "b", 30)
    assert [x.chat for x in await leases.leases.held_by("a")] == ["c1", "c2", "c3"]
    assert [x.chat for x in await leases.leases.held_by("b")] == ["c9"]


# --- the fence --------------------------------------------------------------------------------


def _sidecar(session_id: str, title: str) -> PlanSidecar:
    return PlanSidecar(id="p1", session_id=session_id, title=title)


async def _expire(dsn: str) -> None:
    async with await PgDatabase.open(dsn) as db:
        await db.pool.execute("UPDATE chat_leases SET expires_at = 0")


async def test_a_replica_whose_chat_was_taken_over_cannot_append_or_write_its_plan(
    pg_dsn: str, tmp_path: Path
) -> None:
    home = tmp_path / "shared-home"
    one = await open_storage(home, database_url=pg_dsn, replica="one")
    two = await open_storage(home, database_url=pg_dsn, replica="two")
    try:
        room = chat(-100)
        record = await one.sessions.create_session(workspace=str(tmp_path / "ws"))
        await one.sessions.bind_chat(room, record.id)
        sid = record.id
        # Before it holds the chat, replica one may not write for it.
        with pytest.raises(LeaseLost):
            await one.log.append(sid, [says("too early")])
        held = await one.leases.acquire(room.key, "one", 30)
        assert held is not None and held.epoch == 1
        await one.log.append(sid, [says("one's")])
        await one.plan_store.save(sid, _sidecar(sid, "one's plan"), md="# one\n")

        # One stalls past its lease; two takes the chat over.
        await _expire(pg_dsn)
        taken = await two.leases.acquire(room.key, "two", 30)
        assert taken is not None and taken.epoch == 2
        await two.log.append(sid, [says("two's")])
        await two.plan_store.save(sid, _sidecar(sid, "two's plan"), md="# two\n")

        # One wakes up still believing it holds epoch 1: nothing it writes lands.
        with pytest.raises(LeaseLost):
            await one.log.append(sid, [says("stale")])
        with pytest.raises(LeaseLost):
            await one.plan_store.save(sid, _sidecar(sid, "stale plan"), md="# stale\n")
        with pytest.raises(LeaseLost):
            await one.plan_store.delete(sid)
        with pytest.raises(LeaseLost):
            await one.plan_store.archive(sid, _sidecar(sid, "stale"), reason="discarded")

        assert [e.event.text for e in await two.log.read(sid)] == [  # type: ignore[union-attr]
            "one's",
            "two's",
        ]
        loaded = await two.plan_store.load(sid)
        assert loaded.sidecar is not None and loaded.sidecar.title == "two's plan"
        assert await two.plan_store.read_md(sid) == "# two\n"
        # The log stays dense: the refused append took no seq.
        stored = await two.log.append(sid, [says("next")])
        assert stored[0].seq == 3
    finally:
        await one.close()
        await two.close()


async def test_a_threads_writes_are_fenced_by_its_parents_lease_and_a_fork_by_none(
    pg_dsn: str, tmp_path: Path
) -> None:
    home = tmp_path / "shared-home"
    one = await open_storage(home, database_url=pg_dsn, replica="one")
    two = await open_storage(home, database_url=pg_dsn, replica="two")
    try:
        group = chat(-200)
        topic = Chat.thread(chat(-200, 7).key, group.key)
        record = await one.sessions.create_session(workspace=str(tmp_path / "ws"))
        await one.sessions.bind_chat(topic, record.id)
        assert await one.leases.acquire(group.key, "one", 30) is not None
        await one.log.append(record.id, [says("in the topic")])
        with pytest.raises(LeaseLost):
            await two.log.append(record.id, [says("not two's")])
        fork = await one.sessions.fork(record.id)
        # A fork is bound to no chat: no lease fences it.
        await two.log.append(fork.id, [says("a fork's")])
    finally:
        await one.close()
        await two.close()


async def test_without_a_replica_name_postgres_writes_unfenced_as_one_process_does(
    pg_dsn: str, tmp_path: Path
) -> None:
    storage = await open_storage(tmp_path / "home", database_url=pg_dsn)
    try:
        record = await storage.sessions.create_session(workspace=str(tmp_path / "ws"))
        await storage.sessions.bind_chat(chat(5), record.id)
        await storage.log.append(record.id, [says("no leases asked for")])
        assert storage.fence is None
    finally:
        await storage.close()


async def test_a_sqlite_home_holds_its_chats_in_memory_with_the_same_rules(
    tmp_path: Path,
) -> None:
    storage = await open_storage(tmp_path / "home")
    try:
        lease = await storage.leases.acquire("c1", "only", 30)
        assert lease is not None and lease.epoch == 1
        assert await storage.leases.held_by("only") == [lease]
    finally:
        await storage.close()


async def test_a_takeover_waits_for_a_plan_write_in_flight_and_then_refuses_the_old_holder(
    pg_dsn: str, tmp_path: Path
) -> None:
    home = tmp_path / "shared-home"
    one = await open_storage(home, database_url=pg_dsn, replica="one")
    two = await open_storage(home, database_url=pg_dsn, replica="two")
    try:
        room = chat(-300)
        record = await one.sessions.create_session(workspace=str(tmp_path / "ws"))
        await one.sessions.bind_chat(room, record.id)
        assert await one.leases.acquire(room.key, "one", 30) is not None
        await _expire(pg_dsn)
        assert one.fence is not None and isinstance(two.db, PgDatabase)
        patient = PgChatLeases(two.db, lock_timeout_ms=100)
        async with one.fence.holding(record.id):
            # One's write is in flight: the lapsed lease cannot change hands under it.
            assert await patient.acquire(room.key, "two", 30) is None
        taken = await patient.acquire(room.key, "two", 30)
        assert taken is not None and taken.epoch == 2
        with pytest.raises(LeaseLost):
            async with one.fence.holding(record.id):
                raise AssertionError("the old holder's write must not begin")
    finally:
        await one.close()
        await two.close()


async def test_a_renewal_that_waits_on_the_holders_own_write_keeps_the_holders_epoch(
    pg_dsn: str, tmp_path: Path
) -> None:
    one = await open_storage(tmp_path / "home", database_url=pg_dsn, replica="one")
    try:
        room = chat(-400)
        record = await one.sessions.create_session(workspace=str(tmp_path / "ws"))
        await one.sessions.bind_chat(room, record.id)
        assert await one.leases.acquire(room.key, "one", 30) is not None
        assert one.fence is not None and isinstance(one.db, PgDatabase)
        patient = PgChatLeases(one.db, fence=one.fence, lock_timeout_ms=100)
        async with one.fence.holding(record.id):
            # The renewal times out on the row this replica's own write holds.
            assert await patient.acquire(room.key, "one", 30) is None
        # Nothing changed hands: the replica still writes at its epoch.
        await one.log.append(record.id, [says("still mine")])
        assert one.fence.epoch(room.key) == 1
    finally:
        await one.close()


async def test_a_second_live_process_under_one_replica_name_is_refused(
    tmp_path: Path, pg_dsn: str
) -> None:
    # Two live replicas under one PLANGATE_REPLICA_ID (say, set in the config.env the replicas
    # share) would pass each other's fence: a lease's (replica, epoch) is the same for both.
    home = tmp_path / "home"
    one = await open_storage(home, database_url=pg_dsn, replica="one")
    try:
        with pytest.raises(ConfigError, match="PLANGATE_REPLICA_ID"):
            await open_storage(home, database_url=pg_dsn, replica="one")
        other = await open_storage(home, database_url=pg_dsn, replica="two")
        await other.close()
    finally:
        await one.close()
    # Stopped (or dead: the server drops its connection), the name is free again.
    again = await open_storage(home, database_url=pg_dsn, replica="one")
    await again.close()
