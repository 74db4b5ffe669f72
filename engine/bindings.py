"""The chat bindings this process knows: chat key -> session, and a session's chats.

:class:`~engine.sessions.Sessions` alone changes them (a first message, ``/new``,
``/project``, a group's migration, start-up); every other part only reads them (the usage
footer asks whether a session's chat is private, the command plane and the approvals ask which
chat a session lives in, for the presser's role). Built before the services that read it, so
the engine is composed in one pass (docs/architecture.md "Composition").
"""

from __future__ import annotations

ChatKey = tuple[int, int]


class ChatBindings:
    """The bindings seen in this process, both ways; answered from memory."""

    def __init__(self) -> None:
        self._sessions: dict[ChatKey, str] = {}
        self._chats: dict[str, set[ChatKey]] = {}

    def session(self, key: ChatKey) -> str | None:
        """The session bound to ``key``, as this process knows it."""
        return self._sessions.get(key)

    def chat_of(self, session_id: str) -> int | None:
        """The chat a session is bound to, as this process knows it (``None``: unbound)."""
        keys = self._chats.get(session_id)
        return min(keys)[0] if keys else None

    def is_private(self, session_id: str) -> bool:
        """Whether the session is bound to a private chat (those have positive ids)."""
        return any(chat_id > 0 for chat_id, _ in self._chats.get(session_id, ()))

    def remember(self, key: ChatKey, session_id: str) -> None:
        """``key`` is bound to ``session_id`` now (replacing what it was bound to)."""
        self.forget(key)
        self._sessions[key] = session_id
        self._chats.setdefault(session_id, set()).add(key)

    def forget(self, key: ChatKey) -> None:
        """``key`` is bound to nothing this process knows."""
        old = self._sessions.pop(key, None)
        if old is not None:
            keys = self._chats.get(old, set())
            keys.discard(key)
            if not keys:
                self._chats.pop(old, None)


__all__ = ["ChatBindings", "ChatKey"]
