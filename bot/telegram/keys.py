"""Session keys on Telegram: ``(chat_id, message_thread_id or 0)`` (docs/architecture.md).

A forum topic is its own session; the thread id counts only when the message
``is_topic_message`` (a reply chain in an ordinary group carries a thread id too, but it is
not a topic).
"""

from __future__ import annotations

from telegram import Message, Update

SessionKey = tuple[int, int]


def message_key(message: Message) -> SessionKey:
    """The session key of a message."""
    thread = message.message_thread_id if message.is_topic_message else None
    return (message.chat.id, thread or 0)


def update_key(update: Update) -> SessionKey | None:
    """The session key of a message or button press; ``None`` for anything else."""
    if update.callback_query is not None:
        msg = update.callback_query.message
        if isinstance(msg, Message):
            return message_key(msg)
        return None
    if update.message is not None:
        return message_key(update.message)
    return None
