"""The ports the engine needs from the outside, as Protocols (docs/architecture.md).

``storage/`` implements the stores; ``bot/`` implements the channel. The engine is tested
against in-memory fakes of the same protocols (``engine.testing``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

from engine.events import SessionEvent, StoredEvent
from engine.roles.types import ChatEvent, StoredChatEvent

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """One conversation bound to one workspace."""

    id: str
    workspace: str
    profile: str | None
    created_at: float
    parent_id: str | None = None


@dataclass(frozen=True, slots=True)
class ChatBinding:
    """A chat key ``(chat_id, thread_id or 0)`` and the session it points at."""

    chat_id: int
    thread_id: int
    session_id: str


def check_types(types: Collection[str]) -> frozenset[str]:
    """The ``types`` argument of :meth:`EventLog.read` as a set; a bare string is refused.

    A string is a collection of its characters, so ``types="plan/mode"`` would silently match
    nothing: every implementation calls this first to fail loudly instead.
    """
    if isinstance(types, str):
        raise TypeError(f"types must be a collection of event types, not the string {types!r}")
    return frozenset(types)


class EventLog(Protocol):
    """The append-only per-session log."""

    async def append(self, session_id: str, events: Sequence[SessionEvent]) -> list[StoredEvent]:
        """Commit ``events`` in one transaction with dense ``seq`` values and return them.

        Raises ``AppendConflict`` (and commits nothing) when a ``goal/change`` carries a
        ``(goal id, revision)`` that the session's log already holds: that is the goal
        compare-and-set, and it holds across processes sharing one database.
        """
        ...

    async def read(
        self, session_id: str, *, after_seq: int = 0, types: Collection[str] | None = None
    ) -> list[StoredEvent]:
        """Events with ``seq > after_seq`` in order; with ``types``, only events of those types.

        A filtered read decodes only the matching rows, so a fold that needs a few event types
        (``engine.projections.replay_projections``) never parses tool output. ``types`` is a
        collection of ``type`` strings, never a bare string (that raises ``TypeError``); an
        empty one returns ``[]``.
        """
        ...

    async def needs_attention(self) -> list[str]:
        """The sessions start-up must load, in id order, without reading any log.

        Those whose events, by :func:`engine.recovery.attention_marks`, end with an open turn,
        a live goal or an undecided ``/plan`` or approval. A superset is allowed (loading a
        session that needs nothing is harmless); missing one is not.
        """
        ...


class SessionStore(Protocol):
    """Sessions and the chat keys bound to them."""

    async def create_session(
        self, *, workspace: str, profile: str | None = None, parent_id: str | None = None
    ) -> SessionRecord: ...

    async def get_session(self, session_id: str) -> SessionRecord | None: ...

    async def bind_chat(self, chat_id: int, thread_id: int, session_id: str) -> None:
        """Point the chat key ``(chat_id, thread_id or 0)`` at ``session_id``."""
        ...

    async def session_for_chat(self, chat_id: int, thread_id: int) -> str | None: ...

    async def chat_bindings(self) -> list[ChatBinding]:
        """Every chat key and its session (start-up uses it to find live goals)."""
        ...

    async def fork(self, session_id: str, *, upto_seq: int | None = None) -> SessionRecord:
        """A new session whose log is a copy of ``session_id``'s prefix up to ``upto_seq``."""
        ...


class ChatLog(Protocol):
    """The append-only log of chat-level events (roles), one per chat id (docs/roles.md).

    A forum topic has no log of its own: its group's applies. ``seq`` is dense per chat.
    """

    async def append_chat(self, chat_id: int, events: Sequence[ChatEvent]) -> list[StoredChatEvent]:
        """Commit ``events`` in one transaction and return them; durable on return."""
        ...

    async def read_chat(self, chat_id: int) -> list[StoredChatEvent]:
        """The chat's events in order (``[]`` for a chat with none)."""
        ...
