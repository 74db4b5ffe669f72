"""Where a session lives in Telegram: its chat key and the bot's small durable state.

A session's key on Telegram is ``(chat_id, message_thread_id or 0)`` (``bot.telegram.keys``,
docs/architecture.md). The engine maps keys to sessions; the front end needs the reverse
(session -> chat) to post what the agent says on its own. :class:`Routes` keeps it from the
updates seen, in memory and in the ``meta`` table, so a restart still knows where a session's
goal and replies go. The sidecar's ``flow`` is a second source (see ``presenter``).

Meta keys written by the Telegram front end (all prefixed ``telegram.``)::

    telegram.last_update_id          the update_id watermark: all at or below it were processed
    telegram.recent_updates          JSON {"ids": [...], "date": t}: the latest processed ids and
                                     the newest update date (only re-deliveries are dropped)
    telegram.route.<session_id>      "<chat_id>:<thread_id>"
    telegram.goal_card.<session_id>  "<chat_id>:<message_id>" of the goal card
    telegram.review_rev.<session_id> "<plan id>:<revision>" whose text was last posted for review
    telegram.groups                  JSON sorted list of the chat ids of groups an owner added
                                     the bot to
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

LAST_UPDATE_KEY = "telegram.last_update_id"
RECENT_UPDATES_KEY = "telegram.recent_updates"


def route_key(session_id: str) -> str:
    return f"telegram.route.{session_id}"


def goal_card_key(session_id: str) -> str:
    """Where homes from before the engine kept the goal card's id had it (read once, then
    moved into the engine: bot.telegram.presenter)."""
    return f"telegram.goal_card.{session_id}"


def review_rev_key(session_id: str) -> str:
    return f"telegram.review_rev.{session_id}"


def patch_key(session_id: str) -> str:
    """The finished plan whose ``.patch`` document was posted (at most once per plan)."""
    return f"telegram.patch.{session_id}"


GROUPS_KEY = "telegram.groups"


class MetaStore(Protocol):
    """The small key/value table the bot keeps its own state in (``storage.db.Database``)."""

    async def get_meta(self, key: str) -> str | None: ...

    async def set_meta(self, key: str, value: str) -> None: ...


@dataclass(frozen=True, slots=True)
class ChatRoute:
    """A session's place in Telegram; ``thread_id`` 0 means "no forum topic"."""

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
