"""The PostgreSQL store beyond the shared contract: two processes' worth of connections racing
on one session (seq and the goal compare-and-set) and on one chat log, migrations run once
under their lock, the bot's meta table, and ``PLANGATE_DATABASE_URL`` choosing the store."""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import pytest

from engine.errors import AppendConflict, ConfigError, CorruptState
from engine.roles.types import RoleGranted, RoleRevoked
from storage.open import open_storage
from storage.postgres.chatlog import PgChatLog
from storage.postgres.db import PgDatabase, probe
from storage.postgres.eventlog import PgEventLog
from storage.postgres.migrations import MIGRATIONS, migrate, schema_version
from tests.pg import Cluster, pg_cluster, pg_dsn
from tests.storage.helpers import goal, says

__all__ = ["pg_cluster", "pg_dsn"]


async def test_two_connections_appending_to_one_session_never_share_a_seq(pg_dsn: str) -> None:
    # Two pools are two replicas as far as the server knows.
    async with await PgDatabase.open(pg_dsn) as one, await PgDatabase.open(pg_dsn) as two:
        logs = [PgEventLog(one), PgEventLog(two)]

        async def writer(n: int) -> list[int]:
            got: list[int] = []
            for i in range(15):
                stored = await logs[n % 2].append("s1", [says(f"{n}.{i}"), says(f"{n}.{i}b")])
                got.extend(e.seq for e in stored)
            return got

        results = await asyncio.gather(*(writer(n) for n in range(6)))
        every = sorted(seq for got in results for seq in got)
        assert every == list(range(1, 181))
        read = await logs[0].read("s1")
        assert [e.seq for e in read] == every
        # Each append's two events sit next to each other, in its order.
        by_seq = {e.seq: e.event for e in read}
        for got in results:
            for first, second in zip(got[::2], got[1::2], strict=True):
                assert second == first + 1
                assert by_seq[second] == says(f"{by_seq[first].text}b")  # type: ignore[union-attr]


async def test_of_two_connections_racing_for_one_goal_revision_exactly_one_wins(
    pg_dsn: str,
) -> None:
    async with await PgDatabase.open(pg_dsn) as one, await PgDatabase.open(pg_dsn) as two:
        logs = [PgEventLog(one), PgEventLog(two)]
        await logs[0].append("s1", [goal(1)])
        for revision in range(2, 12):

            async def claim(n: int, revision: int = revision) -> bool:
                try:
                    await logs[n % 2].append("s1", [says(f"w{n}"), goal(revision)])
                except AppendConflict:
                    return False
                return True

            won = await asyncio.gather(*(claim(n) for n in range(4)))
            assert sum(won) == 1, (revision, won)
        read = await logs[1].read("s1")
        # 1 + 10 winning appends of 2 events: dense, nothing of a loser committed.
        assert [e.seq for e in read] == list(range(1, 22))
        assert [e.event for e in read if e.event.type == "goal/change"] == [
            goal(r) for r in range(1, 12)
        ]


async def test_migrations_run_once_when_replicas_open_a_new_database_together(
    pg_dsn: str,
) -> None:
    opened = await asyncio.gather(*(PgDatabase.open(pg_dsn) for _ in range(4)))
    try:
        assert {await db.schema_version() for db in opened} == {len(MIGRATIONS)}
    finally:
        for db in opened:
            await db.close()
    conn = await asyncpg.connect(pg_dsn)
    try:
        assert await conn.fetchval("SELECT count(*) FROM plangate_schema") == 1
        # Run again: nothing to do, nothing changes.
        assert await migrate(conn) == len(MIGRATIONS)
        # One version ahead (a peer replica upgraded first) is used as it is; two versions
        # ahead are refused, never downgraded (tests/storage/test_pg_upgrade.py).
        await conn.execute("UPDATE plangate_schema SET version = $1", len(MIGRATIONS) + 1)
        assert await migrate(conn) == len(MIGRATIONS)
        assert await schema_version(conn) == len(MIGRATIONS) + 1
        await conn.execute("UPDATE plangate_schema SET version = $1", len(MIGRATIONS) + 2)
        with pytest.raises(CorruptState, match="newer than this plangate"):
            await migrate(conn)
        assert await schema_version(conn) == len(MIGRATIONS) + 2
    finally:
        await conn.close()
    with pytest.raises(CorruptState):
        await PgDatabase.open(pg_dsn)


async def test_a_failing_migration_step_leaves_the_previous_version(pg_dsn: str) -> None:
    broken = (*MIGRATIONS, ("CREATE TABLE extra (x int)", "SELECT no_such_function()"))
    conn = await asyncpg.connect(pg_dsn)
    try:
        with pytest.raises(asyncpg.UndefinedFunctionError):
            await migrate(conn, broken)
        assert await schema_version(conn) == len(MIGRATIONS)
        assert await conn.fetchval("SELECT to_regclass('extra')") is None
    finally:
        await conn.close()


async def test_meta_values_set_replace_and_survive_a_reopen(pg_dsn: str) -> None:
    async with await PgDatabase.open(pg_dsn) as db:
        assert await db.get_meta("last_update_id") is None
        await db.set_meta("last_update_id", "41")
        await db.set_meta("last_update_id", "42")
    async with await PgDatabase.open(pg_dsn) as db:
        assert await db.get_meta("last_update_id") == "42"
    assert await probe(pg_dsn) == ((await probe(pg_dsn))[0], len(MIGRATIONS))


async def test_a_database_url_puts_every_store_in_postgresql(pg_dsn: str, tmp_path: Path) -> None:
    storage = await open_storage(tmp_path / "home", database_url=pg_dsn)
    try:
        session = await storage.sessions.create_session(workspace=str(tmp_path))
        await storage.log.append(session.id, [says("hi")])
        await storage.db.set_meta("k", "v")
    finally:
        await storage.close()
    assert not (tmp_path / "home" / "plangate.db").exists()
    async with await PgDatabase.open(pg_dsn) as db:
        assert [e.event for e in await PgEventLog(db).read(session.id)] == [says("hi")]
        assert await db.get_meta("k") == "v"
    with pytest.raises(ValueError, match="postgresql://"):
        await open_storage(tmp_path / "home", database_url="mysql://x")


async def test_a_database_that_refuses_or_is_not_there_is_one_line_naming_the_setting(
    pg_cluster: Cluster, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match="PLANGATE_DATABASE_URL: the database refused"):
        await open_storage(tmp_path / "home", database_url=pg_cluster.dsn("no_such_database"))
    gone = f"postgresql:///x?host={tmp_path / 'no-socket'}&user=nobody"
    with pytest.raises(ConfigError, match="PLANGATE_DATABASE_URL: the database did not answer"):
        await open_storage(tmp_path / "home", database_url=gone)


async def test_two_connections_appending_to_one_chat_log_never_share_a_seq(pg_dsn: str) -> None:
    async with await PgDatabase.open(pg_dsn) as one, await PgDatabase.open(pg_dsn) as two:
        logs = [PgChatLog(one), PgChatLog(two)]

        async def writer(n: int) -> None:
            for i in range(5):
                await logs[n % 2].append_chat(
                    "tg:-100", [RoleGranted(user_id=f"tg:{n}{i}"), RoleRevoked(user_id="tg:1")]
                )

        await asyncio.gather(*(writer(n) for n in range(4)))
        read = await logs[1].read_chat("tg:-100")
        assert [s.seq for s in read] == list(range(1, 41))
        # Each append's pair is adjacent: no other writer's event between them.
        assert all(isinstance(s.event, RoleRevoked) for s in read[1::2])
