"""The chat-level log in PostgreSQL: :class:`engine.ports.ChatLog`.

Rows ``(chat, seq, type, at, payload)`` in ``chat_events``. An append is one transaction that
first takes a transaction-scoped advisory lock on the chat's key, so two writers of one chat,
in any process, take their seqs one after the other (a handful of rows per chat: the lock is
simpler than a head row and costs nothing that matters).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from pydantic import ValidationError

from engine.errors import CorruptState
from engine.keys import ChatKey
from engine.ports import Clock
from engine.roles.types import CHAT_EVENT_ADAPTER, ChatEvent, StoredChatEvent
from storage.postgres.db import PgDatabase
from storage.postgres.inbox import mark_in, open_claim

# The advisory lock space of chat appends (the first of the two-int key form; migrations use
# the one-bigint form, a separate space).
_CHAT_LOCK_SPACE = 1


class PgChatLog:
    """:class:`engine.ports.ChatLog` over a :class:`storage.postgres.db.PgDatabase`."""

    def __init__(self, db: PgDatabase, *, clock: Clock = time.time) -> None:
        self._db = db
        self._clock = clock

    async def append_chat(
        self, chat_id: ChatKey, events: Sequence[ChatEvent]
    ) -> list[StoredChatEvent]:
        """Commit ``events`` with the chat's next ``seq`` values; durable on return."""
        if not events:
            return []
        at = self._clock()
        async with self._db.pool.acquire() as conn, conn.transaction():
            await conn.execute(
                "SELECT pg_advisory_xact_lock($1, hashtext($2))", _CHAT_LOCK_SPACE, chat_id
            )
            last = int(
                await conn.fetchval(
                    "SELECT COALESCE(MAX(seq), 0) FROM chat_events WHERE chat = $1", chat_id
                )
            )
            stored = [
                StoredChatEvent(chat_id=chat_id, seq=last + i + 1, at=at, event=event)
                for i, event in enumerate(events)
            ]
            await conn.executemany(
                "INSERT INTO chat_events (chat, seq, type, at, payload) "
                "VALUES ($1, $2, $3, $4, $5)",
                [(chat_id, s.seq, s.event.type, at, s.event.model_dump_json()) for s in stored],
            )
            # An update being processed is done with its first events (storage.postgres.inbox).
            claim = open_claim()
            if claim is not None:
                await mark_in(conn, claim, at)
        if claim is not None:
            claim.done = True
        return stored

    async def read_chat(self, chat_id: ChatKey) -> list[StoredChatEvent]:
        """The chat's events in ``seq`` order; a row that does not parse fails loudly."""
        rows = await self._db.pool.fetch(
            "SELECT seq, at, payload FROM chat_events WHERE chat = $1 ORDER BY seq", chat_id
        )
        out: list[StoredChatEvent] = []
        for seq, at, payload in rows:
            try:
                event = CHAT_EVENT_ADAPTER.validate_json(payload)
            except ValidationError as exc:
                raise CorruptState(f"chat {chat_id} event {seq} does not parse: {exc}") from exc
            out.append(StoredChatEvent(chat_id=chat_id, seq=int(seq), at=float(at), event=event))
        return out


__all__ = ["PgChatLog"]
