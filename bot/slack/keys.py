"""Slack's ids as the engine's chat, person and message keys (docs/slack.md).

The engine still keys chats, people and messages by integers. Slack's ids are short upper-case
strings (``C02ABC``, ``U01XYZ``) and message ids are timestamps (``1712345678.123456``); each
maps to an integer and back without a table, so a restart finds every card again:

- a conversation or a person: its id read in base 36, plus ``OFFSET`` (2**60), so no Slack key
  can meet a Telegram id (Telegram's are below 2**43); a DM is positive (a private chat, as
  on Telegram), a channel negative;
- a message or thread: its ``ts`` with the dot taken out (Slack always writes six decimals).

This module is the one place that knows the mapping: when the engine takes opaque string keys
(``slack:T01/C02``) it is the one file to change.
"""

from __future__ import annotations

import string

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


def person_key(user_id: str) -> int:
    """The engine's person id of a Slack user id (owners, roles, who pressed)."""
    return OFFSET + _decode36(user_id)


def user_of(person: int) -> str:
    """The Slack user id of the engine's person id."""
    return _encode36(person - OFFSET)


def is_slack_person(person: int | None) -> bool:
    return person is not None and person >= OFFSET


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
    "OFFSET",
    "channel_of",
    "chat_key",
    "is_slack_chat",
    "is_slack_person",
    "person_key",
    "ts_key",
    "ts_of",
    "user_of",
]
