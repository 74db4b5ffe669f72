"""Telegram-shaped keys for tests that drive the engine directly (engine.keys, bot.telegram.keys).

Engine-level tests name chats and people the way the Telegram front end does, so what they
store reads like a real home: ``chat(-1)`` is the group ``tg:-1``, ``chat(-1, 4)`` its forum
topic ``tg:-1/4``, ``person(7)`` the user ``tg:7``.
"""

from __future__ import annotations

from bot.telegram.keys import chat_key, engine_chat, person_key
from engine.keys import Chat


def chat(chat_id: int, thread_id: int = 0) -> Chat:
    """The chat the Telegram front end binds for ``(chat_id, thread_id)``."""
    return engine_chat((chat_id, thread_id))


def person(user_id: int) -> str:
    """A Telegram user's person key."""
    return person_key(user_id)


__all__ = ["chat", "chat_key", "person"]
