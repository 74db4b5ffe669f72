"""Copying a home's SQLite database into PostgreSQL (``plangate migrate --from sqlite:...``).

The SQLite file is opened (and so migrated to this plangate's schema) and read; every table is
copied with PostgreSQL's ``COPY`` in one transaction, so the target has all of it or none; the
session heads (PostgreSQL's last seq and start-up marks per session) are built from the events
and SQLite's marks; then each table's rows are counted on both sides. A target that already
holds sessions or events is refused: the copy never merges two homes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from storage.db import Database
from storage.postgres.db import PgDatabase

# Rows per COPY batch: bounds the memory one table's copy holds.
_BATCH = 4096

# (SQLite query, PostgreSQL table, its columns), in copy order.
_TABLES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "SELECT id, workspace, profile, created_at, parent_id FROM sessions",
        "sessions",
        ("id", "workspace", "profile", "created_at", "parent_id"),
    ),
    (
        "SELECT chat, kind, parent, session_id FROM chat_bindings",
        "chat_bindings",
        ("chat", "kind", "parent", "session_id"),
    ),
    (
        "SELECT session_id, seq, type, at, payload FROM events ORDER BY session_id, seq",
        "events",
        ("session_id", "seq", "type", "at", "payload"),
    ),
    (
        "SELECT session_id, goal_id, revision, seq FROM goal_revisions",
        "goal_revisions",
        ("session_id", "goal_id", "revision", "seq"),
    ),
    (
        "SELECT e.session_id, MAX(e.seq), COALESCE(m.open_turn, 0) != 0, "
        "COALESCE(m.live_goal, 0) != 0, COALESCE(m.undecided, 0) != 0 "
        "FROM events AS e LEFT JOIN session_marks AS m ON m.session_id = e.session_id "
        "GROUP BY e.session_id",
        "session_heads",
        ("session_id", "last_seq", "open_turn", "live_goal", "undecided"),
    ),
    (
        "SELECT chat, seq, type, at, payload FROM chat_events",
        "chat_events",
        ("chat", "seq", "type", "at", "payload"),
    ),
    ("SELECT key, value FROM meta", "meta", ("key", "value")),
)


def _record(table: str, row: Iterable[object]) -> tuple[object, ...]:
    values = tuple(row)
    if table == "session_heads":
        # SQLite answers 0/1; COPY's binary format wants booleans.
        return (values[0], values[1], *(bool(v) for v in values[2:]))
    return values


@dataclass(frozen=True, slots=True)
class CopyReport:
    """Rows per table, as counted in PostgreSQL after the copy (equal to the source's)."""

    counts: dict[str, int]


class CopyRefused(Exception):
    """The copy did not start (a target with data) or did not verify (counts differ)."""


async def copy_sqlite_to_postgres(sqlite_path: Path, target: PgDatabase) -> CopyReport:
    """Copy the plangate database at ``sqlite_path`` into ``target`` (migrated, empty).

    Raises :class:`CopyRefused` when ``target`` already holds sessions or events, or when a
    table's count differs after the copy (then nothing of it is committed).
    """
    if not sqlite_path.is_file():
        raise CopyRefused(f"{sqlite_path}: no such database file")
    async with await Database.open(sqlite_path) as source:
        expected: dict[str, int] = {}
        async with target.pool.acquire() as conn, conn.transaction():
            for table in ("sessions", "events", "chat_events"):
                if await conn.fetchval(f"SELECT EXISTS (SELECT 1 FROM {table})"):
                    raise CopyRefused(
                        f"the PostgreSQL database already holds {table}; copy into an empty one"
                    )
            for query, table, columns in _TABLES:
                copied = 0
                async with source.reading() as reader, reader.execute(query) as cursor:
                    while rows := list(await cursor.fetchmany(_BATCH)):
                        records = [_record(table, row) for row in rows]
                        await conn.copy_records_to_table(table, records=records, columns=columns)
                        copied += len(records)
                expected[table] = copied
                if table != "session_heads":
                    # The source's own count, not just what was read: a read cut short shows.
                    found = await source.fetch_one(f"SELECT count(*) FROM {table}")
                    if found is None or int(found[0]) != copied:
                        raise CopyRefused(f"{table}: read {copied} rows of {found}")
            counts: dict[str, int] = {}
            for table in expected:
                counts[table] = int(await conn.fetchval(f"SELECT count(*) FROM {table}"))
            if counts != expected:
                raise CopyRefused(f"row counts differ after the copy: {expected} -> {counts}")
    return CopyReport(counts)


__all__ = ["CopyRefused", "CopyReport", "copy_sqlite_to_postgres"]
