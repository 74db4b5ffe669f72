"""Sessions and chat bindings in PostgreSQL: :class:`engine.ports.SessionStore`.

A fork copies a prefix of the parent's log (rows and goal claims, with their own ``seq`` and
``at``) into a new session in one transaction, and gives the child a head at the last copied
seq; copying the plan files is the plan store's job.
"""

from __future__ import annotations

import time
import uuid

import asyncpg

from engine.keys import Chat, ChatKey, ChatKind
from engine.ports import ChatBinding, Clock, SessionRecord
from storage.postgres.db import PgDatabase
from storage.postgres.leases import LeaseFence

# seq values are positive; "no limit" is the largest bigint.
_ALL = 2**63 - 1

_INSERT_SESSION = (
    "INSERT INTO sessions (id, workspace, profile, created_at, parent_id) "
    "VALUES ($1, $2, $3, $4, $5)"
)


def _record(row: asyncpg.Record) -> SessionRecord:
    return SessionRecord(
        id=str(row[0]),
        workspace=str(row[1]),
        profile=None if row[2] is None else str(row[2]),
        created_at=float(row[3]),
        parent_id=None if row[4] is None else str(row[4]),
    )


class PgSessionStore:
    """:class:`engine.ports.SessionStore` over a :class:`storage.postgres.db.PgDatabase`."""

    def __init__(
        self, db: PgDatabase, *, clock: Clock = time.time, fence: LeaseFence | None = None
    ) -> None:
        """``fence``: this replica's lease fence, told when a session's binding moves."""
        self._db = db
        self._clock = clock
        self._fence = fence

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
        await self._db.pool.execute(
            _INSERT_SESSION,
            record.id,
            record.workspace,
            record.profile,
            record.created_at,
            record.parent_id,
        )
        return record

    async def get_session(self, session_id: str) -> SessionRecord | None:
        row = await self._db.pool.fetchrow(
            "SELECT id, workspace, profile, created_at, parent_id FROM sessions WHERE id = $1",
            session_id,
        )
        return None if row is None else _record(row)

    async def bind_chat(self, chat: Chat, session_id: str) -> None:
        """Point ``chat.key`` at ``session_id`` (replacing an earlier binding), with its kind
        and parent."""
        await self._db.pool.execute(
            "INSERT INTO chat_bindings (chat, kind, parent, session_id) VALUES ($1, $2, $3, $4) "
            "ON CONFLICT (chat) DO UPDATE SET session_id = excluded.session_id, "
            "kind = excluded.kind, parent = excluded.parent",
            chat.key,
            chat.kind.value,
            chat.parent,
            session_id,
        )
        if self._fence is not None:
            self._fence.forget_session(session_id)

    async def session_for_chat(self, chat: ChatKey) -> str | None:
        value = await self._db.pool.fetchval(
            "SELECT session_id FROM chat_bindings WHERE chat = $1", chat
        )
        return None if value is None else str(value)

    async def chat_bindings(self) -> list[ChatBinding]:
        """Every chat and the session it points at, by chat key."""
        rows = await self._db.pool.fetch(
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
        async with self._db.pool.acquire() as conn, conn.transaction():
            parent = await conn.fetchrow(
                "SELECT workspace, profile FROM sessions WHERE id = $1", session_id
            )
            if parent is None:
                raise KeyError(session_id)
            child = self._new_record(
                workspace=str(parent[0]),
                profile=None if parent[1] is None else str(parent[1]),
                parent_id=session_id,
            )
            await conn.execute(
                _INSERT_SESSION,
                child.id,
                child.workspace,
                child.profile,
                child.created_at,
                child.parent_id,
            )
            await conn.execute(
                "INSERT INTO events (session_id, seq, type, at, payload) "
                "SELECT $1, seq, type, at, payload FROM events "
                "WHERE session_id = $2 AND seq <= $3",
                child.id,
                session_id,
                limit,
            )
            await conn.execute(
                "INSERT INTO goal_revisions (session_id, goal_id, revision, seq) "
                "SELECT $1, goal_id, revision, seq FROM goal_revisions "
                "WHERE session_id = $2 AND seq <= $3",
                child.id,
                session_id,
                limit,
            )
            # The prefix's marks are not worked out (forks are rare): the child is marked
            # for loading when the parent has a head at all, which is never wrong.
            await conn.execute(
                "INSERT INTO session_heads "
                "(session_id, last_seq, open_turn, live_goal, undecided) "
                "SELECT $1, (SELECT COALESCE(MAX(seq), 0) FROM events WHERE session_id = $1), "
                "true, true, true FROM session_heads WHERE session_id = $2",
                child.id,
                session_id,
            )
        return child


__all__ = ["PgSessionStore"]
