"""The SQLite schema as forward-only migrations (docs/storage.md).

``MIGRATIONS[n - 1]`` takes a database from ``PRAGMA user_version`` ``n - 1`` to ``n``. A
migration is a tuple of statements run in one ``BEGIN IMMEDIATE`` transaction together with the
``user_version`` bump, so a crash leaves the old or the new schema, never half of one. Released
migrations are never edited: a change is a new entry at the end.
"""

from __future__ import annotations

import aiosqlite

from engine.errors import CorruptState

Migration = tuple[str, ...]

MIGRATIONS: tuple[Migration, ...] = (
    # 1: sessions, chat bindings, the event log, goal revisions, bot metadata.
    (
        """
        CREATE TABLE sessions (
            id          TEXT PRIMARY KEY,
            workspace   TEXT NOT NULL,
            profile     TEXT,
            created_at  REAL NOT NULL,
            parent_id   TEXT
        )
        """,
        """
        CREATE TABLE chat_bindings (
            chat_id     INTEGER NOT NULL,
            thread_id   INTEGER NOT NULL,
            session_id  TEXT NOT NULL,
            PRIMARY KEY (chat_id, thread_id)
        ) WITHOUT ROWID
        """,
        # A rowid table on purpose: payloads (tool results) can be large, which WITHOUT ROWID
        # tables store badly. The primary key is the (session_id, seq) index replay walks.
        """
        CREATE TABLE events (
            session_id  TEXT NOT NULL,
            seq         INTEGER NOT NULL,
            type        TEXT NOT NULL,
            at          REAL NOT NULL,
            payload     TEXT NOT NULL,
            PRIMARY KEY (session_id, seq)
        )
        """,
        # The goal compare-and-set: a (goal id, revision) is taken once per session, by the
        # goal/change event at `seq`. A unique key holds across processes; a read-then-write
        # check in Python would not.
        """
        CREATE TABLE goal_revisions (
            session_id  TEXT NOT NULL,
            goal_id     TEXT NOT NULL,
            revision    INTEGER NOT NULL,
            seq         INTEGER NOT NULL,
            PRIMARY KEY (session_id, goal_id, revision)
        ) WITHOUT ROWID
        """,
        """
        CREATE TABLE meta (
            key    TEXT PRIMARY KEY,
            value  TEXT NOT NULL
        ) WITHOUT ROWID
        """,
    ),
    # 2: the usage meter's start-up read of today's model/usage records across all sessions.
    ("CREATE INDEX events_type_at ON events (type, at)",),
    # 3: per-session attention marks (engine.recovery.attention_marks), kept by every append,
    # so start-up loads only the sessions with an open turn, a live goal or an undecided
    # /plan or approval. Backfilled from the log by the same rules. The backfill is a frozen
    # SQL copy of engine.recovery.pending_mark (and of the command names it reads) on
    # purpose: a migration must do on every old file what it did when it shipped, and the
    # rule's owner may change later (a later change gets a migration of its own); the copy is
    # checked against the Python rule by tests/storage/test_sqlite.py.
    (
        """
        CREATE TABLE session_marks (
            session_id  TEXT PRIMARY KEY,
            open_turn   INTEGER NOT NULL,
            live_goal   INTEGER NOT NULL,
            undecided   INTEGER NOT NULL
        ) WITHOUT ROWID
        """,
        """
        INSERT INTO session_marks (session_id, open_turn, live_goal, undecided)
        SELECT s.session_id,
            COALESCE((SELECT type = 'turn/start' FROM events
                      WHERE session_id = s.session_id AND type IN ('turn/start', 'turn/end')
                      ORDER BY seq DESC LIMIT 1), 0),
            COALESCE((SELECT json_extract(payload, '$.snapshot.phase') = 'active' FROM events
                      WHERE session_id = s.session_id AND type = 'goal/change'
                      ORDER BY seq DESC LIMIT 1), 0),
            COALESCE((SELECT type = 'command/run'
                             AND json_extract(payload, '$.name') IN ('plan', 'approve')
                      FROM events
                      WHERE session_id = s.session_id
                        AND (type IN ('plan/mode', 'plan/changed')
                             OR (type = 'command/run' AND json_extract(payload, '$.name')
                                 IN ('plan', 'approve', 'keep_planning', 'discard', 'new',
                                     'revise')))
                      ORDER BY seq DESC LIMIT 1), 0)
        FROM (SELECT DISTINCT session_id FROM events) AS s
        """,
    ),
    # 4: the usage meter's start-up lookup of the owner's last /usage cap (last_command): the
    # newest command/run of one name without decoding the others. Partial, so only command/run
    # rows (a small share of the log) pay for it on append.
    (
        """
        CREATE INDEX events_command_name ON events (json_extract(payload, '$.name'), at)
        WHERE type = 'command/run'
        """,
    ),
    # 5: the chat-level log (engine.ports.ChatLog): role events per chat id, so a chat's team
    # replays after a restart. Small (a row per /team change), so no index beyond the key.
    (
        """
        CREATE TABLE chat_events (
            chat_id  INTEGER NOT NULL,
            seq      INTEGER NOT NULL,
            type     TEXT NOT NULL,
            at       REAL NOT NULL,
            payload  TEXT NOT NULL,
            PRIMARY KEY (chat_id, seq)
        ) WITHOUT ROWID
        """,
    ),
    # 6: chats and people are opaque string keys (engine.keys). A binding records the chat's
    # kind and, for a thread, its parent. Older rows held integer ids, all from the first
    # front end: they become its keys (``tg:<chat>``, a forum topic ``tg:<chat>/<thread>``
    # whose parent is ``tg:<chat>``), and their kind is read from the sign of the id, the
    # way that channel gave it, here once. The event payloads are not rewritten: their
    # integer ids are read as keys (engine.keys.Legacy*).
    (
        """
        CREATE TABLE chat_bindings_v6 (
            chat        TEXT PRIMARY KEY,
            kind        TEXT NOT NULL CHECK (kind IN ('private', 'group', 'thread')),
            parent      TEXT,
            session_id  TEXT NOT NULL
        ) WITHOUT ROWID
        """,
        """
        INSERT INTO chat_bindings_v6 (chat, kind, parent, session_id)
        SELECT 'tg:' || chat_id || CASE WHEN thread_id != 0 THEN '/' || thread_id ELSE '' END,
            CASE WHEN thread_id != 0 THEN 'thread' WHEN chat_id > 0 THEN 'private'
                 ELSE 'group' END,
            CASE WHEN thread_id != 0 THEN 'tg:' || chat_id END,
            session_id
        FROM chat_bindings
        """,
        "DROP TABLE chat_bindings",
        "ALTER TABLE chat_bindings_v6 RENAME TO chat_bindings",
        """
        CREATE TABLE chat_events_v6 (
            chat     TEXT NOT NULL,
            seq      INTEGER NOT NULL,
            type     TEXT NOT NULL,
            at       REAL NOT NULL,
            payload  TEXT NOT NULL,
            PRIMARY KEY (chat, seq)
        ) WITHOUT ROWID
        """,
        """
        INSERT INTO chat_events_v6 (chat, seq, type, at, payload)
        SELECT 'tg:' || chat_id, seq, type, at, payload FROM chat_events
        """,
        "DROP TABLE chat_events",
        "ALTER TABLE chat_events_v6 RENAME TO chat_events",
    ),
)


async def user_version(conn: aiosqlite.Connection) -> int:
    """The schema version stored in the database header."""
    async with conn.execute("PRAGMA user_version") as cursor:
        row = await cursor.fetchone()
    return int(row[0]) if row is not None else 0


async def migrate(
    conn: aiosqlite.Connection, migrations: tuple[Migration, ...] = MIGRATIONS
) -> int:
    """Bring the schema up to ``len(migrations)`` and return that version.

    ``conn`` must be in autocommit mode (``isolation_level=None``). Each step re-reads the
    version under the write lock, so two processes opening a new file migrate it once. Raises
    :class:`CorruptState` for a database written by a newer plangate: it is never downgraded.
    """
    target = len(migrations)
    found = await user_version(conn)
    if found > target:
        raise CorruptState(
            f"database schema version {found} is newer than this plangate knows ({target}); "
            "upgrade plangate"
        )
    for version in range(found + 1, target + 1):
        try:
            await conn.execute("BEGIN IMMEDIATE")
            if await user_version(conn) < version:
                for statement in migrations[version - 1]:
                    await conn.execute(statement)
                # PRAGMA takes no parameters; `version` is an int we computed.
                await conn.execute(f"PRAGMA user_version = {version:d}")
            await conn.execute("COMMIT")
        except BaseException:
            await conn.rollback()  # queued behind any statement still in flight; no-op if none
            raise
    return target
