"""What only the SQLite stores promise: files that persist, pragmas, migrations, metadata,
loud failure on a corrupt row, and writers on separate connections that never collide."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import sys
import time
from pathlib import Path

import aiosqlite
import pytest

from engine.errors import AppendConflict, CorruptState
from engine.events import CommandRun, PlanMode, TurnEnd, TurnStart, UserMessage
from engine.projections import TAKE_BACK_COMMANDS
from engine.recovery import PENDING_COMMANDS, load_session_events
from engine.testing import InMemoryEventLog
from storage.db import Database, database_path
from storage.eventlog import SqliteEventLog
from storage.migrations import MIGRATIONS, migrate, user_version
from storage.sessions import SqliteSessionStore
from tests.keys import chat
from tests.storage.helpers import cleared, goal, says


async def test_everything_survives_close_and_reopen(tmp_path: Path) -> None:
    path = database_path(tmp_path / "home")
    assert path == tmp_path / "home" / "plangate.db"
    async with await Database.open(path) as db:
        sessions = SqliteSessionStore(db)
        record = await sessions.create_session(workspace="/w", profile=None)
        await sessions.bind_chat(chat(5), record.id)
        written = await SqliteEventLog(db).append(record.id, [says("a"), goal(1)])
        await db.set_meta("last_update_id", "981")
    async with await Database.open(path) as db:
        sessions = SqliteSessionStore(db)
        log = SqliteEventLog(db)
        assert await sessions.get_session(record.id) == record
        assert await sessions.session_for_chat(chat(5).key) == record.id
        assert await log.read(record.id) == written
        assert await db.get_meta("last_update_id") == "981"
        with pytest.raises(AppendConflict):
            await log.append(record.id, [goal(1)])


async def test_wal_full_sync_and_schema_version(tmp_path: Path) -> None:
    async with await Database.open(tmp_path / "p.db") as db, db.reading() as conn:
        pragmas = {}
        for name in ("journal_mode", "synchronous", "busy_timeout", "user_version"):
            async with conn.execute(f"PRAGMA {name}") as cursor:
                row = await cursor.fetchone()
                assert row is not None
                pragmas[name] = row[0]
    assert pragmas == {
        "journal_mode": "wal",
        "synchronous": 2,  # FULL
        "busy_timeout": 10_000,
        "user_version": len(MIGRATIONS),
    }


async def test_meta_set_replace(tmp_path: Path) -> None:
    async with await Database.open(tmp_path / "p.db") as db:
        assert await db.get_meta("groups") is None
        await db.set_meta("groups", "[-100]")
        await db.set_meta("groups", "[-100, -200]")
        assert await db.get_meta("groups") == "[-100, -200]"


async def _tables(conn: aiosqlite.Connection) -> set[str]:
    async with conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'") as cursor:
        return {str(row[0]) for row in await cursor.fetchall()}


async def test_migrations_run_forward_once_each(tmp_path: Path) -> None:
    steps = (("CREATE TABLE a (x)",), ("CREATE TABLE b (x)", "INSERT INTO b VALUES (1)"))
    async with aiosqlite.connect(tmp_path / "m.db", isolation_level=None) as conn:
        assert await migrate(conn, steps[:1]) == 1
        assert await _tables(conn) == {"a"}
        assert await migrate(conn, steps) == 2
        assert await migrate(conn, steps) == 2  # nothing re-run: no duplicate row in b
        async with conn.execute("SELECT COUNT(*) FROM b") as cursor:
            assert await cursor.fetchone() == (1,)
        assert await user_version(conn) == 2


async def test_a_failing_migration_leaves_the_previous_schema(tmp_path: Path) -> None:
    broken = (("CREATE TABLE a (x)",), ("CREATE TABLE b (x)", "CREATE TABLE a (x)"))
    async with aiosqlite.connect(tmp_path / "m.db", isolation_level=None) as conn:
        with pytest.raises(sqlite3.OperationalError):
            await migrate(conn, broken)
        assert await user_version(conn) == 1
        assert await _tables(conn) == {"a"}


async def test_a_database_from_a_newer_plangate_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    with sqlite3.connect(path) as raw:
        raw.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 1}")
    with pytest.raises(CorruptState, match="newer"):
        await Database.open(path)


async def test_a_row_that_does_not_parse_fails_loudly_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    async with await Database.open(path) as db:
        await SqliteEventLog(db).append("s1", [says("a"), says("b"), says("c")])
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE events SET payload = ? WHERE seq = 2", ('{"type": "user/message"}',))
    async with await Database.open(path) as db:
        with pytest.raises(CorruptState, match=r"session s1 event 2 does not parse: .*text"):
            await SqliteEventLog(db).read("s1")
        with pytest.raises(CorruptState, match="event 2"):
            await load_session_events(SqliteEventLog(db), "s1")


async def test_concurrent_appends_on_one_connection_stay_dense(tmp_path: Path) -> None:
    async with await Database.open(tmp_path / "p.db") as db:
        log = SqliteEventLog(db)
        await asyncio.gather(
            *(log.append("s1", [says(f"{w}-{i}") for i in range(3)]) for w in range(20))
        )
        events = await log.read("s1")
    assert [e.seq for e in events] == list(range(1, 61))
    # Each append's events stay together and in order.
    for first in range(0, 60, 3):
        texts = [e.event.text for e in events[first : first + 3]]  # type: ignore[union-attr]
        writer = texts[0].split("-")[0]
        assert texts == [f"{writer}-{i}" for i in range(3)]


async def test_two_connections_on_one_file_never_collide(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    async with await Database.open(path) as one, await Database.open(path) as two:
        logs = [SqliteEventLog(one), SqliteEventLog(two)]

        async def writer(n: int) -> None:
            for i in range(40):
                await logs[n % 2].append("s1", [says(f"{n}-{i}")])

        await asyncio.gather(*(writer(n) for n in range(4)))
        # The goal compare-and-set holds across connections: one of two claims wins.
        outcomes = await asyncio.gather(
            logs[0].append("s1", [goal(1)]), logs[1].append("s1", [goal(1)]), return_exceptions=True
        )
        events = await logs[1].read("s1")
    assert sorted(type(o).__name__ for o in outcomes) == ["AppendConflict", "list"]
    assert [e.seq for e in events] == list(range(1, 162))
    assert len({e.event for e in events}) == 161


async def test_a_cancelled_append_leaves_the_database_usable(tmp_path: Path) -> None:
    async with await Database.open(tmp_path / "p.db") as db:
        log = SqliteEventLog(db)
        for ticks in range(12):  # cancel at every await point of an append in turn
            task = asyncio.create_task(log.append("s1", [says(f"{ticks}"), goal(100 + ticks)]))
            for _ in range(ticks):
                await asyncio.sleep(0)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await log.append("s1", [says(f"after {ticks}")])
        events = await log.read("s1")
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    texts = [e.event.text for e in events if isinstance(e.event, UserMessage)]
    assert [t for t in texts if t.startswith("after")] == [f"after {i}" for i in range(12)]
    # A cancelled append committed whole or not at all.
    for stored in events:
        if isinstance(stored.event, UserMessage) and not stored.event.text.startswith("after"):
            ticks = int(stored.event.text)
            assert events[stored.seq].event == goal(100 + ticks)


_OPEN_CHILD = """
import asyncio, sys, time
from storage.db import Database
async def main(path, start):
    while time.time() < start:
        await asyncio.sleep(0.001)
    db = await Database.open(path)
    await db.close()
asyncio.run(main(sys.argv[1], float(sys.argv[2])))
"""


async def test_processes_opening_a_new_file_together_all_succeed(tmp_path: Path) -> None:
    # Switching a brand-new file to WAL from two processes at once makes SQLite answer the
    # loser "database is locked" without waiting; opening must retry, never fail.
    root = str(Path(__file__).resolve().parents[2])
    for attempt in range(8):
        path = tmp_path / f"new{attempt}.db"
        start = time.time() + 0.4
        children = [
            await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                _OPEN_CHILD,
                str(path),
                str(start),
                cwd=root,
                stderr=asyncio.subprocess.PIPE,
            )
            for _ in range(3)
        ]
        for child in children:
            _, err = await asyncio.wait_for(child.communicate(), 30)
            assert child.returncode == 0, err.decode()


async def test_concurrent_appends_share_commits_and_a_conflict_fails_alone(
    tmp_path: Path,
) -> None:
    path = tmp_path / "p.db"
    async with await Database.open(path) as db:
        log = SqliteEventLog(db)
        await log.append("s0", [goal(1)])
        before = db.commits
        appends = [log.append(f"s{i % 10}", [says(f"m{i}"), says(f"n{i}")]) for i in range(60)]
        appends.insert(30, log.append("s0", [says("lost"), goal(1)]))  # revision 1 is taken
        results = await asyncio.gather(*appends, return_exceptions=True)
        assert isinstance(results.pop(30), AppendConflict)
        # Writes that queued while a commit was in flight shared the next one.
        assert db.commits - before < len(results)
    async with await Database.open(path) as db:
        log = SqliteEventLog(db)
        for session in range(10):
            events = await log.read(f"s{session}")
            assert [e.seq for e in events] == list(range(1, len(events) + 1))
            texts = {e.event.text for e in events if isinstance(e.event, UserMessage)}
            assert "lost" not in texts
            assert texts == {f"{p}{i}" for i in range(session, 60, 10) for p in "mn"}
        returned = [s for r in results if isinstance(r, list) for s in r]
        assert len(returned) == 120
        for stored in returned:
            assert (await log.read(stored.session_id, after_seq=stored.seq - 1))[0] == stored


async def test_a_failing_write_in_a_batch_rolls_back_alone(tmp_path: Path) -> None:
    async with await Database.open(tmp_path / "p.db") as db:

        async def put(conn: aiosqlite.Connection, key: str) -> str:
            await conn.execute("INSERT INTO meta (key, value) VALUES (?, 'v')", (key,))
            return key

        async def broken(conn: aiosqlite.Connection) -> None:
            await conn.execute("INSERT INTO meta (key, value) VALUES ('half', 'v')")
            raise ValueError("the work failed half-way")

        results = await asyncio.gather(
            db.write(lambda c: put(c, "a")),
            db.write(broken),
            db.write(lambda c: put(c, "b")),
            return_exceptions=True,
        )
        assert results[0] == "a" and results[2] == "b"
        assert isinstance(results[1], ValueError)
        assert await db.get_meta("a") == "v" and await db.get_meta("b") == "v"
        assert await db.get_meta("half") is None
        # Alone in its batch, the same failure rolls back as well, and the next write works.
        with pytest.raises(ValueError, match="half-way"):
            await db.write(broken)
        assert await db.get_meta("half") is None
        await db.set_meta("after", "1")
    with pytest.raises(RuntimeError, match="closed"):
        await db.set_meta("late", "1")


async def test_upgrading_backfills_the_attention_marks_from_the_log(tmp_path: Path) -> None:
    logs = {
        "idle": [TurnStart(turn_id="t"), TurnEnd(turn_id="t", outcome="completed")],
        "open": [TurnStart(turn_id="t"), says("hi")],
        "goal": [goal(1), says("x")],
        "done": [goal(1), goal(2, phase="complete")],
        "cleared": [goal(1), cleared(2)],
        "plan": [CommandRun(name="plan", data={"target": True}), says("x")],
        "planned": [CommandRun(name="plan"), PlanMode(active=True)],
        "taken-back": [CommandRun(name="approve"), CommandRun(name="revise")],
        "approved": [CommandRun(name="revise"), CommandRun(name="approve")],
    }
    path = tmp_path / "old.db"
    async with aiosqlite.connect(path, isolation_level=None) as conn:
        await migrate(conn, MIGRATIONS[:1])
        for session, events in logs.items():
            for seq, event in enumerate(events, start=1):
                await conn.execute(
                    "INSERT INTO events VALUES (?, ?, ?, 1.0, ?)",
                    (session, seq, event.type, event.model_dump_json()),
                )
    fake = InMemoryEventLog()
    for session, events in logs.items():
        await fake.append(session, events)
    async with await Database.open(path) as db:
        got = await SqliteEventLog(db).needs_attention()
    assert got == await fake.needs_attention() == ["approved", "goal", "open", "plan"]


def test_the_backfills_frozen_copy_names_the_commands_of_the_pending_rule() -> None:
    # Migration 3 keeps its own SQL copy of engine.recovery.pending_mark; today they agree.
    # A change to the rule needs a migration of its own, not an edit of this one.
    sql = " ".join(MIGRATIONS[2])
    for name in PENDING_COMMANDS | TAKE_BACK_COMMANDS:
        assert f"'{name}'" in sql, name


async def test_upgrading_to_the_command_index_finds_caps_logged_before_it(tmp_path: Path) -> None:
    # A version-3 file with commands already in it: the upgrade indexes them, and the lookup
    # that start-up makes uses the index and finds the newest (the later row on a tie).
    path = tmp_path / "v3.db"
    rows = [
        ("s1", 1, CommandRun(name="usage_cap", data={"cap": 1}), 5.0),
        ("s2", 1, CommandRun(name="usage_cap", data={"cap": 2}), 7.0),
        ("s1", 2, CommandRun(name="status"), 9.0),
        ("s3", 1, CommandRun(name="usage_cap", data={"cap": 3}), 7.0),
    ]
    async with aiosqlite.connect(path, isolation_level=None) as conn:
        await migrate(conn, MIGRATIONS[:3])
        for session, seq, event, at in rows:
            await conn.execute(
                "INSERT INTO events VALUES (?, ?, ?, ?, ?)",
                (session, seq, event.type, at, event.model_dump_json()),
            )
    async with await Database.open(path) as db:
        assert await user_version_of(db) == len(MIGRATIONS)
        found = await SqliteEventLog(db).last_command("usage_cap")
        assert found is not None and (found.session_id, found.event.data) == ("s3", {"cap": 3})
        assert await SqliteEventLog(db).last_command("nothing") is None
        plan = await db.fetch_all(
            "EXPLAIN QUERY PLAN SELECT session_id FROM events WHERE type = 'command/run' "
            "AND json_extract(payload, '$.name') = ? ORDER BY at DESC, rowid DESC LIMIT 1",
            ("usage_cap",),
        )
        details = " ".join(str(row[-1]) for row in plan)
        assert "events_command_name" in details and "TEMP B-TREE" not in details


async def user_version_of(db: Database) -> int:
    [(version,)] = await db.fetch_all("PRAGMA user_version")
    return int(version)


async def test_writes_run_whole_in_the_thread_batch_and_roll_back_alone(tmp_path: Path) -> None:
    # Database.write_in_thread: the same batch, savepoints and answers as Database.write,
    # alone, among their own kind (one trip for the batch) and mixed with awaited writes.
    async with await Database.open(tmp_path / "p.db") as db:

        def put(conn: sqlite3.Connection, key: str) -> str:
            conn.execute("INSERT INTO meta (key, value) VALUES (?, 'v')", (key,))
            return key

        def broken(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO meta (key, value) VALUES ('half', 'v')")
            raise ValueError("the work failed half-way")

        async def awaited(conn: aiosqlite.Connection) -> str:
            await conn.execute("INSERT INTO meta (key, value) VALUES ('aw', 'v')")
            return "aw"

        before = db.commits
        results = await asyncio.gather(
            db.write_in_thread(lambda c: put(c, "a")),
            db.write_in_thread(broken),
            db.write_in_thread(lambda c: put(c, "b")),
            return_exceptions=True,
        )
        assert results[0] == "a" and results[2] == "b"
        assert isinstance(results[1], ValueError)
        assert db.commits == before + 1
        mixed = await asyncio.gather(
            db.write_in_thread(lambda c: put(c, "c")),
            db.write(awaited),
            db.write_in_thread(broken),
            return_exceptions=True,
        )
        assert mixed[:2] == ["c", "aw"] and isinstance(mixed[2], ValueError)
        for key in ("a", "b", "c", "aw"):
            assert await db.get_meta(key) == "v"
        assert await db.get_meta("half") is None
        # Alone in its batch, the failure rolls back as well, and the next write works.
        with pytest.raises(ValueError, match="half-way"):
            await db.write_in_thread(broken)
        assert await db.get_meta("half") is None
        assert await db.write_in_thread(lambda c: put(c, "after")) == "after"
    with pytest.raises(RuntimeError, match="closed"):
        await db.write_in_thread(lambda c: put(c, "late"))
