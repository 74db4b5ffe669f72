"""The database writer under faults: every caller is answered exactly once, with the truth.

Real SQLite files; faults come from a thin wrapper around the real aiosqlite writer connection,
put in through ``Database.open(connect=...)``, the seam that makes the writer connection.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path
from typing import Any, cast

import aiosqlite

from storage.db import WRITER_TASK, Database


class FaultyConnection:
    """The real connection, with faults armed by the test: the next ``fail_rollbacks``
    rollbacks (``rollback()`` or ``ROLLBACK TO``) fail as on a failing disk, and with
    ``commit_gate`` set a COMMIT runs in SQLite at once but its await returns only when the
    gate opens (the window in which a cancellation used to be taken for "not committed")."""

    def __init__(self, inner: aiosqlite.Connection) -> None:
        self.inner = inner
        self.fail_rollbacks = 0
        self.commit_sent = asyncio.Event()
        self.commit_gate: asyncio.Event | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def rollback(self) -> None:
        if self.fail_rollbacks:
            self.fail_rollbacks -= 1
            raise sqlite3.OperationalError("disk I/O error")
        await self.inner.rollback()

    def execute(self, sql: str, parameters: Any = None) -> Any:
        if sql.startswith("ROLLBACK") and self.fail_rollbacks:
            self.fail_rollbacks -= 1

            async def failing() -> None:
                raise sqlite3.OperationalError("disk I/O error")

            return failing()
        if sql == "COMMIT" and self.commit_gate is not None:
            gate = self.commit_gate

            async def gated() -> Any:
                self.commit_sent.set()
                cursor = await self.inner.execute(sql)
                await gate.wait()
                return cursor

            return gated()
        return self.inner.execute(sql, parameters)


async def open_faulty(path: Path) -> tuple[Database, list[FaultyConnection]]:
    made: list[FaultyConnection] = []

    async def connect(file: Path) -> aiosqlite.Connection:
        conn = FaultyConnection(await aiosqlite.connect(file, isolation_level=None))
        made.append(conn)
        return cast(aiosqlite.Connection, conn)

    return await Database.open(path, connect=connect), made


async def keys(db: Database, prefix: str) -> list[str]:
    rows = await db.fetch_all("SELECT key FROM meta WHERE key LIKE ? ORDER BY key", (prefix + "%",))
    return [str(row[0]) for row in rows]


async def test_a_failed_rollback_answers_every_write_and_the_writes_behind_go_on(
    tmp_path: Path,
) -> None:
    db, made = await open_faulty(tmp_path / "p.db")
    try:
        made[0].fail_rollbacks = 2  # the savepoint's rollback, then the batch's
        late: list[asyncio.Future[None]] = []

        def insert(n: int) -> Any:
            async def work(conn: aiosqlite.Connection) -> int:
                await conn.execute("INSERT INTO meta (key, value) VALUES (?, ?)", (f"w{n}", "x"))
                if n == 0:  # writes that arrive while this batch is in flight
                    late.extend(
                        asyncio.ensure_future(db.set_meta(f"late{i}", "x")) for i in range(3)
                    )
                if n == 2:
                    raise ValueError("a bad write")
                return n

            return work

        batch = [asyncio.ensure_future(db.write(insert(n))) for n in range(5)]
        answers = await asyncio.wait_for(asyncio.gather(*batch, return_exceptions=True), 10)
        # Every write of the batch heard an error: none of it is durable.
        assert all(isinstance(a, Exception) for a in answers), answers
        assert isinstance(answers[2], ValueError)
        assert await keys(db, "w") == []
        # The writes queued behind went on over a fresh connection, and so does a later one.
        await asyncio.wait_for(asyncio.gather(*late), 10)
        await asyncio.wait_for(db.set_meta("after", "1"), 10)
        assert await keys(db, "late") == ["late0", "late1", "late2"]
        assert await db.get_meta("after") == "1"
        assert len(made) == 2
    finally:
        await db.close()


async def test_a_lone_write_whose_rollback_fails_is_answered(tmp_path: Path) -> None:
    db, made = await open_faulty(tmp_path / "p.db")
    try:
        made[0].fail_rollbacks = 2

        async def bad(conn: aiosqlite.Connection) -> None:
            await conn.execute("INSERT INTO meta (key, value) VALUES ('w', 'x')")
            raise ValueError("a bad write")

        answer = await asyncio.wait_for(asyncio.gather(db.write(bad), return_exceptions=True), 10)
        assert isinstance(answer[0], ValueError)
        await asyncio.wait_for(db.set_meta("after", "1"), 10)
        assert await keys(db, "w") == [] and await db.get_meta("after") == "1"
    finally:
        await db.close()


async def test_a_cancellation_at_commit_tells_the_caller_what_really_happened(
    tmp_path: Path,
) -> None:
    db, made = await open_faulty(tmp_path / "p.db")
    try:
        gate = made[0].commit_gate = asyncio.Event()

        async def put(conn: aiosqlite.Connection) -> None:
            # Awaited statements: the COMMIT is the writer's own await (a one-trip batch's
            # COMMIT runs in SQLite's thread: the last test).
            await conn.execute("INSERT INTO meta (key, value) VALUES ('c', '1')")

        write = asyncio.ensure_future(db.write(put))
        await asyncio.wait_for(made[0].commit_sent.wait(), 10)
        # The writer task is what a loop shutdown or a supervisor cancels.
        (writer,) = [t for t in asyncio.all_tasks() if t.get_name() == WRITER_TASK]
        writer.cancel()
        await asyncio.sleep(0)  # the cancellation lands while the COMMIT's await is pending
        gate.set()
        # The row is committed, and the caller is told so, not "not committed".
        assert await asyncio.wait_for(write, 10) is None
        assert await db.get_meta("c") == "1"
        made[0].commit_gate = None
        # The cancelled writer stopped; the next write starts a new one.
        await asyncio.wait_for(asyncio.gather(writer, return_exceptions=True), 10)
        await asyncio.wait_for(db.set_meta("d", "2"), 10)
        assert await db.get_meta("d") == "2"
    finally:
        await db.close()


async def test_a_cancellation_during_a_one_trip_batch_tells_the_caller_what_really_happened(
    tmp_path: Path,
) -> None:
    db = await Database.open(tmp_path / "p.db")
    try:
        entered, release = threading.Event(), threading.Event()

        def slow(conn: sqlite3.Connection) -> str:
            conn.execute("INSERT INTO meta (key, value) VALUES ('c', '1')")
            entered.set()
            release.wait(10)  # the batch is in SQLite's thread when the writer is cancelled
            return "written"

        write = asyncio.ensure_future(db.write_in_thread(slow))
        assert await asyncio.to_thread(entered.wait, 10)
        (writer,) = [t for t in asyncio.all_tasks() if t.get_name() == WRITER_TASK]
        queued = asyncio.ensure_future(db.set_meta("queued", "1"))
        await asyncio.sleep(0)
        writer.cancel()
        await asyncio.sleep(0)
        release.set()
        # The batch ran to its COMMIT in the thread: the caller is told so, not "not committed".
        assert await asyncio.wait_for(write, 10) == "written"
        assert await db.get_meta("c") == "1"
        # The cancelled writer stopped: what queued behind it heard so; the next write starts
        # a new writer.
        await asyncio.wait_for(asyncio.gather(writer, return_exceptions=True), 10)
        assert isinstance((await asyncio.gather(queued, return_exceptions=True))[0], BaseException)
        await asyncio.wait_for(db.set_meta("d", "2"), 10)
        assert await db.get_meta("d") == "2"
    finally:
        release.set()
        await db.close()
