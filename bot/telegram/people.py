"""Who was seen writing in each group, so ``/team add @name`` can find them (docs/roles.md).

Telegram's Bot API cannot look a user up by username, so the bot remembers the senders of the
group messages it sees: per chat, the latest ``MAX_PER_CHAT`` usernames, in memory only (after
a restart a person is found again once they write, or by a reply to their message, or by id).
"""

from __future__ import annotations

from collections import OrderedDict

from bot.telegram.keys import person_key
from engine.roles.types import Person

MAX_PER_CHAT = 256


class SeenPeople:
    """Per chat: username (lower case) -> the person last seen with it."""

    def __init__(self, *, max_per_chat: int = MAX_PER_CHAT) -> None:
        self._max = max_per_chat
        self._chats: dict[int, OrderedDict[str, Person]] = {}

    def saw(self, chat_id: int, user_id: int, username: str | None, name: str) -> None:
        """Remember a sender; the oldest name of a full chat is forgotten first."""
        if not username:
            return
        seen = self._chats.setdefault(chat_id, OrderedDict())
        key = username.lower()
        seen.pop(key, None)
        seen[key] = Person(person_key(user_id), name or username)
        while len(seen) > self._max:
            seen.popitem(last=False)

    def find(self, chat_id: int, username: str) -> Person | None:
        """The person seen in ``chat_id`` as ``@username`` (any case), if any."""
        return self._chats.get(chat_id, {}).get(username.lstrip("@").lower())

    def move(self, old_chat_id: int, new_chat_id: int) -> None:
        """A group became a supergroup: the people seen in it are in the new chat."""
        seen = self._chats.pop(old_chat_id, None)
        if seen is not None:
            self._chats.setdefault(new_chat_id, OrderedDict()).update(seen)


__all__ = ["MAX_PER_CHAT", "SeenPeople"]
