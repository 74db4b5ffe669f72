"""Replicas upgrade one at a time (docs/scaling.md, "Upgrades"): the first replica of a new
release migrates the schema while the others still run the release before, so every migration
after the first only adds what the previous release's code cannot trip over, and that code
uses a database one version ahead of it."""

from __future__ import annotations

import re

import asyncpg
import pytest

from engine.errors import CorruptState
from engine.events import UserMessage
from storage.postgres.db import PgDatabase
from storage.postgres.eventlog import PgEventLog
from storage.postgres.migrations import COMPATIBLE_AHEAD, MIGRATIONS, migrate, schema_version
from tests.pg import pg_cluster, pg_dsn

__all__ = ["pg_cluster", "pg_dsn"]

# What a migration may do and leave the previous release working: new tables, sequences and
# indexes, new columns the old code's INSERTs may leave out (NULL allowed, or a default), new rows.
ADDITIVE = (
    re.compile(r"CREATE TABLE (IF NOT EXISTS )?\w+ \(.*\)", re.S),
    re.compile(r"CREATE SEQUENCE (IF NOT EXISTS )?\w+( .*)?", re.S),
    re.compile(r"CREATE (UNIQUE )?INDEX (CONCURRENTLY )?(IF NOT EXISTS )?\w+ ON .*", re.S),
    re.compile(r"ALTER TABLE \w+ ADD COLUMN (IF NOT EXISTS )?\w+ [^;]*", re.S),
    re.compile(r"INSERT INTO \w+ .*", re.S),
    re.compile(r"COMMENT ON .*", re.S),
)
# A column the old release does not write must not refuse its rows.
NOT_NULL_WITHOUT_DEFAULT = re.compile(r"ADD COLUMN.*NOT NULL(?!.*DEFAULT)", re.S)


def _normal(statement: str) -> str:
    return " ".join(statement.split())


def refused(statement: str) -> str | None:
    """Why ``statement`` would break the release before it, or ``None`` when it only adds."""
    text = _normal(statement)
    if not any(p.fullmatch(text) for p in ADDITIVE):
        return "not one of the additive forms (drop or rename in a later release, see the docs)"
    if NOT_NULL_WITHOUT_DEFAULT.search(text):
        return "a NOT NULL column without a default refuses the old release's inserts"
    return None


def test_every_migration_after_the_first_only_adds() -> None:
    problems = [
        f"migration {version}: {refused(s)}: {_normal(s)[:80]}"
        for version, steps in enumerate(MIGRATIONS[1:], start=2)
        for s in steps
        if refused(s) is not None
    ]
    assert problems == []


@pytest.mark.parametrize(
    ("statement", "ok"),
    [
        ("CREATE TABLE chat_leases (chat TEXT PRIMARY KEY, epoch BIGINT NOT NULL)", True),
        ("CREATE INDEX events_at ON events (at)", True),
        ("ALTER TABLE events ADD COLUMN origin TEXT", True),
        ("ALTER TABLE events ADD COLUMN origin TEXT NOT NULL DEFAULT ''", True),
        ("ALTER TABLE events ADD COLUMN origin TEXT NOT NULL", False),
        ("ALTER TABLE events DROP COLUMN at", False),
        ("ALTER TABLE events RENAME COLUMN at TO at_s", False),
        ("DROP TABLE meta", False),
        ("ALTER TABLE events ALTER COLUMN payload TYPE jsonb USING payload::jsonb", False),
    ],
)
def test_the_rule_tells_adding_from_breaking(statement: str, ok: bool) -> None:
    assert (refused(statement) is None) is ok


async def test_this_release_runs_on_the_schema_the_next_one_migrated(pg_dsn: str) -> None:
    # The next release's migration, as the rule allows it: a table, a column, an index.
    following = (
        *MIGRATIONS,
        (
            "CREATE TABLE next_release (k TEXT PRIMARY KEY)",
            "ALTER TABLE events ADD COLUMN origin TEXT",
            "CREATE INDEX events_origin ON events (origin)",
        ),
    )
    assert all(refused(s) is None for s in following[-1])
    conn = await asyncpg.connect(pg_dsn)
    try:
        assert await migrate(conn, following) == len(MIGRATIONS) + 1
    finally:
        await conn.close()
    # This release opens it (no downgrade, no refusal), appends and reads as always.
    async with await PgDatabase.open(pg_dsn) as db:
        assert await db.schema_version() == len(MIGRATIONS) + COMPATIBLE_AHEAD
        log = PgEventLog(db)
        await log.append("s1", [UserMessage(text="one"), UserMessage(text="two")])
        await log.append("s1", [UserMessage(text="three")])
        assert [e.seq for e in await log.read("s1")] == [1, 2, 3]
    # Two releases ahead is refused.
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute("UPDATE plangate_schema SET version = $1", len(MIGRATIONS) + 2)
        with pytest.raises(CorruptState, match="upgrade plangate"):
            await migrate(conn)
        assert await schema_version(conn) == len(MIGRATIONS) + 2
    finally:
        await conn.close()
