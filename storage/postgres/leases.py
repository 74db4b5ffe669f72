"""Chat leases in PostgreSQL, and the fence every write for a chat passes (docs/storage.md,
"Leases and fencing").

``chat_leases`` has one row per chat ever leased: ``(chat, replica, epoch, expires_at)``. The row
is never deleted, so an epoch is never handed out twice: :meth:`PgChatLeases.acquire` takes a
free, released or lapsed lease with ``epoch + 1`` and renews the holder's live one with its epoch
kept, in one statement on the server's clock (replicas' clocks never meet).

:class:`LeaseFence` is one replica's side: the epochs it holds (kept up to date by its
:class:`PgChatLeases`) and the chat each session writes for (the session's stored binding; a
thread's writes go to its parent's lease). The event log puts the fence in the append's own
statement (the lease row read ``FOR SHARE``, so a takeover waits for an append in flight and
every later append sees the new epoch); the plan files hold the same row lock across their
write (:meth:`LeaseFence.holding`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg

from engine.errors import ConfigError, LeaseLost
from engine.keys import ChatKey
from engine.ports import Lease
from storage.postgres.db import PgDatabase

_NOW = "extract(epoch FROM now())::float8"

_ACQUIRE = f"""
INSERT INTO chat_leases AS l (chat, replica, epoch, expires_at)
VALUES ($1, $2, 1, {_NOW} + $3::float8)
ON CONFLICT (chat) DO UPDATE SET
    epoch = CASE WHEN l.replica = excluded.replica AND l.expires_at > {_NOW}
                 THEN l.epoch ELSE l.epoch + 1 END,
    replica = excluded.replica,
    expires_at = excluded.expires_at
WHERE l.replica = excluded.replica OR l.expires_at <= {_NOW}
RETURNING chat, replica, epoch, expires_at
"""

# How long an acquire waits for a row lock (an append or a sidecar write in flight on the
# holder), in milliseconds, before it answers "held": a stalled holder must not stall its
# peers' loops.
ACQUIRE_LOCK_TIMEOUT_MS = 2000

# The advisory lock space of replica names (the two-int key form; chat appends use space 1).
REPLICA_LOCK_SPACE = 2

# The fence's row lock, held by an append or a file write for a chat.
FENCE_ROW = "SELECT 1 FROM chat_leases WHERE chat = $1 AND replica = $2 AND epoch = $3 FOR SHARE"


def _lease(row: asyncpg.Record) -> Lease:
    return Lease(chat=str(row[0]), replica=str(row[1]), epoch=int(row[2]), expires_at=float(row[3]))


async def claim_replica(db: PgDatabase, replica: str) -> asyncpg.Connection:
    """Hold the name ``replica`` for this process's life: a session-level advisory lock on a
    connection of its own, which the caller closes when done (a process that dies lets the
    name go with its connection). Raises ``ConfigError`` while another live process holds it:
    two processes under one name would pass each other's fence, since a lease's
    ``(replica, epoch)`` would be the same for both."""
    conn = await db.connect()
    try:
        got = await conn.fetchval(
            "SELECT pg_try_advisory_lock($1, hashtext($2))", REPLICA_LOCK_SPACE, replica
        )
    except BaseException:
        await conn.close()
        raise
    if not got:
        await conn.close()
        raise ConfigError(
            f"PLANGATE_REPLICA_ID: a replica named {replica!r} is already running against this "
            "database; give each replica its own name (or unset it: host name and pid)"
        )
    return conn


class LeaseFence:
    """One replica's epochs, and the chat each session's writes are fenced on."""

    def __init__(self, db: PgDatabase, replica: str) -> None:
        self._db = db
        self.replica = replica
        self._epochs: dict[ChatKey, int] = {}
        self._rooms: dict[str, ChatKey] = {}

    def held(self, chat: ChatKey, epoch: int | None) -> None:
        """Record that this replica holds ``chat`` at ``epoch`` (``None``: not any more)."""
        if epoch is None:
            self._epochs.pop(chat, None)
        else:
            self._epochs[chat] = epoch

    def epoch(self, chat: ChatKey) -> int | None:
        """The epoch this replica holds ``chat`` at, or ``None``."""
        return self._epochs.get(chat)

    def forget_session(self, session_id: str) -> None:
        """The session's binding changed: look its chat up again at the next write."""
        self._rooms.pop(session_id, None)

    async def room_of(self, session_id: str) -> ChatKey | None:
        """The chat whose lease fences the session's writes (``None``: bound to no chat, as a
        fork is; its writes are not fenced). Cached once found: a binding moves only through
        this process's session store, which forgets it here."""
        room = self._rooms.get(session_id)
        if room is not None:
            return room
        value = await self._db.pool.fetchval(
            "SELECT COALESCE(parent, chat) FROM chat_bindings WHERE session_id = $1 "
            "ORDER BY chat LIMIT 1",
            session_id,
        )
        if value is None:
            return None
        self._rooms[session_id] = str(value)
        return self._rooms[session_id]

    async def stamp(self, session_id: str) -> tuple[ChatKey, int] | None:
        """The ``(chat, epoch)`` a write for the session must still hold, or ``None`` when the
        session is bound to no chat. Raises :class:`LeaseLost` when this replica does not hold
        the session's chat at all."""
        room = await self.room_of(session_id)
        if room is None:
            return None
        epoch = self._epochs.get(room)
        if epoch is None:
            raise LeaseLost(f"replica {self.replica} holds no lease on chat {room}")
        return room, epoch

    @asynccontextmanager
    async def holding(self, session_id: str) -> AsyncIterator[None]:
        """Hold the session's lease row (``FOR SHARE``) for the body: a takeover waits until
        the body is done, and the body does not run once another replica took the chat.

        Raises :class:`LeaseLost` (the body not run) when the epoch is no longer current.
        """
        stamp = await self.stamp(session_id)
        if stamp is None:
            yield
            return
        room, epoch = stamp
        async with self._db.pool.acquire() as conn, conn.transaction():
            if await conn.fetchval(FENCE_ROW, room, self.replica, epoch) is None:
                raise LeaseLost(f"chat {room}: epoch {epoch} of {self.replica} is not current")
            yield


class PgChatLeases:
    """:class:`engine.ports.ChatLeases` over a :class:`storage.postgres.db.PgDatabase`.

    With a ``fence``, the epochs its replica takes, renews, loses and releases are recorded
    there, so the fenced stores of that replica write at the current epoch.
    """

    def __init__(
        self,
        db: PgDatabase,
        *,
        fence: LeaseFence | None = None,
        lock_timeout_ms: int = ACQUIRE_LOCK_TIMEOUT_MS,
    ) -> None:
        self._db = db
        self._fence = fence
        self._lock_timeout_ms = int(lock_timeout_ms)

    def _record(self, chat: ChatKey, replica: str, lease: Lease | None) -> None:
        if self._fence is not None and replica == self._fence.replica:
            self._fence.held(chat, None if lease is None else lease.epoch)

    async def acquire(self, chat: ChatKey, replica: str, ttl_s: float) -> Lease | None:
        """Take or renew ``chat`` (see :class:`engine.ports.ChatLeases`); ``None`` while another
        replica holds it, or while its row is locked longer than the acquire waits."""
        try:
            async with self._db.pool.acquire() as conn, conn.transaction():
                await conn.execute(f"SET LOCAL lock_timeout = {self._lock_timeout_ms}")
                row = await conn.fetchrow(_ACQUIRE, chat, replica, ttl_s)
        except asyncpg.LockNotAvailableError:
            # The row is locked by a write in flight, maybe this replica's own: nothing is
            # known to have changed hands, so the fence keeps what it holds.
            return None
        lease = None if row is None else _lease(row)
        self._record(chat, replica, lease)
        return lease

    async def release(self, chat: ChatKey, replica: str) -> None:
        """Let ``chat`` go if ``replica`` holds it; the row (and its epoch) stays."""
        await self._db.pool.execute(
            "UPDATE chat_leases SET expires_at = 0 WHERE chat = $1 AND replica = $2", chat, replica
        )
        self._record(chat, replica, None)

    async def held_by(self, replica: str) -> list[Lease]:
        """``replica``'s live leases, by chat key."""
        rows = await self._db.pool.fetch(
            "SELECT chat, replica, epoch, expires_at FROM chat_leases "
            f"WHERE replica = $1 AND expires_at > {_NOW} ORDER BY chat",
            replica,
        )
        return [_lease(row) for row in rows]

    async def lapsed(self) -> list[ChatKey]:
        """Chats whose holder let the lease lapse without releasing it (it died or stalled;
        a replica restarted under the same name too): the chats to take over even when no
        update waits for them."""
        rows = await self._db.pool.fetch(
            "SELECT chat FROM chat_leases "
            f"WHERE expires_at > 0 AND expires_at <= {_NOW} ORDER BY chat"
        )
        return [str(row[0]) for row in rows]

    async def replicas(self) -> int:
        """How many replicas hold a live lease now (they share Telegram's overall limit)."""
        value = await self._db.pool.fetchval(
            f"SELECT count(DISTINCT replica) FROM chat_leases WHERE expires_at > {_NOW}"
        )
        return int(value or 0)

    async def holder(self, chat: ChatKey) -> Lease | None:
        """The live lease on ``chat``, if any."""
        row = await self._db.pool.fetchrow(
            "SELECT chat, replica, epoch, expires_at FROM chat_leases "
            f"WHERE chat = $1 AND expires_at > {_NOW}",
            chat,
        )
        return None if row is None else _lease(row)


__all__ = [
    "ACQUIRE_LOCK_TIMEOUT_MS",
    "FENCE_ROW",
    "REPLICA_LOCK_SPACE",
    "LeaseFence",
    "PgChatLeases",
    "claim_replica",
]
