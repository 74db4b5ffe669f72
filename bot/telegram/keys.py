"""Session keys on Telegram: ``(chat_id, message_thread_id or 0)``, and the engine's string
keys made from them (docs/architecture.md "Keys").

A forum topic is its own session; the thread id counts only when the message
``is_topic_message`` (a reply chain in an ordinary group carries a thread id too, but it is
not a topic).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from telegram import Message, Update

from engine.keys import (
    LEGACY_CHANNEL,
    Chat,
    ChatKey,
    MessageKey,
    PersonKey,
    key_parts,
    make_key,
)
from engine.plan.types import PlanFlow

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


# --- the engine's keys (engine.keys) for Telegram's integer ids ---------------------------------
# Telegram's chats, topics, users and messages become the engine's opaque keys here, at the
# edge, and back. The prefix is the one integer ids stored before keys were strings read as,
# so an upgraded home and a fresh one spell every key alike.
CHANNEL: Final = LEGACY_CHANNEL


def chat_key(chat_id: int, thread_id: int = 0) -> ChatKey:
    """``tg:<chat>``, or ``tg:<chat>/<topic>`` for a forum topic."""
    return make_key(CHANNEL, chat_id, thread_id) if thread_id else make_key(CHANNEL, chat_id)


def engine_chat(key: SessionKey) -> Chat:
    """The chat the engine binds for a session key: a topic is a thread whose parent is its
    group; otherwise private or group, by Telegram's rule that a private chat has its user's
    (positive) id and groups and channels negative ones."""
    chat_id, thread_id = key
    if thread_id:
        return Chat.thread(chat_key(chat_id, thread_id), chat_key(chat_id))
    return Chat.private(chat_key(chat_id)) if chat_id > 0 else Chat.group(chat_key(chat_id))


def session_key(chat: ChatKey) -> SessionKey | None:
    """The session key a chat key of this channel names (``None``: another channel's)."""
    parts = key_parts(chat, CHANNEL)
    if parts is None or len(parts) > 2:
        return None
    try:
        numbers = [int(p) for p in parts]
    except ValueError:
        return None
    return (numbers[0], numbers[1] if len(numbers) > 1 else 0)


def person_key(user_id: int) -> PersonKey:
    """``tg:<user id>``."""
    return make_key(CHANNEL, user_id)


def maybe_person(user_id: int | None) -> PersonKey | None:
    return None if user_id is None else person_key(user_id)


def user_id_of(person: PersonKey | None) -> int | None:
    """The Telegram user id a person key names (``None``: another channel's, or nobody)."""
    parts = key_parts(person, CHANNEL) if person is not None else None
    if parts is None or len(parts) != 1:
        return None
    try:
        return int(parts[0])
    except ValueError:
        return None


def msg_key(message_id: int | None) -> MessageKey | None:
    """A Telegram message id as the engine's message key (its decimal text)."""
    return None if message_id is None else str(message_id)


def msg_id(key: MessageKey | None) -> int | None:
    """The Telegram message id a message key holds (``None`` for none, or not a number)."""
    if key is None:
        return None
    try:
        return int(key)
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class TgFlow:
    """A plan sidecar's ``flow`` in Telegram's ids (``chat_id`` ``None``: no chat known or
    another channel's)."""

    chat_id: int | None
    thread_id: int
    card_id: int | None
    review_ids: list[int] = field(default_factory=list)


def tg_flow(flow: PlanFlow) -> TgFlow:
    """Read a sidecar's ``flow`` keys back as Telegram ids."""
    chat = session_key(flow.chat_id) if flow.chat_id is not None else None
    thread = session_key(flow.thread_id) if flow.thread_id is not None else None
    if chat is None:
        return TgFlow(None, 0, None)
    reviews = [i for i in (msg_id(r) for r in flow.review_ids) if i is not None]
    return TgFlow(chat[0], thread[1] if thread is not None else 0, msg_id(flow.card_id), reviews)
