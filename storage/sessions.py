"""Sessions and chat bindings in SQLite: :class:`engine.ports.SessionStore` (docs/storage.md).

A fork copies a prefix of the parent's log (rows and goal-revision claims, with their original
``seq`` and ``at``) into a new session in one transaction. Copying the plan sidecar and ``.md``
is the plan store's job.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import aiosqlite

from engine.keys import Chat, ChatKey, ChatKind
from engine.ports import ChatBinding, Clock, SessionRecord
from storage.db import Database

# seq values are positive; "no limit" is the largest SQLite integer.
_ALL = 2**63 - 1


def _record(row: Any) -> SessionRecord:
    return SessionRecord(
        id=row[0], workspace=row[1], profile=row[2], created_at=row[3], parent_id=row[4]
    )


class SqliteSessionStore:
    """:class:`engine.ports.SessionStore` over a :class:`storage.db.Database`."""

    def __init__(self, db: Database, *, clock: Clock = time.time) -> None:
        self._db = db
        self._clock = clock

    def _new_record(
        self, *, workspace: str, profile: str | None, parent_id: str | None
    ) -> SessionRecord:
        return SessionRecord(
            id=uuid.uuid4().hex,
            workspace=workspace,
            profile=profile,
            created_at=self._clock(),
            parent_id=parent_id,
        )

    async def create_session(
        self, *, workspace: str, profile: str | None = None, parent_id: str | None = None
    ) -> SessionRecord:
        """A new session with a uuid4 hex id; durable on return."""
        record = self._new_record(workspace=workspace, profile=profile, parent_id=parent_id)

        async def work(conn: aiosqlite.Connection) -> None:
            await _insert_session(conn, record)

        await self._db.write(work)
        return record

    async def get_session(self, session_id: str) -> SessionRecord | None:
        row = await self._db.fetch_one(
            "SELECT id, workspace, profile, created_at, parent_id FROM sessions WHERE id = ?",
            (session_id,),
        )
        return None if row is None else _record(row)

    async def bind_chat(self, chat: Chat, session_id: str) -> None:
        """Point ``chat.key`` at ``session_id`` (replacing an earlier binding), with its kind
        and parent."""

        async def work(conn: aiosqlite.Connection) -> None:
            await conn.execute(
                "INSERT INTO chat_bindings (chat, kind, parent, session_id) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (chat) DO UPDATE SET session_id = excluded.session_id, "
                "kind = excluded.kind, parent = excluded.parent",
                (chat.key, chat.kind.value, chat.parent, session_id),
            )

        await self._db.write(work)

    async def session_for_chat(self, chat: ChatKey) -> str | None:
        row = await self._db.fetch_one(
            "SELECT session_id FROM chat_bindings WHERE chat = ?", (chat,)
        )
        return None if row is None else str(row[0])

    async def chat_bindings(self) -> list[ChatBinding]:
        """Every chat and the session it points at, by chat key."""
        rows = await self._db.fetch_all(
            "SELECT chat, kind, parent, session_id FROM chat_bindings ORDER BY chat"
        )
        return [
            ChatBinding(
                Chat(str(r[0]), ChatKind(r[1]), None if r[2] is None else str(r[2])), str(r[3])
            )
            for r in rows
        ]

    async def fork(self, session_id: str, *, upto_seq: int | None = None) -> SessionRecord:
        """A new session (``parent_id`` = ``session_id``) whose log is the parent's events with
        ``seq <= upto_seq`` (all when ``None``). Raises ``KeyError`` for an unknown session."""
        limit = _ALL if upto_seq is None else upto_seq

        async def work(conn: aiosqlite.Connection) -> SessionRecord:
            found = await conn.execute_fetchall(
                "SELECT workspace, profile FROM sessions WHERE id = ?", (session_id,)
            )
            parent = next(iter(found), None)
            if parent is None:
                raise KeyError(session_id)
            child = self._new_record(workspace=parent[0], profile=parent[1], parent_id=session_id)
            await _insert_session(conn, child)
            await conn.execute(
                "INSERT INTO events (session_id, seq, type, at, payload) "
                "SELECT ?, seq, type, at, payload FROM events WHERE session_id = ? AND seq <= ?",
                (child.id, session_id, limit),
            )
            await conn.execute(
                "INSERT INTO goal_revisions (session_id, goal_id, revision, seq) "
                "SELECT ?, goal_id, revision, seq FROM goal_revisions "
                "WHERE session_id = ? AND seq <= ?",
                (child.id, session_id, limit),
            )
            # The prefix's marks are not worked out here (forks are rare): the child is
            # marked for loading when the parent has any mark row, which is never wrong.
            await conn.execute(
                "INSERT INTO session_marks (session_id, open_turn, live_goal, undecided) "
                "SELECT ?, 1, 1, 1 FROM session_marks WHERE session_id = ?",
                (child.id, session_id),
            )
            return child

        return await self._db.write(work)


async def _insert_session(conn: aiosqlite.Connection, record: SessionRecord) -> None:
    await conn.execute(
        "INSERT INTO sessions (id, workspace, profile, created_at, parent_id) "
        "VALUES (?, ?, ?, ?, ?)",
        (record.id, record.workspace, record.profile, record.created_at, record.parent_id),
    )
