"""Chats, people and messages as opaque string keys (docs/architecture.md "Keys").

A front end names what it talks about with strings of its own making, each prefixed by its
channel: a chat ``tg:-100123``, a forum topic of it ``tg:-100123/45``, a person ``tg:12345``,
a message ``812``. The engine never looks inside a key: it compares, stores and hands keys back.
What it needs to know about a chat is recorded as a :class:`Chat` when the chat is bound: its
:class:`ChatKind` and, for a thread, its parent. A thread shares its parent's room: the roles,
the allowed-chat rule and the send budget belong to the parent (:attr:`Chat.room`).

Ids stored before keys were strings were integers, all written by the first front end; they
read back as keys of :data:`LEGACY_CHANNEL` (the ``Legacy*`` field types below do it on every
read, so old sidecars and log payloads load without being rewritten).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Final, TypeAlias

from pydantic import BeforeValidator

# One name each: what a value of the type means, never how a channel spells it.
ChatKey: TypeAlias = str
PersonKey: TypeAlias = str
MessageKey: TypeAlias = str

# The channel whose integer ids were stored before keys were strings.
LEGACY_CHANNEL: Final = "tg"


class ChatKind(StrEnum):
    """What kind of chat a key names: one person's, a group's, or a thread within a group."""

    PRIVATE = "private"
    GROUP = "group"
    THREAD = "thread"


@dataclass(frozen=True, slots=True)
class Chat:
    """A chat as the front end saw it when it was bound: key, kind and (threads) parent."""

    key: ChatKey
    kind: ChatKind
    parent: ChatKey | None = None

    def __post_init__(self) -> None:
        if (self.kind is ChatKind.THREAD) != (self.parent is not None):
            raise ValueError(f"a thread needs a parent, nothing else has one: {self!r}")

    @property
    def room(self) -> ChatKey:
        """The chat whose roles, allowed-chat rule and send budget apply (a thread's parent)."""
        return self.parent or self.key

    @classmethod
    def private(cls, key: ChatKey) -> Chat:
        return cls(key, ChatKind.PRIVATE)

    @classmethod
    def group(cls, key: ChatKey) -> Chat:
        return cls(key, ChatKind.GROUP)

    @classmethod
    def thread(cls, key: ChatKey, parent: ChatKey) -> Chat:
        return cls(key, ChatKind.THREAD, parent)


def make_key(channel: str, *parts: str | int) -> str:
    """``channel:part/part...``: the one way keys are spelled (``make_key("tg", -100, 45)``).

    A part may not hold ``/`` and the channel may not hold ``:``, so a key reads back the way
    it was made (:func:`key_parts`)."""
    if not channel or ":" in channel or "/" in channel:
        raise ValueError(f"bad channel name {channel!r}")
    texts = [str(p) for p in parts]
    if not texts or any(not t or "/" in t for t in texts):
        raise ValueError(f"bad key parts {parts!r}")
    return f"{channel}:{'/'.join(texts)}"


def key_channel(key: str) -> str:
    """The channel a key belongs to (``"tg"`` for ``tg:-100123``; ``""`` when it has none)."""
    channel, sep, _ = key.partition(":")
    return channel if sep else ""


def key_parts(key: str, channel: str) -> list[str] | None:
    """The parts of a key of ``channel`` (``["-100123", "45"]``), or ``None`` for another's."""
    prefix = f"{channel}:"
    if not key.startswith(prefix) or len(key) == len(prefix):
        return None
    return key[len(prefix) :].split("/")


def key_label(key: str) -> str:
    """A key as shown to people: without its channel (``12345`` for ``tg:12345``)."""
    _, sep, rest = key.partition(":")
    return rest if sep else key


def legacy_chat(chat_id: int, thread_id: int = 0) -> Chat:
    """The chat an integer pair stored before keys were strings names.

    Those ids carried no kind; their channel gave private chats positive ids, so the sign is
    read here, once, for stored data only: a live chat's kind always comes from its front end.
    """
    if thread_id:
        parent = make_key(LEGACY_CHANNEL, chat_id)
        return Chat.thread(make_key(LEGACY_CHANNEL, chat_id, thread_id), parent)
    key = make_key(LEGACY_CHANNEL, chat_id)
    return Chat.private(key) if chat_id > 0 else Chat.group(key)


def _person_or_chat(value: object) -> object:
    if isinstance(value, int) and not isinstance(value, bool):
        return make_key(LEGACY_CHANNEL, value)
    return value


def _message(value: object) -> object:
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


# Field types for stored models: a key, or an older integer id read as one.
LegacyPersonKey = Annotated[PersonKey, BeforeValidator(_person_or_chat)]
LegacyChatKey = Annotated[ChatKey, BeforeValidator(_person_or_chat)]
LegacyMessageKey = Annotated[MessageKey, BeforeValidator(_message)]


__all__ = [
    "LEGACY_CHANNEL",
    "Chat",
    "ChatKey",
    "ChatKind",
    "LegacyChatKey",
    "LegacyMessageKey",
    "LegacyPersonKey",
    "MessageKey",
    "PersonKey",
    "key_channel",
    "key_label",
    "key_parts",
    "legacy_chat",
    "make_key",
]
