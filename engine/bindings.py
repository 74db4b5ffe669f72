"""The chat bindings this process knows: chat key -> session, and a session's chats.

:class:`~engine.sessions.Sessions` alone changes them (a first message, ``/new``,
``/project``, a group's migration, start-up); every other part only reads them (the usage
footer asks whether a session's chat is private, the command plane and the approvals ask which
chat a session lives in, for the presser's role). Built before the services that read it, so
the engine is composed in one pass (docs/architecture.md "Composition").

A chat is kept as the front end described it when it was bound (``engine.keys.Chat``): its
kind answers "private?", and a thread's parent is the room whose roles apply.
"""

from __future__ import annotations

from engine.keys import Chat, ChatKey, ChatKind


class ChatBindings:
    """The bindings seen in this process, both ways; answered from memory."""

    def __init__(self) -> None:
        self._sessions: dict[ChatKey, str] = {}
        self._known: dict[ChatKey, Chat] = {}
        self._chats: dict[str, set[Chat]] = {}

    def session(self, key: ChatKey) -> str | None:
        """The session bound to ``key``, as this process knows it."""
        return self._sessions.get(key)

    def chat_of(self, session_id: str) -> ChatKey | None:
        """The room of the chat a session is bound to (a thread's parent), as this process
        knows it (``None``: unbound). Roles are read there."""
        chats = self._chats.get(session_id)
        return min(c.room for c in chats) if chats else None

    def room(self, key: ChatKey) -> ChatKey:
        """The room of a chat key: a bound thread's parent, else the key itself."""
        known = self._known.get(key)
        return known.room if known is not None else key

    def is_private(self, session_id: str) -> bool:
        """Whether the session is bound to a private chat (the kind recorded at binding)."""
        return any(c.kind is ChatKind.PRIVATE for c in self._chats.get(session_id, ()))

    def sessions_in(self, room: ChatKey) -> list[str]:
        """The sessions bound to ``room`` or to a thread of it, as this process knows them."""
        return sorted({s for key, s in self._sessions.items() if self._known[key].room == room})

    def keys_of(self, session_id: str) -> list[ChatKey]:
        """The chat keys bound to ``session_id``, as this process knows them."""
        return sorted(c.key for c in self._chats.get(session_id, ()))

    def remember(self, chat: Chat, session_id: str) -> None:
        """``chat`` is bound to ``session_id`` now (replacing what its key was bound to)."""
        self.forget(chat.key)
        self._sessions[chat.key] = session_id
        self._known[chat.key] = chat
        self._chats.setdefault(session_id, set()).add(chat)

    def forget(self, key: ChatKey) -> None:
        """``key`` is bound to nothing this process knows."""
        old = self._sessions.pop(key, None)
        chat = self._known.pop(key, None)
        if old is not None and chat is not None:
            chats = self._chats.get(old, set())
            chats.discard(chat)
            if not chats:
                self._chats.pop(old, None)


__all__ = ["ChatBindings"]
