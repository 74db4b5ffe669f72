"""A PostgreSQL database for plangate: an asyncpg pool, the schema migrated on open, and the
bot's key-value ``meta`` table (docs/storage.md, "PostgreSQL").

Durability is the server's: a statement's commit returns once PostgreSQL has flushed its WAL
(``synchronous_commit`` as the server is configured, on by default), so an acknowledged append
survives the death of plangate's process and, with the server's defaults, of the server's.
Every write is one transaction; most are one statement (the append is one, see
``storage.postgres.eventlog``), so no batching is needed: the server does its own group commit
across connections.
"""

from __future__ import annotations

from types import TracebackType

import asyncpg

from storage.postgres.migrations import migrate, schema_version

# Connections in the pool: the engine's concurrent turns and the bot's handlers share them; a
# write holds one for one round trip.
DEFAULT_POOL_SIZE = 10


async def probe(url: str, *, timeout_s: float = 5.0) -> tuple[str, int]:
    """Connect to ``url`` without changing anything: the server's version and the schema
    version found (0 for a database plangate has not used yet). ``plangate doctor`` asks."""
    conn = await asyncpg.connect(url, timeout=timeout_s)
    try:
        server = str(await conn.fetchval("SHOW server_version"))
        return server, await schema_version(conn)
    finally:
        await conn.close()


class PgDatabase:
    """An open PostgreSQL database; get one with :meth:`open` and close it when done."""

    def __init__(self, pool: asyncpg.Pool, url: str) -> None:
        self._pool = pool
        self._url = url

    @classmethod
    async def open(cls, url: str, *, pool_size: int = DEFAULT_POOL_SIZE) -> PgDatabase:
        """Connect to ``url`` and migrate its schema (once, under an advisory lock).

        Raises ``CorruptState`` for a database written by a newer plangate, and asyncpg's or
        the OS's error when the server cannot be reached.
        """
        pool = await asyncpg.create_pool(url, min_size=1, max_size=pool_size)
        try:
            async with pool.acquire() as conn:
                await migrate(conn)
        except BaseException:
            await pool.close()
            raise
        return cls(pool, url)

    @property
    def pool(self) -> asyncpg.Pool:
        """The connection pool the stores share."""
        return self._pool

    async def connect(self) -> asyncpg.Connection:
        """A connection of its own, outside the pool (a ``LISTEN`` holds one for its life);
        the caller closes it."""
        return await asyncpg.connect(self._url)

    async def close(self) -> None:
        """Close every connection (waits for the ones in use to be released)."""
        await self._pool.close()

    async def __aenter__(self) -> PgDatabase:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def schema_version(self) -> int:
        """The version the schema is at (``plangate doctor`` reports it)."""
        async with self._pool.acquire() as conn:
            return await schema_version(conn)

    async def get_meta(self, key: str) -> str | None:
        """The bot's own small state (e.g. the last processed ``update_id``), or ``None``."""
        value = await self._pool.fetchval("SELECT value FROM meta WHERE key = $1", key)
        return None if value is None else str(value)

    async def set_meta(self, key: str, value: str) -> None:
        """Set (or replace) one metadata value; durable when this returns."""
        await self._pool.execute(
            "INSERT INTO meta (key, value) VALUES ($1, $2) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            key,
            value,
        )

    async def set_meta_once(self, key: str, value: str) -> str:
        """Set ``key`` unless it is set; the value it holds afterwards (one statement, so of
        several replicas racing, all get the first one's value)."""
        while True:
            found = await self._pool.fetchval(
                "WITH ins AS (INSERT INTO meta (key, value) VALUES ($1, $2) "
                "ON CONFLICT (key) DO NOTHING RETURNING value) "
                "SELECT value FROM ins UNION ALL SELECT value FROM meta WHERE key = $1 LIMIT 1",
                key,
                value,
            )
            # None: another insert committed after this statement's snapshot was taken (so
            # neither branch saw a row); the next statement sees it.
            if found is not None:
                return str(found)


__all__ = ["PgDatabase"]
