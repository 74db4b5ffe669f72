"""The SQLite database: one aiosqlite connection, its pragmas, its lock (docs/storage.md).

Durability: WAL journal with ``synchronous=FULL``. A commit returns only after the WAL frame is
written *and* fsync'd, so an acknowledged append survives SIGKILL of the process (``NORMAL``
would already do that: the bytes are in the OS page cache) and also a power cut or kernel crash
(which ``NORMAL`` may roll back). It matches the plan sidecar, which is fsync'd too. Cost: one
fsync per transaction, 0.2-3 ms on the development VM depending on its load.

Concurrency: inside a process every statement goes through one connection under one
:class:`asyncio.Lock` (a transaction spans several awaits, and a reader on the same connection
would otherwise see another coroutine's uncommitted rows). Across processes, writers serialise
on SQLite's own write lock: transactions begin with ``BEGIN IMMEDIATE`` and wait up to
``busy_timeout_ms`` for it.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

import aiosqlite

from storage.migrations import migrate

DATABASE_NAME = "plangate.db"
DEFAULT_BUSY_TIMEOUT_MS = 10_000


def database_path(home: Path) -> Path:
    """Where plangate keeps its database: ``<home>/plangate.db``."""
    return home / DATABASE_NAME


class Database:
    """An open plangate database; get one with :meth:`open` and close it when done."""

    def __init__(self, conn: aiosqlite.Connection, path: Path) -> None:
        self._conn = conn
        self._path = path
        self._lock = asyncio.Lock()

    @classmethod
    async def open(
        cls, path: str | os.PathLike[str], *, busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS
    ) -> Database:
        """Open (creating folder and file if needed) and migrate the database at ``path``.

        Raises ``CorruptState`` when the file was written by a newer plangate.
        """
        file = Path(path)
        file.parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: autocommit, so transactions are exactly the BEGIN/COMMIT we send.
        conn = await aiosqlite.connect(file, isolation_level=None)
        try:
            await conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms):d}")
            await _enter_wal(conn, timeout_ms=busy_timeout_ms)
            await conn.execute("PRAGMA synchronous = FULL")
            await migrate(conn)
        except BaseException:
            await conn.close()
            raise
        return cls(conn, file)

    @property
    def path(self) -> Path:
        return self._path

    async def close(self) -> None:
        """Close the connection; waits for a statement in flight."""
        async with self._lock:
            await self._conn.close()

    async def __aenter__(self) -> Database:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[aiosqlite.Connection]:
        """A write transaction (``BEGIN IMMEDIATE``) under the lock: commit on exit, roll back
        on any exception. The commit is the durability point."""
        async with self._lock:
            try:
                await self._conn.execute("BEGIN IMMEDIATE")
                yield self._conn
                await self._conn.execute("COMMIT")
            except BaseException:
                # Not `if in_transaction: ROLLBACK`: a cancellation can land while a BEGIN is
                # still queued in aiosqlite's thread, which would then open a transaction after
                # the check. rollback() queues behind it and is a no-op when none is open.
                await self._conn.rollback()
                raise

    @asynccontextmanager
    async def reading(self) -> AsyncIterator[aiosqlite.Connection]:
        """The connection under the lock, for reads outside any transaction."""
        async with self._lock:
            yield self._conn

    async def fetch_all(self, sql: str, parameters: Sequence[Any] = ()) -> list[Any]:
        """All rows of one query, in one trip to aiosqlite's thread, under the lock."""
        async with self._lock:
            return list(await self._conn.execute_fetchall(sql, parameters))

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
        async with self.transaction() as conn:
            await conn.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

    async def delete_meta(self, key: str) -> None:
        """Remove one metadata value; no error when it is absent."""
        async with self.transaction() as conn:
            await conn.execute("DELETE FROM meta WHERE key = ?", (key,))


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
