"""Slack's ids as the engine's chat, person and message keys (docs/slack.md).

The engine's keys are strings (``engine.keys``): a conversation ``slack:C02ABC``, a thread in
it ``slack:C02ABC/1712345678.123456`` (its parent the conversation), a person
``slack:U01XYZ``, a message its ``ts``. Inside the Slack front end (routes, the outbox's
lanes, the answer budget) conversations and threads are still integers, which map to Slack's
ids and back without a table:

- a conversation or a person: its id read in base 36, plus ``OFFSET`` (2**60), so no Slack key
  can meet a Telegram id (Telegram's are below 2**43); a DM is positive (a private chat, as
  on Telegram), a channel negative;
- a message or thread: its ``ts`` with the dot taken out (Slack always writes six decimals).

This module is the one place that knows both mappings.
"""

from __future__ import annotations

import string

from engine.keys import Chat, ChatKey, MessageKey, PersonKey, key_parts, make_key

CHANNEL = "slack"

OFFSET = 1 << 60
_DIGITS = string.digits + string.ascii_uppercase
_MAX_ID = 12  # 36**12 + 2**60 still fits SQLite's signed 64-bit integer


def _decode36(text: str) -> int:
    if not text or len(text) > _MAX_ID or not text.isalnum() or not text.isascii():
        raise ValueError(f"not a Slack id: {text!r}")
    return int(text.upper(), 36)


def _encode36(number: int) -> str:
    out = []
    while number:
        number, digit = divmod(number, 36)
        out.append(_DIGITS[digit])
    return "".join(reversed(out)) or "0"


def chat_key(channel_id: str) -> int:
    """The engine's chat id of a Slack conversation (DMs, ids starting with D, are private)."""
    number = OFFSET + _decode36(channel_id)
    return number if channel_id.upper().startswith("D") else -number


def is_slack_chat(chat_id: int) -> bool:
    """Whether the engine's chat id is a Slack conversation."""
    return abs(chat_id) >= OFFSET


def channel_of(chat_id: int) -> str:
    """The Slack conversation id of the engine's chat id (the inverse of :func:`chat_key`)."""
    return _encode36(abs(chat_id) - OFFSET)


def person_key(user_id: str) -> PersonKey:
    """The engine's person key of a Slack user id (owners, roles, who pressed)."""
    _decode36(user_id)  # refuses what is not a Slack id
    return make_key(CHANNEL, user_id.upper())


def user_of(person: PersonKey) -> str:
    """The Slack user id of the engine's person key."""
    parts = key_parts(person, CHANNEL)
    if parts is None or len(parts) != 1:
        raise ValueError(f"not a Slack person: {person!r}")
    return parts[0]


def is_slack_person(person: PersonKey | None) -> bool:
    return person is not None and key_parts(person, CHANNEL) is not None


def chat_ref(chat: int) -> ChatKey:
    """The engine's key of a conversation (its integer here)."""
    return make_key(CHANNEL, channel_of(chat))


def engine_chat(chat: int, thread: int = 0) -> Chat:
    """The chat the engine binds: a thread (its parent the conversation), else a DM (private)
    or a channel (group)."""
    if thread:
        return Chat.thread(make_key(CHANNEL, channel_of(chat), ts_of(thread) or ""), chat_ref(chat))
    return Chat.private(chat_ref(chat)) if chat > 0 else Chat.group(chat_ref(chat))


def chat_of_ref(key: ChatKey | None) -> int | None:
    """The integer of the conversation an engine chat key names (None: not Slack's)."""
    parts = key_parts(key, CHANNEL) if key is not None else None
    if not parts:
        return None
    try:
        return chat_key(parts[0])
    except ValueError:
        return None


def message_ref(ts: str | None) -> MessageKey | None:
    """A message's key for the engine: its ts."""
    return ts or None


def ts_key(ts: str | None) -> int:
    """A message's (or thread's) ts as an integer; 0 for none (the engine's "no thread")."""
    if not ts:
        return 0
    seconds, _, micros = ts.partition(".")
    return int(seconds) * 1_000_000 + int(micros.ljust(6, "0")[:6] or 0)


def ts_of(key: int | None) -> str | None:
    """The ts of :func:`ts_key`'s integer; None for 0."""
    if not key:
        return None
    seconds, micros = divmod(key, 1_000_000)
    return f"{seconds}.{micros:06d}"


__all__ = [
    "CHANNEL",
    "OFFSET",
    "channel_of",
    "chat_key",
    "chat_of_ref",
    "chat_ref",
    "engine_chat",
    "is_slack_chat",
    "is_slack_person",
    "message_ref",
    "person_key",
    "ts_key",
    "ts_of",
    "user_of",
]
