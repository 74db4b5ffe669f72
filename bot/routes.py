"""Where a session lives: the chat a front end posts the agent's own words to, and the small
key/value table the front ends keep their state in (every channel's).

A front end knows each session's chat from what it receives; the engine maps chats to
sessions, and a front end needs the reverse (session -> chat) to post what the agent says on
its own. :class:`Routes` keeps it from what was seen, in memory and in the ``meta`` table, so a
restart still knows where a session's goal and replies go. A route is two integers: a chat and
a thread or forum topic (0: none); Telegram's ids are those integers, Slack's map to them
(bot.slack.keys). The meta key is ``telegram.route.<session_id>``, as homes written before
Slack have it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


def route_key(session_id: str) -> str:
    return f"telegram.route.{session_id}"


class MetaStore(Protocol):
    """The small key/value table the bot keeps its own state in (``storage.db.Database``)."""

    async def get_meta(self, key: str) -> str | None: ...

    async def set_meta(self, key: str, value: str) -> None: ...


@dataclass(frozen=True, slots=True)
class ChatRoute:
    """A session's place: its chat, and its thread or forum topic (``thread_id`` 0: none)."""

    chat_id: int
    thread_id: int = 0

    @property
    def thread(self) -> int | None:
        """The ``message_thread_id`` to send with (None outside forum topics)."""
        return self.thread_id or None

    def encode(self) -> str:
        return f"{self.chat_id}:{self.thread_id}"

    @classmethod
    def decode(cls, text: str) -> ChatRoute | None:
        try:
            chat, thread = text.split(":", 1)
            return cls(int(chat), int(thread))
        except ValueError:
            return None


class Routes:
    """session id -> :class:`ChatRoute`, remembered in memory and in the meta table."""

    def __init__(self, meta: MetaStore) -> None:
        self._meta = meta
        self._routes: dict[str, ChatRoute] = {}

    async def remember(self, session_id: str, route: ChatRoute) -> None:
        """Record where a session lives; writes the meta table only when it changed."""
        if self._routes.get(session_id) == route:
            return
        # After a restart the route is usually stored already: a read is cheaper than a commit.
        if session_id not in self._routes and await self.lookup(session_id) == route:
            return
        self._routes[session_id] = route
        await self._meta.set_meta(route_key(session_id), route.encode())

    def sessions_in(self, chat_id: int) -> list[str]:
        """The sessions this process knows to live in ``chat_id`` (any topic)."""
        return [sid for sid, route in self._routes.items() if route.chat_id == chat_id]

    async def lookup(self, session_id: str) -> ChatRoute | None:
        """The session's route from memory, else from the meta table; None when unknown."""
        route = self._routes.get(session_id)
        if route is not None:
            return route
        stored = await self._meta.get_meta(route_key(session_id))
        route = ChatRoute.decode(stored) if stored else None
        if route is not None:
            self._routes[session_id] = route
        return route


__all__ = ["ChatRoute", "MetaStore", "Routes", "route_key"]
