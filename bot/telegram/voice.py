"""Voice notes: the transcript offered back with Send and Discard (docs/inputs.md).

A voice note (or audio file) from an owner is transcribed (``engine.model.transcribe``) and the
text is posted as a reply to it with two buttons; nothing reaches the agent until the owner
chooses. **Send** gives the agent the transcript as the owner's message; **Discard** drops it;
a reply to the transcript message with other text sends that text instead (the owner's
correction). Each transcript is used once; its buttons are ``v:send:<token>`` and
``v:drop:<token>``, and the tokens live in this process only (a press after a restart is "out
of date").
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from dataclasses import dataclass

from telegram import InlineKeyboardButton, InlineKeyboardMarkup

from bot.telegram.keys import SessionKey
from bot.telegram.render import escape_within

VOICE_PATTERN = r"^v:(send|drop):[0-9a-f]{8}$"
SEND_LABEL = "📨 Send"
DISCARD_LABEL = "🗑 Discard"
NOT_CONFIGURED_TEXT = (
    "🎙 I cannot listen to voice notes here: no speech-to-text is set up. Set "
    "PLANGATE_TRANSCRIBE_MODEL (default whisper-1) and, for a server other than the model's, "
    "PLANGATE_TRANSCRIBE_BASE_URL; or type the message."
)
EMPTY_TEXT = "🎙 I heard no words in that voice note; nothing was sent."
MAX_PENDING = 256  # transcripts waiting for a choice, oldest forgotten first
MAX_SHOWN = 3500


@dataclass(frozen=True, slots=True)
class Transcript:
    """A transcript waiting for Send, Discard or a corrected reply."""

    token: str
    session_id: str
    key: SessionKey
    text: str
    voice_message_id: int
    message_id: int = 0  # the transcript message, once posted


def transcript_html(text: str) -> str:
    """The transcript message: the words, and what the owner can do with them."""
    return (
        f"🎙 <i>{escape_within(text, MAX_SHOWN)}</i>\n\n"
        "Send it to the agent, discard it, or reply to this message with a corrected text."
    )


def transcript_keyboard(token: str) -> InlineKeyboardMarkup:
    """Send and Discard, bound to one transcript."""
    return InlineKeyboardMarkup(
        [
            [
                InlineKeyboardButton(SEND_LABEL, callback_data=f"v:send:{token}"),
                InlineKeyboardButton(DISCARD_LABEL, callback_data=f"v:drop:{token}"),
            ]
        ]
    )


def closed_html(text: str, how: str) -> str:
    """The transcript message once it was used: the words and how it ended."""
    return f"🎙 <i>{escape_within(text, MAX_SHOWN)}</i>\n\n{how}"


class Transcripts:
    """The transcripts waiting for a choice, by token and by their message."""

    def __init__(self) -> None:
        self._by_token: OrderedDict[str, Transcript] = OrderedDict()

    def add(self, session_id: str, key: SessionKey, text: str, voice_message_id: int) -> str:
        """Keep a new transcript; returns its token."""
        token = secrets.token_hex(4)
        self._by_token[token] = Transcript(token, session_id, key, text, voice_message_id)
        while len(self._by_token) > MAX_PENDING:
            self._by_token.popitem(last=False)
        return token

    def posted(self, token: str, message_id: int) -> None:
        """The transcript message is on screen: a reply to it is a correction."""
        found = self._by_token.get(token)
        if found is not None:
            self._by_token[token] = Transcript(
                found.token,
                found.session_id,
                found.key,
                found.text,
                found.voice_message_id,
                message_id,
            )

    def take(self, token: str) -> Transcript | None:
        """The transcript for a press, once (a second press finds nothing)."""
        return self._by_token.pop(token, None)

    def take_reply(self, key: SessionKey, message_id: int) -> Transcript | None:
        """The transcript a reply to ``message_id`` in this chat answers, once."""
        for token, found in self._by_token.items():
            if found.message_id == message_id and found.key[0] == key[0]:
                del self._by_token[token]
                return found
        return None


__all__ = [
    "DISCARD_LABEL",
    "EMPTY_TEXT",
    "NOT_CONFIGURED_TEXT",
    "SEND_LABEL",
    "VOICE_PATTERN",
    "Transcript",
    "Transcripts",
    "closed_html",
    "transcript_html",
    "transcript_keyboard",
]
