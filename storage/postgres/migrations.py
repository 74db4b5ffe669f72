"""The PostgreSQL schema as forward-only migrations (docs/storage.md, "PostgreSQL").

``MIGRATIONS[n - 1]`` takes a database from version ``n - 1`` to ``n``; the version is the one
row of ``plangate_schema``. Each step runs in one transaction (PostgreSQL's DDL is
transactional) holding a transaction-scoped advisory lock, and re-reads the version under it,
so replicas starting at once against a new database migrate it once. Released migrations are
never edited: a change is a new entry at the end.

The schema is built on the string chat keys from the start (``engine.keys``); the SQLite
history that led there (integer ids, then keys) is not repeated.
"""

from __future__ import annotations

import asyncpg

from engine.errors import CorruptState

Migration = tuple[str, ...]

# The advisory lock every migration step holds (one bigint key of plangate's own: "plangate"
# in ASCII), so two processes never run a step at once.
MIGRATION_LOCK = 0x706C616E67617465

# How many versions ahead of this plangate a database may be and still be used: replicas
# upgrade one at a time, so an old replica meets the schema a new one migrated. Every migration
# keeps the code of the version before it working (it only adds: tables, indexes, columns that
# may be NULL or have a default; tests/storage/test_pg_upgrade.py checks each statement), so
# one version ahead is safe; two are refused.
COMPATIBLE_AHEAD = 1

MIGRATIONS: tuple[Migration, ...] = (
    # 1: everything the SQLite schema holds at its version 6, keyed by strings.
    (
        """
        CREATE TABLE sessions (
            id          TEXT COLLATE "C" PRIMARY KEY,
            workspace   TEXT NOT NULL,
            profile     TEXT,
            created_at  DOUBLE PRECISION NOT NULL,
            parent_id   TEXT
        )
        """,
        """
        CREATE TABLE chat_bindings (
            chat        TEXT COLLATE "C" PRIMARY KEY,
            kind        TEXT NOT NULL CHECK (kind IN ('private', 'group', 'thread')),
            parent      TEXT,
            session_id  TEXT COLLATE "C" NOT NULL
        )
        """,
        # Keys compare bytewise ("C"): the order SQLite gives, and cheaper than a locale's.
        # payload is the event's whole JSON as text (not jsonb): it goes back to pydantic's
        # validate_json as stored, and jsonb would parse every append and re-print every read.
        """
        CREATE TABLE events (
            session_id  TEXT COLLATE "C" NOT NULL,
            seq         BIGINT NOT NULL,
            type        TEXT NOT NULL,
            at          DOUBLE PRECISION NOT NULL,
            payload     TEXT NOT NULL,
            PRIMARY KEY (session_id, seq)
        )
        """,
        "CREATE INDEX events_type_at ON events (type, at)",
        # last_command: the newest command/run of one name; partial, so only commands pay.
        """
        CREATE INDEX events_command_name ON events (((payload::json) ->> 'name'), at)
        WHERE type = 'command/run'
        """,
        # One row per session with a log: the last seq handed out and the start-up marks
        # (engine.recovery.attention_marks). The append's upsert of this row is what
        # serialises two writers of one session (a row lock), and hands out the next seq.
        """
        CREATE TABLE session_heads (
            session_id  TEXT COLLATE "C" PRIMARY KEY,
            last_seq    BIGINT NOT NULL,
            open_turn   BOOLEAN NOT NULL,
            live_goal   BOOLEAN NOT NULL,
            undecided   BOOLEAN NOT NULL
        )
        """,
        "CREATE INDEX session_heads_marked ON session_heads (session_id) "
        "WHERE open_turn OR live_goal OR undecided",
        # The goal compare-and-set: a (goal id, revision) is taken once per session.
        """
        CREATE TABLE goal_revisions (
            session_id  TEXT COLLATE "C" NOT NULL,
            goal_id     TEXT NOT NULL,
            revision    BIGINT NOT NULL,
            seq         BIGINT NOT NULL,
            PRIMARY KEY (session_id, goal_id, revision)
        )
        """,
        """
        CREATE TABLE chat_events (
            chat     TEXT COLLATE "C" NOT NULL,
            seq      BIGINT NOT NULL,
            type     TEXT NOT NULL,
            at       DOUBLE PRECISION NOT NULL,
            payload  TEXT NOT NULL,
            PRIMARY KEY (chat, seq)
        )
        """,
        """
        CREATE TABLE meta (
            key    TEXT PRIMARY KEY,
            value  TEXT NOT NULL
        )
        """,
    ),
)


async def schema_version(conn: asyncpg.Connection) -> int:
    """The version the database's schema is at (0 for an empty database)."""
    found = await conn.fetchval("SELECT to_regclass('plangate_schema') IS NOT NULL")
    if not found:
        return 0
    value = await conn.fetchval("SELECT version FROM plangate_schema")
    return int(value) if value is not None else 0


async def migrate(conn: asyncpg.Connection, migrations: tuple[Migration, ...] = MIGRATIONS) -> int:
    """Bring the schema up to ``len(migrations)`` and return that version.

    Each step runs in its own transaction under :data:`MIGRATION_LOCK` and re-reads the
    version first. A database up to :data:`COMPATIBLE_AHEAD` versions newer is used as it is
    (a peer replica already runs the next release); raises :class:`CorruptState` for one
    newer than that.
    """
    target = len(migrations)
    for version in range(1, target + 1):
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK)
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS plangate_schema ("
                " one BOOLEAN PRIMARY KEY DEFAULT true CHECK (one), version INTEGER NOT NULL)"
            )
            await conn.execute(
                "INSERT INTO plangate_schema (version) VALUES (0) ON CONFLICT DO NOTHING"
            )
            found = await schema_version(conn)
            if found > target + COMPATIBLE_AHEAD:
                raise CorruptState(
                    f"database schema version {found} is newer than this plangate knows "
                    f"({target}); upgrade plangate"
                )
            if found >= version:
                continue
            for statement in migrations[version - 1]:
                await conn.execute(statement)
            await conn.execute("UPDATE plangate_schema SET version = $1", version)
    return target
