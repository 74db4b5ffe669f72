"""The chat-level log in SQLite: :class:`engine.ports.ChatLog` (docs/storage.md).

A row is ``(chat, seq, type, at, payload)`` in ``chat_events``; ``payload`` is the event's
whole JSON. An append is one write of the database's group commit; the next ``seq`` is read in
the same transaction, under SQLite's write lock, so two processes never take the same one.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import aiosqlite
from pydantic import ValidationError

from engine.errors import CorruptState
from engine.keys import ChatKey
from engine.ports import Clock
from engine.roles.types import CHAT_EVENT_ADAPTER, ChatEvent, StoredChatEvent
from storage.db import Database


class SqliteChatLog:
    """:class:`engine.ports.ChatLog` over a :class:`storage.db.Database`."""

    def __init__(self, db: Database, *, clock: Clock = time.time) -> None:
        self._db = db
        self._clock = clock

    async def append_chat(
        self, chat_id: ChatKey, events: Sequence[ChatEvent]
    ) -> list[StoredChatEvent]:
        """Commit ``events`` with the chat's next ``seq`` values; durable on return."""
        if not events:
            return []
        at = self._clock()

        async def work(conn: aiosqlite.Connection) -> list[StoredChatEvent]:
            rows = await conn.execute_fetchall(
                "SELECT COALESCE(MAX(seq), 0) FROM chat_events WHERE chat = ?", (chat_id,)
            )
            last = int(next(iter(rows))[0])
            stored = [
                StoredChatEvent(chat_id=chat_id, seq=last + i + 1, at=at, event=event)
                for i, event in enumerate(events)
            ]
            await conn.executemany(
                "INSERT INTO chat_events (chat, seq, type, at, payload) VALUES (?, ?, ?, ?, ?)",
                [(chat_id, s.seq, s.event.type, at, s.event.model_dump_json()) for s in stored],
            )
            return stored

        return await self._db.write(work)

    async def read_chat(self, chat_id: ChatKey) -> list[StoredChatEvent]:
        """The chat's events in ``seq`` order; a row that does not parse fails loudly."""
        rows = await self._db.fetch_all(
            "SELECT seq, at, payload FROM chat_events WHERE chat = ? ORDER BY seq", (chat_id,)
        )
        out: list[StoredChatEvent] = []
        for seq, at, payload in rows:
            try:
                event = CHAT_EVENT_ADAPTER.validate_json(payload)
            except ValidationError as exc:
                raise CorruptState(f"chat {chat_id} event {seq} does not parse: {exc}") from exc
            out.append(StoredChatEvent(chat_id=chat_id, seq=int(seq), at=float(at), event=event))
        return out


__all__ = ["SqliteChatLog"]
