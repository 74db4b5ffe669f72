"""The SQLite database: a writer and a reader aiosqlite connection, their pragmas, group commit
(docs/storage.md).

Durability: WAL journal with ``synchronous=FULL``. A commit returns only after the WAL frame is
written *and* fsync'd, so an acknowledged write survives SIGKILL of the process (``NORMAL``
would already do that: the bytes are in the OS page cache) and also a power cut or kernel crash
(which ``NORMAL`` may roll back). It matches the plan sidecar, which is fsync'd too. Cost: one
fsync per commit, 0.2-3 ms on the development VM depending on its load.

Group commit: every write (:meth:`Database.write`) is queued for one writer task. The writer
takes everything queued, runs each write in its own ``SAVEPOINT`` inside one ``BEGIN IMMEDIATE``
transaction, and commits once; a write's caller resumes only after that commit. Writes that
arrive while a commit is in flight wait for the next one, so N concurrent sessions pay one
fsync, not N. A write that fails rolls back to its savepoint alone; the others still commit.

Trips: each statement an ``aiosqlite`` write awaits is a trip to the connection's thread and
back (a queue, a thread wake-up, the loop woken), which costs more CPU than a small statement.
A write that only runs statements can be given as one function of the ``sqlite3`` connection
(:meth:`Database.write_in_thread`); a batch made only of those runs whole in one trip (BEGIN,
the savepoints, COMMIT), which is what makes an event append cheap (docs/bench.md).

Every caller is answered exactly once, with the truth. A batch whose rollback fails leaves the
writer connection in an unknown state: each write of that batch hears the error (none of it is
durable: the connection is closed, which rolls back), the writer connection is opened anew, and
the writes queued behind go on there. A cancellation while the COMMIT is in SQLite's thread does
not stop it: the writer waits for the COMMIT's own outcome and answers from that, then stops;
the next write starts a new writer.

A one-trip batch, once sent, runs to its end in SQLite's thread: a cancellation meanwhile is
answered as at COMMIT (the outcome, then the writer stops).

Concurrency: inside a process, writes go through one connection (the writer task, under an
:class:`asyncio.Lock`) and reads through a second, read-only one, so a read sees only
committed rows and never waits for a batch or its fsync. Across processes, writers serialise
on SQLite's own write lock: batches begin with ``BEGIN IMMEDIATE`` and wait up to
``busy_timeout_ms`` for it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, TypeVar, cast

import aiosqlite

from storage.migrations import migrate

DATABASE_NAME = "plangate.db"
DEFAULT_BUSY_TIMEOUT_MS = 10_000
# The writer's PRAGMA synchronous values Database.open accepts (a closed set: no SQL is built
# from a caller's string).
_SYNCHRONOUS = {"FULL": "FULL", "OFF": "OFF"}
# Writes per commit at most: bounds how long one batch holds the write lock (other processes
# wait for it) and how much one failed COMMIT takes down with it.
MAX_BATCH = 256
# The writer task's name (what a task dump shows; tests find it by it).
WRITER_TASK = "plangate.db.writer"

T = TypeVar("T")
Work = Callable[[aiosqlite.Connection], Awaitable[Any]]
# A write as one function of the writer's sqlite3 connection, run in that connection's thread.
ThreadWork = Callable[[sqlite3.Connection], Any]
# How the writer connection is made (a seam: tests wrap it to inject faults).
Connect = Callable[[Path], Awaitable[aiosqlite.Connection]]

_log = logging.getLogger("plangate.db")


@dataclass(eq=False, slots=True)
class _Write:
    work: Work | None = None
    in_thread: ThreadWork | None = None  # the write as one function (write_in_thread)
    done: asyncio.Future[Any] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


def database_path(home: Path) -> Path:
    """Where plangate keeps its database: ``<home>/plangate.db``."""
    return home / DATABASE_NAME


class Database:
    """An open plangate database; get one with :meth:`open` and close it when done."""

    def __init__(
        self,
        conn: aiosqlite.Connection,
        path: Path,
        reader: aiosqlite.Connection,
        *,
        reconnect: Callable[[], Awaitable[aiosqlite.Connection]] | None = None,
    ) -> None:
        self._conn = conn
        # Reads go to their own connection: a WAL reader sees the last commit and never waits
        # for the writer's batch or its fsync (a write returns only after its commit, so a read
        # after it sees it).
        self._reader = reader
        self._path = path
        # Opens a fresh writer connection after one was left broken by a failed rollback.
        self._reconnect = reconnect
        self._lock = asyncio.Lock()
        self._queue: list[_Write] = []
        self._wake = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self._closing = False
        self.commits = 0  # batches committed, for the bench and tests

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str],
        *,
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
        synchronous: Literal["FULL", "OFF"] = "FULL",
        connect: Connect | None = None,
    ) -> Database:
        """Open (creating folder and file if needed) and migrate the database at ``path``.

        ``synchronous="OFF"`` drops the fsync per commit: only for benches that measure
        plangate's own cost, never for a bot (a crash could lose committed events).
        ``connect`` makes the writer connection (default: aiosqlite's). Raises
        ``CorruptState`` when the file was written by a newer plangate.
        """
        file = Path(path)
        file.parent.mkdir(parents=True, exist_ok=True)
        make = connect or _connect

        async def writer() -> aiosqlite.Connection:
            conn = await make(file)
            try:
                await conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms):d}")
                await _enter_wal(conn, timeout_ms=busy_timeout_ms)
                await conn.execute(f"PRAGMA synchronous = {_SYNCHRONOUS[synchronous]}")
            except BaseException:
                await conn.close()
                raise
            return conn

        conn = await writer()
        try:
            await migrate(conn)
            reader = await aiosqlite.connect(file, isolation_level=None)
        except BaseException:
            await conn.close()
            raise
        try:
            await reader.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms):d}")
            await reader.execute("PRAGMA query_only = ON")
        except BaseException:
            await reader.close()
            await conn.close()
            raise
        return cls(conn, file, reader, reconnect=writer)

    @property
    def path(self) -> Path:
        return self._path

    async def close(self) -> None:
        """Commit what is queued, stop the writer, close the connection."""
        self._closing = True
        self._wake.set()
        if self._writer is not None:
            await asyncio.gather(self._writer, return_exceptions=True)
        async with self._lock:
            await self._conn.close()
        await self._reader.close()

    async def __aenter__(self) -> Database:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def write(self, work: Callable[[aiosqlite.Connection], Awaitable[T]]) -> T:
        """Run ``work(conn)`` in a write transaction; durable when this returns its result.

        ``work`` runs in the writer task inside a savepoint of a batch shared with other
        writes, so it must only use ``conn`` (no other awaits that wait on this database).
        An exception from ``work`` rolls back its own statements and is raised here; nothing of
        it commits. Cancelling the caller does not cancel a write already taken up.
        """
        return cast(T, await self._queued(_Write(work=work)))

    async def write_in_thread(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """:meth:`write` for a write that only runs statements: ``work`` is called with the
        writer's ``sqlite3`` connection, in that connection's thread, inside the same batch,
        savepoint and commit, and its result or exception is this call's. A batch made only of
        such writes costs one trip to the thread instead of one per statement. ``work`` must
        not touch the event loop or anything but ``conn``.
        """
        return cast(T, await self._queued(_Write(in_thread=work)))

    async def _queued(self, item: _Write) -> Any:
        if self._closing:
            raise RuntimeError("the database is closed")
        self._queue.append(item)
        self._wake.set()
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(
                self._run_writer(), name=WRITER_TASK
            )
        return await asyncio.shield(item.done)

    async def _run_writer(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
                await self._commit_batch(batch)
            if self._closing:
                return

    async def _commit_batch(self, batch: list[_Write]) -> None:
        results: list[tuple[_Write, Any, Exception | None]] = []
        stopped: BaseException | None = None
        async with self._lock:
            conn = self._conn
            try:
                if all(item.work is None for item in batch):
                    # One trip: the whole transaction in SQLite's thread (_run_batch).
                    committed, stopped = await _outcome(
                        _in_thread(conn, lambda raw: _run_batch(raw, batch, results))
                    )
                    self.commits += committed
                else:
                    stopped = await self._statement_by_statement(conn, batch, results)
            except BaseException as exc:
                await self._batch_failed(conn, batch, exc, own=results)
                if not isinstance(exc, Exception):
                    raise
                return
        _answer(results)
        if stopped is not None:
            # Committed although the writer was cancelled meanwhile: the callers heard the
            # truth; those queued behind hear that this writer stops, and it does.
            self._fail_queued(stopped)
            raise stopped

    async def _statement_by_statement(
        self,
        conn: aiosqlite.Connection,
        batch: list[_Write],
        results: list[tuple[_Write, Any, Exception | None]],
    ) -> BaseException | None:
        """The batch with a trip per statement (it holds a :meth:`write`); each write's outcome
        goes to ``results``. Returns the cancellation that arrived during the COMMIT."""
        # A lone write needs no savepoint: its failure rolls back the whole transaction.
        alone = len(batch) == 1
        stopped: BaseException | None = None
        await conn.execute("BEGIN IMMEDIATE")
        for item in batch:
            if not alone:
                await conn.execute("SAVEPOINT w")
            try:
                if item.work is not None:
                    value = await item.work(conn)
                else:
                    assert item.in_thread is not None
                    value = await _in_thread(conn, item.in_thread)
            except Exception as exc:
                # Recorded first: should the rollback fail, this write still hears its own
                # error.
                results.append((item, None, exc))
                if alone:
                    await conn.rollback()
                else:
                    await conn.execute("ROLLBACK TO w")
                    await conn.execute("RELEASE w")
            else:
                if not alone:
                    await conn.execute("RELEASE w")
                results.append((item, value, None))
        if conn.in_transaction:
            stopped = await _commit(conn)
            self.commits += 1
        return stopped

    async def _batch_failed(
        self,
        conn: aiosqlite.Connection,
        batch: list[_Write],
        exc: BaseException,
        *,
        own: list[tuple[_Write, Any, Exception | None]],
    ) -> None:
        """Nothing of the batch is durable: every caller of it hears the failure (a write
        that failed on its own hears its own error)."""
        # rollback() is queued behind any statement in flight and is a no-op when none is open.
        try:
            await conn.rollback()
        except Exception as failed:
            # The connection's state is unknown: closing it rolls back whatever is open; the
            # writes queued behind go on over a fresh one.
            _log.error(
                "plangate.db.rollback_failed writes=%d %s: %s (reconnecting)",
                len(batch),
                type(failed).__name__,
                failed,
            )
            await self._replace_connection(conn)
        _log.warning("plangate.db.commit_failed writes=%d %r", len(batch), exc)
        for item, _value, error in own:
            if error is not None and not item.done.done():
                item.done.set_exception(error)
        for item in batch:
            if not item.done.done():
                item.done.set_exception(_batch_error(exc))
        if not isinstance(exc, Exception):
            # The writer dies with this (cancellation): nothing queued behind the batch would
            # ever be answered, so every waiting caller hears it too.
            self._fail_queued(exc)

    def _fail_queued(self, exc: BaseException) -> None:
        queued, self._queue = self._queue, []
        for item in queued:
            if not item.done.done():
                item.done.set_exception(_batch_error(exc))

    async def _replace_connection(self, broken: aiosqlite.Connection) -> None:
        try:
            await broken.close()
        except Exception as exc:
            _log.warning("plangate.db.close_failed %s", type(exc).__name__)
        if self._reconnect is None:
            return  # every later batch fails at its BEGIN, and says so to its callers
        try:
            self._conn = await self._reconnect()
        except Exception as exc:
            _log.error("plangate.db.reconnect_failed %s: %s", type(exc).__name__, exc)

    @asynccontextmanager
    async def reading(self) -> AsyncIterator[aiosqlite.Connection]:
        """The read connection (``query_only``): it sees what is committed, never waits for a
        write."""
        yield self._reader

    async def fetch_all(self, sql: str, parameters: Sequence[Any] = ()) -> list[Any]:
        """All rows of one query, in one trip to the read connection's thread."""
        return list(await self._reader.execute_fetchall(sql, parameters))

    async def fetch_one(self, sql: str, parameters: Sequence[Any] = ()) -> Any | None:
        """The first row of one query, or ``None``."""
        rows = await self.fetch_all(sql, parameters)
        return rows[0] if rows else None

    async def get_meta(self, key: str) -> str | None:
        """The bot's own small state (e.g. the last processed ``update_id``), or ``None``."""
        row = await self.fetch_one("SELECT value FROM meta WHERE key = ?", (key,))
        return None if row is None else str(row[0])

    async def set_meta(self, key: str, value: str) -> None:
        """Set (or replace) one metadata value; durable when this returns."""

        def work(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

        await self.write_in_thread(work)


async def _connect(file: Path) -> aiosqlite.Connection:
    # isolation_level=None: autocommit, so transactions are exactly the BEGIN/COMMIT we send.
    return await aiosqlite.connect(file, isolation_level=None)


async def _commit(conn: aiosqlite.Connection) -> BaseException | None:
    """Run COMMIT and wait for its own outcome, even through a cancellation: once sent, SQLite
    finishes it in its thread whatever happens to this task, so giving up on it would tell
    callers "not committed" for rows that are. Returns the cancellation that arrived meanwhile
    (the caller answers, then re-raises it); raises the COMMIT's error."""
    statement = asyncio.ensure_future(conn.execute("COMMIT"))
    stopped: BaseException | None = None
    while True:
        try:
            await asyncio.shield(statement)
            return stopped
        except asyncio.CancelledError as exc:
            if statement.done():
                raise  # the statement itself was cancelled (loop shutdown): not committed
            stopped = exc


async def _in_thread(conn: aiosqlite.Connection, work: ThreadWork) -> Any:
    """``work(raw)`` in the connection's own thread, one trip. aiosqlite has no public call for
    this: ``_execute`` is how each of its own methods gets there, and ``_conn`` is the sqlite3
    connection they use (both since aiosqlite 0.17; the version is pinned below 1)."""
    run = cast(Callable[[Callable[[], Any]], Awaitable[Any]], conn._execute)  # noqa: SLF001
    return await run(lambda: work(conn._conn))  # noqa: SLF001


def _run_batch(
    conn: sqlite3.Connection,
    batch: list[_Write],
    results: list[tuple[_Write, Any, Exception | None]],
) -> bool:
    """A batch of :meth:`Database.write_in_thread` writes, in the connection's thread: what
    :meth:`Database._statement_by_statement` does, without a trip per statement. Each write's
    outcome goes to ``results`` as it happens (so a failed rollback still leaves each write its
    own error); returns whether it committed."""
    alone = len(batch) == 1
    conn.execute("BEGIN IMMEDIATE")
    for item in batch:
        assert item.in_thread is not None
        if not alone:
            conn.execute("SAVEPOINT w")
        try:
            value = item.in_thread(conn)
        except Exception as exc:
            results.append((item, None, exc))
            if alone:
                conn.rollback()
            else:
                conn.execute("ROLLBACK TO w")
                conn.execute("RELEASE w")
        else:
            if not alone:
                conn.execute("RELEASE w")
            results.append((item, value, None))
    if conn.in_transaction:
        conn.execute("COMMIT")
        return True
    return False


async def _outcome(call: Awaitable[T]) -> tuple[T, BaseException | None]:
    """``call``'s own outcome, waited for through cancellations (it runs on in SQLite's thread
    whatever happens to this task), and the cancellation that arrived meanwhile."""
    running = asyncio.ensure_future(call)
    stopped: BaseException | None = None
    while True:
        try:
            return await asyncio.shield(running), stopped
        except asyncio.CancelledError as exc:
            if running.cancelled():
                raise  # the call itself was cancelled (loop shutdown): it did not run
            stopped = exc


def _answer(results: list[tuple[_Write, Any, Exception | None]]) -> None:
    for item, value, error in results:
        if item.done.done():
            continue
        if error is None:
            item.done.set_result(value)
        else:
            item.done.set_exception(error)


def _batch_error(exc: BaseException) -> Exception:
    """What a caller of a failed batch hears: the error itself, or a RuntimeError for a
    non-Exception (the writer task was cancelled)."""
    if isinstance(exc, Exception):
        return exc
    return RuntimeError(f"the write was not committed: {type(exc).__name__}")


async def _enter_wal(conn: aiosqlite.Connection, *, timeout_ms: int) -> None:
    """Switch to WAL, retrying while another process holds the lock the switch needs.

    Two processes opening a brand-new file at once can both try the switch; SQLite answers
    the loser "database is locked" at once, without its busy handler. WAL is stored in the
    file, so once either succeeds the other's retry is a no-op.
    """
    delay_s = 0.005
    deadline = asyncio.get_running_loop().time() + timeout_ms / 1000
    while True:
        try:
            await conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or asyncio.get_running_loop().time() > deadline:
                raise
        await asyncio.sleep(delay_s)
        delay_s = min(delay_s * 2, 0.2)
