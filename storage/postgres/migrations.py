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
    # 2: chat leases with their epochs (storage.postgres.leases), the session -> chat lookup
    # the fence makes, and the elected scheduler's schedules and fired rounds
    # (storage.postgres.election). Times are seconds since the epoch on the server's clock.
    (
        """
        CREATE TABLE chat_leases (
            chat        TEXT COLLATE "C" PRIMARY KEY,
            replica     TEXT NOT NULL,
            epoch       BIGINT NOT NULL,
            expires_at  DOUBLE PRECISION NOT NULL
        )
        """,
        "CREATE INDEX chat_leases_replica ON chat_leases (replica, chat)",
        "CREATE INDEX chat_bindings_session ON chat_bindings (session_id)",
        """
        CREATE TABLE scheduled_jobs (
            job_id      TEXT COLLATE "C" PRIMARY KEY,
            replica     TEXT NOT NULL,
            interval_s  DOUBLE PRECISION NOT NULL,
            anchor      DOUBLE PRECISION NOT NULL
        )
        """,
        """
        CREATE TABLE job_fires (
            job_id    TEXT COLLATE "C" NOT NULL,
            slot      BIGINT NOT NULL,
            replica   TEXT NOT NULL,
            fired_at  DOUBLE PRECISION NOT NULL,
            taken     BOOLEAN NOT NULL DEFAULT false,
            PRIMARY KEY (job_id, slot)
        )
        """,
        "CREATE INDEX job_fires_waiting ON job_fires (replica) WHERE NOT taken",
    ),
    # 3: the update inbox (storage.postgres.inbox): every replica stores what its webhook
    # receives; the chat's lease holder processes it. Keyed by the source's own id, so a
    # re-delivery is a no-op; ``ord`` is the order within the chat (Telegram's update_id).
    (
        """
        CREATE TABLE update_inbox (
            source       TEXT COLLATE "C" NOT NULL,
            update_id    TEXT COLLATE "C" NOT NULL,
            ord          BIGINT NOT NULL,
            chat         TEXT COLLATE "C" NOT NULL,
            payload      TEXT NOT NULL,
            received_at  DOUBLE PRECISION NOT NULL,
            done_at      DOUBLE PRECISION,
            done_by      TEXT,
            PRIMARY KEY (source, update_id)
        )
        """,
        # What owners look for: the pending updates of a chat, in order (partial: done rows,
        # the bulk of the table until pruned, cost the index nothing).
        "CREATE INDEX update_inbox_pending ON update_inbox (chat, ord) WHERE done_at IS NULL",
        # Pruning walks done rows by age.
        "CREATE INDEX update_inbox_done ON update_inbox (done_at) WHERE done_at IS NOT NULL",
        # Arrival order, for a source whose ids carry none (Slack's event ids).
        "CREATE SEQUENCE update_inbox_arrival",
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
