"""The session event log in SQLite: :class:`engine.ports.EventLog` (docs/storage.md).

A row is ``(session_id, seq, type, at, payload)``. ``payload`` is the event's whole JSON,
``type`` included: the ``type`` column is there for queries, and a payload that carries its
own discriminator goes from stored text to an event in one pydantic ``validate_json`` call.

An append is one write of the database's group commit (``Database.write``): the next ``seq`` is
read inside a ``BEGIN IMMEDIATE`` transaction, under SQLite's write lock, so two processes on one
file never hand out the same one; a ``goal/change`` claims its ``(goal id, revision)`` in
``goal_revisions`` in the same transaction (the compare-and-set); and the session's attention
marks (``engine.recovery.attention_marks``) are updated with it, so start-up can ask which
sessions need loading without reading their logs.
"""

from __future__ import annotations

import gc
import json
import logging
import sqlite3
import time
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from pydantic import ValidationError

from engine.errors import AppendConflict, CorruptState
from engine.events import SESSION_EVENT_ADAPTER, SessionEvent, StoredEvent, goal_claim
from engine.ports import Clock, check_types
from engine.recovery import attention_marks
from storage.db import Database

_log = logging.getLogger("plangate.storage.eventlog")

# Rows per fetch on replay: large enough that the per-fetch thread hop vanishes, small enough
# to bound the raw text held at once.
_FETCH_ROWS = 4096

# A mark the append does not touch (NULL) keeps its stored value.
_UPSERT_MARKS = (
    "INSERT INTO session_marks (session_id, open_turn, live_goal, undecided) "
    "VALUES (?, COALESCE(?, 0), COALESCE(?, 0), COALESCE(?, 0)) "
    "ON CONFLICT (session_id) DO UPDATE SET "
    "open_turn = COALESCE(?, open_turn), live_goal = COALESCE(?, live_goal), "
    "undecided = COALESCE(?, undecided)"
)

_SELECT = "SELECT seq, at, payload FROM events WHERE session_id = ? AND seq > ? ORDER BY seq"


def _select_types(count: int) -> str:
    """The filtered replay query for ``count`` types (still walks the primary key in seq order;
    a non-matching row costs the ``type`` column only, its payload is never fetched)."""
    marks = ", ".join("?" * count)
    return (
        "SELECT seq, at, payload FROM events "
        f"WHERE session_id = ? AND seq > ? AND type IN ({marks}) ORDER BY seq"
    )


@contextmanager
def gc_paused() -> Iterator[None]:
    """Hold the cyclic GC off while a log is read.

    Each event is several GC-tracked objects that all survive, so the collections they trigger
    keep re-walking everything read so far (and slow the fetch thread too): a read of 100,000
    events took twice as long with the GC on (docs/storage.md). Reference counting still frees
    as usual; the pause ends with the read, even when it fails or is cancelled.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def decode_rows(session_id: str, rows: Sequence[Any]) -> list[StoredEvent]:
    """Rows ``(seq, at, payload)`` to stored events; a row that does not parse fails loudly.

    One ``validate_json`` per payload, straight from the stored text into the models (measured
    faster than validating the batch as one JSON array, which needs a join first). Positional
    ``StoredEvent`` arguments: keywords cost a third more, and this runs once per event.
    """
    validate = SESSION_EVENT_ADAPTER.validate_json
    out: list[StoredEvent] = []
    for seq, at, payload in rows:
        try:
            event = validate(payload)
        except ValidationError as exc:
            found = _flattened(session_id, seq, payload, exc)
            if found is None:
                first = exc.errors()[0]
                where = ".".join(str(part) for part in first["loc"])
                raise CorruptState(
                    f"session {session_id} event {seq} does not parse: {where}: {first['msg']}"
                ) from exc
            event = found
        out.append(StoredEvent(session_id, seq, at, event))
    return out


# Values nested deeper than this in an old row are replaced by DROPPED_TEXT when it is read.
_KEEP_DEPTH = 48
DROPPED_TEXT = "(dropped: nested too deep to store)"


def _flattened(
    session_id: str, seq: int, payload: str, exc: ValidationError
) -> SessionEvent | None:
    """A row too deeply nested for the JSON reader, read anyway with its deep parts dropped.

    An earlier plangate stored tool calls whose arguments nested hundreds deep (the model's
    arguments are refused on arrival now, engine.model.arguments); the reader gives up past
    about 200 levels, and such a row made its session fail on every turn. It is read with
    Python's parser instead and everything below :data:`_KEEP_DEPTH` levels is replaced by a
    note, so the session loads. ``None`` for any other failure (a truly corrupt row).
    """
    if not any("recursion limit" in str(error.get("msg", "")) for error in exc.errors()):
        return None
    try:
        value = json.loads(payload)
        event = SESSION_EVENT_ADAPTER.validate_python(_cut_depth(value, _KEEP_DEPTH))
    except (ValueError, RecursionError):  # ValidationError is a ValueError
        return None
    _log.warning(
        "plangate.storage.eventlog.too_deep session=%s seq=%d: read with its deep parts dropped",
        session_id,
        seq,
    )
    return event


def _cut_depth(value: Any, depth: int) -> Any:
    """``value`` with every list or object below ``depth`` levels replaced by a note."""
    if isinstance(value, dict):
        if depth <= 0:
            return DROPPED_TEXT
        return {k: _cut_depth(v, depth - 1) for k, v in value.items()}
    if isinstance(value, list):
        if depth <= 0:
            return DROPPED_TEXT
        return [_cut_depth(v, depth - 1) for v in value]
    return value


class SqliteEventLog:
    """:class:`engine.ports.EventLog` over a :class:`storage.db.Database`."""

    def __init__(self, db: Database, *, clock: Clock = time.time) -> None:
        self._db = db
        self._clock = clock

    async def append(self, session_id: str, events: Sequence[SessionEvent]) -> list[StoredEvent]:
        """Commit ``events`` in one transaction with dense ``seq`` values; durable on return.

        Raises ``AppendConflict`` (nothing committed) when a ``goal/change``'s
        ``(goal id, revision)`` is already in this session's log or twice in ``events``.
        """
        if not events:
            return []
        payloads = [(event.type, event.model_dump_json()) for event in events]
        goal_keys = [goal_claim(event) for event in events]
        marks = attention_marks(events)
        at = self._clock()

        def work(conn: sqlite3.Connection) -> int:
            # In the writer connection's thread, whole (Database.write_in_thread): one trip
            # for the batch, where each statement awaited here would be one.
            last = int(
                conn.execute(
                    "SELECT COALESCE(MAX(seq), 0) FROM events WHERE session_id = ?", (session_id,)
                ).fetchone()[0]
            )
            conn.executemany(
                "INSERT INTO events (session_id, seq, type, at, payload) VALUES (?, ?, ?, ?, ?)",
                [
                    (session_id, last + i, type_, at, payload)
                    for i, (type_, payload) in enumerate(payloads, start=1)
                ],
            )
            claims = [
                (session_id, key[0], key[1], last + i)
                for i, key in enumerate(goal_keys, start=1)
                if key is not None
            ]
            if claims:
                try:
                    conn.executemany(
                        "INSERT INTO goal_revisions (session_id, goal_id, revision, seq) "
                        "VALUES (?, ?, ?, ?)",
                        claims,
                    )
                except sqlite3.IntegrityError as exc:
                    # The write rolls back as the exception leaves it: nothing commits.
                    raise AppendConflict(
                        f"a goal revision in this append is already taken in session "
                        f"{session_id}: {', '.join(f'{g} r{r}' for _, g, r, _ in claims)}"
                    ) from exc
            if marks.touched:
                conn.execute(_UPSERT_MARKS, (session_id, *marks.row(), *marks.row()))
            return last

        last = await self._db.write_in_thread(work)
        return [
            StoredEvent(session_id=session_id, seq=last + i, at=at, event=event)
            for i, event in enumerate(events, start=1)
        ]

    async def needs_attention(self) -> list[str]:
        """Sessions whose marks say start-up must load them (open turn, live goal, undecided
        ``/plan`` or approval), in id order; one indexed query, no log is read."""
        rows = await self._db.fetch_all(
            "SELECT session_id FROM session_marks "
            "WHERE open_turn OR live_goal OR undecided ORDER BY session_id"
        )
        return [str(row[0]) for row in rows]

    async def read(
        self, session_id: str, *, after_seq: int = 0, types: Collection[str] | None = None
    ) -> list[StoredEvent]:
        """Events with ``seq > after_seq`` in order, only of ``types`` when given (filtered in
        SQL, so other rows are never decoded); raises ``CorruptState`` on a bad row."""
        query, params = _SELECT, [session_id, after_seq]
        if types is not None:
            wanted = sorted(check_types(types))  # sorted: one statement text per set, cached
            if not wanted:
                return []
            query, params = _select_types(len(wanted)), [session_id, after_seq, *wanted]
        out: list[StoredEvent] = []
        with gc_paused():
            async with (
                self._db.reading() as conn,
                conn.execute(query, params) as cursor,
            ):
                while rows := list(await cursor.fetchmany(_FETCH_ROWS)):
                    out.extend(decode_rows(session_id, rows))
        return out

    async def read_types_since(
        self, types: Collection[str], *, since_at: float
    ) -> list[StoredEvent]:
        """Events of ``types`` from every session appended at or after ``since_at``, in ``at``
        order (the usage meter's start-up read; indexed on ``(type, at)``)."""
        wanted = sorted(check_types(types))
        if not wanted:
            return []
        marks = ", ".join("?" * len(wanted))
        query = (
            "SELECT session_id, seq, at, payload FROM events "
            f"WHERE type IN ({marks}) AND at >= ? ORDER BY at"
        )
        validate = SESSION_EVENT_ADAPTER.validate_json
        out: list[StoredEvent] = []
        with gc_paused():
            async with (
                self._db.reading() as conn,
                conn.execute(query, [*wanted, since_at]) as cursor,
            ):
                while rows := list(await cursor.fetchmany(_FETCH_ROWS)):
                    for session_id, seq, at, payload in rows:
                        try:
                            event = validate(payload)
                        except ValidationError:
                            out.extend(decode_rows(session_id, [(seq, at, payload)]))  # raises
                            continue
                        out.append(StoredEvent(session_id, seq, at, event))
        return out

    async def last_command(self, name: str) -> StoredEvent | None:
        """The newest ``command/run`` named ``name`` in any session (greatest ``at``, then the
        later row), or ``None``: one lookup in ``events_command_name`` (migration 4), whose
        expression and condition the query repeats so the planner can use it."""
        row = await self._db.fetch_one(
            "SELECT session_id, seq, at, payload FROM events "
            "WHERE type = 'command/run' AND json_extract(payload, '$.name') = ? "
            "ORDER BY at DESC, rowid DESC LIMIT 1",
            (name,),
        )
        if row is None:
            return None
        return decode_rows(str(row[0]), [(row[1], row[2], row[3])])[0]
