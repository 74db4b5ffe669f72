"""The update inbox in PostgreSQL: what any replica's webhook received, until the chat's owner
has processed it (docs/webhook.md, "Several replicas").

A replica that receives an update stores it (:meth:`PgUpdateInbox.put`: one statement; a
re-delivery of the same id changes nothing) and only then answers the POST, so an update
Telegram saw acknowledged is in the database. The replica holding the chat's lease reads the
chat's pending updates in order (:meth:`pending`) and marks each done once processed.

"Done" is recorded with the update's first event (see :func:`processing`): while the owner
runs an update's handlers inside ``processing(claim)``, the first event-log append of that task
commits the mark in its own transaction (``storage.postgres.eventlog``), so an update whose
events were appended is never processed again, and one that appended nothing is processed
again by the next owner if its processor died before :meth:`mark_done`.

Each insert notifies ``plangate_inbox`` (payload: the chat key) in its transaction, so owners
may wake at once; nothing depends on it (owners poll too).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass

import asyncpg

from engine.keys import ChatKey
from engine.ports import Clock, Lease
from storage.postgres.db import PgDatabase

_log = logging.getLogger("plangate.storage.inbox")

# The LISTEN/NOTIFY channel an insert notifies (payload: the chat key).
INBOX_CHANNEL = "plangate_inbox"

_PUT = """
WITH ins AS (
    INSERT INTO update_inbox (source, update_id, ord, chat, payload, received_at)
    VALUES ($1, $2, COALESCE($3::bigint, nextval('update_inbox_arrival')), $4, $5, $6)
    ON CONFLICT (source, update_id) DO NOTHING
    RETURNING chat
)
SELECT pg_notify('plangate_inbox', chat) FROM ins
"""

MARK_DONE = (
    "UPDATE update_inbox SET done_at = $3, done_by = $4 "
    "WHERE source = $1 AND update_id = $2 AND done_at IS NULL"
)
# The same, only while the replica still holds the chat at the epoch it processed under
# ($5 chat, $6 epoch): an update whose handlers ran after the chat moved on stays pending.
_MARK_DONE_FENCED = (
    MARK_DONE + " AND EXISTS (SELECT 1 FROM chat_leases "
    "WHERE chat = $5 AND replica = $4 AND epoch = $6 FOR SHARE)"
)


@dataclass(frozen=True, slots=True)
class InboxUpdate:
    """One stored update: ``source`` (``telegram``), its own id, its order in the chat, the
    chat's key (a group's, for its topics too) and the payload as received."""

    source: str
    update_id: str
    ord: int
    chat: ChatKey
    payload: str


@dataclass(slots=True)
class UpdateClaim:
    """The update a task is processing: its first append marks it done (``done``), until the
    handlers return (``open`` false: appends of turns they started later mark nothing)."""

    source: str
    update_id: str
    replica: str
    # The lease the owner processes it under (None: unfenced, one process).
    lease: Lease | None = None
    open: bool = True
    done: bool = False


_CLAIM: contextvars.ContextVar[UpdateClaim | None] = contextvars.ContextVar(
    "plangate_update_claim", default=None
)


@contextlib.contextmanager
def processing(claim: UpdateClaim) -> Iterator[UpdateClaim]:
    """Run an update's handlers inside this: their first append carries the done mark.

    Tasks started inside inherit the claim; it closes on exit, so their later appends do not
    touch the inbox."""
    token = _CLAIM.set(claim)
    try:
        yield claim
    finally:
        claim.open = False
        _CLAIM.reset(token)


def open_claim() -> UpdateClaim | None:
    """The claim an append in this task should mark done with its events, if any."""
    claim = _CLAIM.get()
    return claim if claim is not None and claim.open and not claim.done else None


async def mark_in(conn: asyncpg.Connection, claim: UpdateClaim, at: float) -> None:
    """Mark ``claim``'s update done on ``conn``, inside the caller's transaction (the caller
    sets ``claim.done`` once that transaction committed)."""
    await conn.execute(MARK_DONE, claim.source, claim.update_id, at, claim.replica)


class PgUpdateInbox:
    """The ``update_inbox`` table of a :class:`PgDatabase`."""

    def __init__(self, db: PgDatabase, *, clock: Clock = time.time, fenced: bool = False) -> None:
        """``fenced``: the chats' leases are in this database (``chat_leases``), and
        :meth:`mark_done` checks the claim's lease there."""
        self._db = db
        self._clock = clock
        self._fenced = fenced

    async def put(
        self, source: str, update_id: str, chat: ChatKey, payload: str, *, ord: int | None
    ) -> bool:
        """Store an update (durable on return); False when this id was stored before.

        ``ord``: its order within the chat (Telegram's update_id); ``None`` takes the next
        arrival number (a source whose ids carry no order)."""
        rows = await self._db.pool.fetch(_PUT, source, update_id, ord, chat, payload, self._clock())
        return bool(rows)

    async def pending_chats(self, source: str | None = None) -> list[ChatKey]:
        """The chats with updates not yet done (of ``source`` only, when given), by key."""
        rows = await self._db.pool.fetch(
            "SELECT DISTINCT chat FROM update_inbox WHERE done_at IS NULL "
            "AND ($1::text IS NULL OR source = $1) ORDER BY chat",
            source,
        )
        return [str(row[0]) for row in rows]

    async def pending(
        self, chat: ChatKey, *, source: str | None = None, limit: int = 100
    ) -> list[InboxUpdate]:
        """The chat's updates not yet done (of ``source`` only, when given), oldest first
        (by ``ord``)."""
        rows = await self._db.pool.fetch(
            "SELECT source, update_id, ord, chat, payload FROM update_inbox "
            "WHERE chat = $1 AND done_at IS NULL AND ($3::text IS NULL OR source = $3) "
            "ORDER BY ord, received_at LIMIT $2",
            chat,
            limit,
            source,
        )
        return [InboxUpdate(str(r[0]), str(r[1]), int(r[2]), str(r[3]), str(r[4])) for r in rows]

    async def mark_done(self, claim: UpdateClaim) -> bool:
        """Mark the update done if nothing did yet; True when this call did.

        Fenced, with ``claim.lease``: only while that lease is still current; False leaves the
        update pending for the chat's next owner."""
        args: tuple[object, ...] = (claim.source, claim.update_id, self._clock(), claim.replica)
        if claim.lease is None or not self._fenced:
            status = await self._db.pool.execute(MARK_DONE, *args)
        else:
            fence = (claim.lease.chat, claim.lease.epoch)
            status = await self._db.pool.execute(_MARK_DONE_FENCED, *args, *fence)
        marked = str(status).endswith(" 1")
        claim.done = claim.done or marked
        return marked

    async def prune(self, *, older_than_s: float) -> int:
        """Delete updates done more than ``older_than_s`` ago; how many went.

        Telegram re-delivers for at most a day and numbers anew only after a week without
        updates, so rows a day old are never needed for deduplication again."""
        status = await self._db.pool.execute(
            "DELETE FROM update_inbox WHERE done_at IS NOT NULL AND done_at < $1",
            self._clock() - older_than_s,
        )
        return int(str(status).rsplit(" ", 1)[-1])

    @contextlib.asynccontextmanager
    async def listening(self, wake: Callable[[str], None]) -> AsyncIterator[bool]:
        """Call ``wake(chat)`` on each notification while inside; yields whether it listens.

        A connection of its own (not the pool's). If it cannot be opened, or drops later,
        the caller's polling still finds every update: notifications only save time."""
        conn: asyncpg.Connection | None = None

        def heard(_conn: object, _pid: int, _channel: str, payload: str) -> None:
            wake(payload)

        try:
            conn = await self._db.connect()
            await conn.add_listener(INBOX_CHANNEL, heard)
        except (OSError, asyncpg.PostgresError) as exc:
            _log.warning("plangate.inbox.listen_failed %s", type(exc).__name__)
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.close()
            conn = None
        try:
            yield conn is not None
        finally:
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.close()


__all__ = [
    "INBOX_CHANNEL",
    "MARK_DONE",
    "InboxUpdate",
    "PgUpdateInbox",
    "UpdateClaim",
    "mark_in",
    "open_claim",
    "processing",
]
