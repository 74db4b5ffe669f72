"""In-memory fakes of the engine's ports, for tests and benches (the demo uses real SQLite).

They keep the same contracts as ``storage/`` (one contract test runs against both).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Collection, Sequence

from engine.errors import AppendConflict
from engine.events import CommandRun, SessionEvent, StoredEvent, goal_claim
from engine.keys import Chat, ChatKey
from engine.ports import ChatBinding, Clock, SessionRecord, check_types
from engine.recovery import attention_marks
from engine.roles.types import ChatEvent, StoredChatEvent


class InMemoryEventLog:
    """An :class:`engine.ports.EventLog` in a dict, with the goal compare-and-set."""

    def __init__(self, *, clock: Clock = time.time) -> None:
        self._clock = clock
        self._events: dict[str, list[StoredEvent]] = {}
        self._goal_revisions: set[tuple[str, str, int]] = set()
        # Every command/run in append order, across sessions (last_command's tie-break).
        self._commands: list[StoredEvent] = []
        self._lock = asyncio.Lock()

    async def append(self, session_id: str, events: Sequence[SessionEvent]) -> list[StoredEvent]:
        async with self._lock:
            keys: list[tuple[str, str, int]] = []
            for event in events:
                claim = goal_claim(event)
                if claim is not None:
                    key = (session_id, *claim)
                    if key in self._goal_revisions or key in keys:
                        raise AppendConflict(f"goal {claim[0]} revision {claim[1]} is taken")
                    keys.append(key)
            log = self._events.setdefault(session_id, [])
            at = self._clock()
            stored = [
                StoredEvent(session_id=session_id, seq=len(log) + i + 1, at=at, event=event)
                for i, event in enumerate(events)
            ]
            log.extend(stored)
            self._commands.extend(e for e in stored if isinstance(e.event, CommandRun))
            self._goal_revisions.update(keys)
            return stored

    async def copy(self, source: str, target: str, *, upto_seq: int | None = None) -> None:
        """Copy ``source``'s log (up to ``upto_seq``) to the empty ``target``, each event with
        its own time, as a fork does in SQLite."""
        async with self._lock:
            copied = [
                StoredEvent(session_id=target, seq=e.seq, at=e.at, event=e.event)
                for e in self._events.get(source, [])
                if upto_seq is None or e.seq <= upto_seq
            ]
            assert not self._events.get(target), "a fork's log starts empty"
            self._events[target] = copied
            self._commands.extend(e for e in copied if isinstance(e.event, CommandRun))
            for e in copied:  # the child's goal revisions are taken, as the parent's are
                claim = goal_claim(e.event)
                if claim is not None:
                    self._goal_revisions.add((target, *claim))

    async def needs_attention(self) -> list[str]:
        return sorted(
            session_id
            for session_id, log in self._events.items()
            if attention_marks(e.event for e in log).needs_attention
        )

    async def read(
        self, session_id: str, *, after_seq: int = 0, types: Collection[str] | None = None
    ) -> list[StoredEvent]:
        if types is None:
            return [e for e in self._events.get(session_id, []) if e.seq > after_seq]
        wanted = check_types(types)
        return [
            e
            for e in self._events.get(session_id, [])
            if e.seq > after_seq and e.event.type in wanted
        ]

    async def read_types_since(
        self, types: Collection[str], *, since_at: float
    ) -> list[StoredEvent]:
        wanted = check_types(types)
        found = [
            e
            for log in self._events.values()
            for e in log
            if e.event.type in wanted and e.at >= since_at
        ]
        return sorted(found, key=lambda e: (e.at, e.session_id, e.seq))

    async def last_command(self, name: str) -> StoredEvent | None:
        named = [
            e for e in self._commands if isinstance(e.event, CommandRun) and e.event.name == name
        ]
        # The greatest clock reading; of equal ones the later append (max keeps the first).
        return max(reversed(named), key=lambda e: e.at, default=None)


class InMemorySessionStore:
    """An :class:`engine.ports.SessionStore` over an :class:`InMemoryEventLog`."""

    def __init__(self, log: InMemoryEventLog, *, clock: Clock = time.time) -> None:
        self._log = log
        self._clock = clock
        self._sessions: dict[str, SessionRecord] = {}
        self._bindings: dict[ChatKey, tuple[Chat, str]] = {}

    async def create_session(
        self, *, workspace: str, profile: str | None = None, parent_id: str | None = None
    ) -> SessionRecord:
        record = SessionRecord(
            id=uuid.uuid4().hex,
            workspace=workspace,
            profile=profile,
            created_at=self._clock(),
            parent_id=parent_id,
        )
        self._sessions[record.id] = record
        return record

    async def get_session(self, session_id: str) -> SessionRecord | None:
        return self._sessions.get(session_id)

    async def bind_chat(self, chat: Chat, session_id: str) -> None:
        self._bindings[chat.key] = (chat, session_id)

    async def session_for_chat(self, chat: ChatKey) -> str | None:
        found = self._bindings.get(chat)
        return None if found is None else found[1]

    async def chat_bindings(self) -> list[ChatBinding]:
        return [ChatBinding(c, s) for _, (c, s) in sorted(self._bindings.items())]

    async def fork(self, session_id: str, *, upto_seq: int | None = None) -> SessionRecord:
        parent = self._sessions[session_id]
        child = await self.create_session(
            workspace=parent.workspace, profile=parent.profile, parent_id=parent.id
        )
        await self._log.copy(session_id, child.id, upto_seq=upto_seq)
        return child


class InMemoryChatLog:
    """An :class:`engine.ports.ChatLog` in a dict."""

    def __init__(self, *, clock: Clock = time.time) -> None:
        self._clock = clock
        self._events: dict[ChatKey, list[StoredChatEvent]] = {}

    async def append_chat(
        self, chat_id: ChatKey, events: Sequence[ChatEvent]
    ) -> list[StoredChatEvent]:
        log = self._events.setdefault(chat_id, [])
        at = self._clock()
        stored = [
            StoredChatEvent(chat_id=chat_id, seq=len(log) + i + 1, at=at, event=event)
            for i, event in enumerate(events)
        ]
        log.extend(stored)
        return stored

    async def read_chat(self, chat_id: ChatKey) -> list[StoredChatEvent]:
        return list(self._events.get(chat_id, []))
