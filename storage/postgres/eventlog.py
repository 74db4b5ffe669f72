"""The session event log in PostgreSQL: :class:`engine.ports.EventLog` (docs/storage.md).

Rows as in SQLite: ``(session_id, seq, type, at, payload)``, ``payload`` the event's whole
JSON. An append is one statement, so one round trip and one implicit transaction (the commit is
the acknowledgement): it upserts the session's ``session_heads`` row, which adds the append's
length to ``last_seq`` under that row's lock (so two writers of one session, in any process,
queue there and never take the same seq) and updates the start-up marks; inserts the events
at the seqs after the old ``last_seq``; and inserts the goal claims the engine derived
(``engine.events.goal_claim``) into ``goal_revisions``, whose primary key refuses a claim the
session already holds. A refused claim fails the statement: nothing of the append commits,
the head included, so the log stays dense.

With a :class:`storage.postgres.leases.LeaseFence` (a replica among several), the same statement
first reads the session's chat lease ``FOR SHARE`` at the epoch this replica holds; when that is
no longer current, the head upsert selects nothing, nothing is written, and the append raises
``LeaseLost`` (docs/storage.md, "Leases and fencing").
"""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from typing import NoReturn

import asyncpg

from engine.errors import AppendConflict, LeaseLost
from engine.events import SessionEvent, StoredEvent, goal_claim
from engine.ports import Clock, check_types
from engine.recovery import attention_marks
from storage.eventlog import decode_rows, gc_paused
from storage.postgres.db import PgDatabase
from storage.postgres.inbox import mark_in, open_claim
from storage.postgres.leases import LeaseFence

_APPEND = """
WITH head AS (
    INSERT INTO session_heads AS h (session_id, last_seq, open_turn, live_goal, undecided)
    VALUES ($1, $2::bigint, COALESCE($4::boolean, false), COALESCE($5::boolean, false),
            COALESCE($6::boolean, false))
    ON CONFLICT (session_id) DO UPDATE SET
        last_seq = h.last_seq + $2::bigint,
        open_turn = COALESCE($4::boolean, h.open_turn),
        live_goal = COALESCE($5::boolean, h.live_goal),
        undecided = COALESCE($6::boolean, h.undecided)
    RETURNING h.last_seq - $2::bigint AS base
), appended AS (
    INSERT INTO events (session_id, seq, type, at, payload)
    SELECT $1, head.base + u.ord, u.type, $3::double precision, u.payload
    FROM head, unnest($7::text[], $8::text[]) WITH ORDINALITY AS u(type, payload, ord)
), claimed AS (
    INSERT INTO goal_revisions (session_id, goal_id, revision, seq)
    SELECT $1, g.goal_id, g.revision, head.base + g.ord
    FROM head, unnest($9::text[], $10::bigint[], $11::bigint[]) AS g(goal_id, revision, ord)
)
SELECT base FROM head
"""

# The fenced append: the same, with the head upsert conditional on the chat's lease row ($12
# chat, $13 replica, $14 epoch) read FOR SHARE in the same statement. No row: no head, so
# nothing is inserted and no base is returned.
_HEAD_VALUES = _APPEND[_APPEND.index("    VALUES ($1") : _APPEND.index("    ON CONFLICT")]
_APPEND_FENCED = (
    "WITH fence AS (\n"
    "    SELECT 1 FROM chat_leases WHERE chat = $12 AND replica = $13 AND epoch = $14 FOR SHARE\n"
    "), "
    + _APPEND.strip()
    .removeprefix("WITH ")
    .replace(
        _HEAD_VALUES,
        "    SELECT $1, $2::bigint, COALESCE($4::boolean, false),\n"
        "           COALESCE($5::boolean, false), COALESCE($6::boolean, false) FROM fence\n",
    )
)

_SELECT = "SELECT seq, at, payload FROM events WHERE session_id = $1 AND seq > $2 ORDER BY seq"
_SELECT_TYPES = (
    "SELECT seq, at, payload FROM events "
    "WHERE session_id = $1 AND seq > $2 AND type = ANY($3::text[]) ORDER BY seq"
)


class PgEventLog:
    """:class:`engine.ports.EventLog` over a :class:`storage.postgres.db.PgDatabase`."""

    def __init__(
        self, db: PgDatabase, *, clock: Clock = time.time, fence: LeaseFence | None = None
    ) -> None:
        """``fence``: this replica's leases; every append for a bound session checks them."""
        self._db = db
        self._clock = clock
        self._fence = fence

    async def append(self, session_id: str, events: Sequence[SessionEvent]) -> list[StoredEvent]:
        """Commit ``events`` in one statement with dense ``seq`` values; durable on return.

        Raises ``AppendConflict`` (nothing committed) when a ``goal/change``'s
        ``(goal id, revision)`` is already in this session's log or twice in ``events``, and
        ``LeaseLost`` (nothing committed) when the store is fenced and this replica's epoch
        for the session's chat is no longer current.
        """
        if not events:
            return []
        stamp = None if self._fence is None else await self._fence.stamp(session_id)
        types = [event.type for event in events]
        payloads = [event.model_dump_json() for event in events]
        claims = [(i, goal_claim(event)) for i, event in enumerate(events, start=1)]
        taken = [(i, key) for i, key in claims if key is not None]
        marks = attention_marks(events)
        at = self._clock()
        fenced: tuple[object, ...] = ()
        if stamp is not None:
            assert self._fence is not None
            fenced = (stamp[0], self._fence.replica, stamp[1])
        statement = _APPEND_FENCED if fenced else _APPEND
        args = (
            session_id,
            len(events),
            at,
            *marks.row(),
            types,
            payloads,
            [key[0] for _, key in taken],
            [key[1] for _, key in taken],
            [i for i, _ in taken],
            *fenced,
        )
        # The first append of an update being processed marks it done in its own
        # transaction (storage.postgres.inbox): its events are never appended twice.
        claim = open_claim()
        try:
            if claim is None:
                base = await self._db.pool.fetchval(statement, *args)
            else:
                async with self._db.pool.acquire() as conn, conn.transaction():
                    base = await conn.fetchval(statement, *args)
                    if base is None:
                        # Raised inside: the transaction rolls back, the mark with it.
                        self._lost(session_id, stamp)
                    await mark_in(conn, claim, at)
                claim.done = True
        except asyncpg.UniqueViolationError as exc:
            if exc.constraint_name != "goal_revisions_pkey":
                raise
            raise AppendConflict(
                f"a goal revision in this append is already taken in session {session_id}: "
                + ", ".join(f"{g} r{r}" for _, (g, r) in taken)
            ) from exc
        if base is None:
            self._lost(session_id, stamp)
        last = int(base)
        return [
            StoredEvent(session_id=session_id, seq=last + i, at=at, event=event)
            for i, event in enumerate(events, start=1)
        ]

    @staticmethod
    def _lost(session_id: str, stamp: tuple[str, int] | None) -> NoReturn:
        assert stamp is not None  # only the fenced statement can select no head
        raise LeaseLost(
            f"session {session_id}: chat {stamp[0]} is no longer held at epoch {stamp[1]}"
        )

    async def needs_attention(self) -> list[str]:
        """Sessions whose marks say start-up must load them, in id order; no log is read."""
        rows = await self._db.pool.fetch(
            "SELECT session_id FROM session_heads "
            "WHERE open_turn OR live_goal OR undecided ORDER BY session_id"
        )
        return [str(row[0]) for row in rows]

    async def read(
        self, session_id: str, *, after_seq: int = 0, types: Collection[str] | None = None
    ) -> list[StoredEvent]:
        """Events with ``seq > after_seq`` in order, only of ``types`` when given (filtered in
        SQL); raises ``CorruptState`` on a bad row."""
        with gc_paused():
            if types is None:
                rows = await self._db.pool.fetch(_SELECT, session_id, after_seq)
            else:
                wanted = sorted(check_types(types))
                if not wanted:
                    return []
                rows = await self._db.pool.fetch(_SELECT_TYPES, session_id, after_seq, wanted)
            return decode_rows(session_id, rows)

    async def read_types_since(
        self, types: Collection[str], *, since_at: float
    ) -> list[StoredEvent]:
        """Events of ``types`` from every session appended at or after ``since_at``, in ``at``
        order (the usage meter's start-up read; indexed on ``(type, at)``)."""
        wanted = sorted(check_types(types))
        if not wanted:
            return []
        with gc_paused():
            rows = await self._db.pool.fetch(
                "SELECT session_id, seq, at, payload FROM events "
                "WHERE type = ANY($1::text[]) AND at >= $2 ORDER BY at, session_id, seq",
                wanted,
                since_at,
            )
            out: list[StoredEvent] = []
            for session_id, seq, at, payload in rows:
                out.extend(decode_rows(session_id, [(seq, at, payload)]))
            return out

    async def last_command(self, name: str) -> StoredEvent | None:
        """The newest ``command/run`` named ``name`` in any session (greatest ``at``, then the
        later seq), or ``None``: one lookup in ``events_command_name``."""
        row = await self._db.pool.fetchrow(
            "SELECT session_id, seq, at, payload FROM events "
            "WHERE type = 'command/run' AND ((payload::json) ->> 'name') = $1 "
            "ORDER BY at DESC, seq DESC LIMIT 1",
            name,
        )
        if row is None:
            return None
        return decode_rows(str(row[0]), [(row[1], row[2], row[3])])[0]


__all__ = ["PgEventLog"]
