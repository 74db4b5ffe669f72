"""The answer budget for non-owners: what keeps a crowd from burying the owner, on every
channel (docs/telegram.md, docs/slack.md).

Everything the bot says to a non-owner in a group (the polite refusal, and the answers to the
read-only commands /help, /start, /status and /show_plan) costs one answer from one budget,
counted over the last minute: at most ``PER_USER`` answers per user per chat and at most
``PER_CHAT`` per chat, whoever asks. Past it the message is dropped silently (no reply, nothing
queued) and counted in ``dropped``. So a group of sixty strangers typing /help costs the chat
three messages a minute, and an owner's command never waits behind more than three of them.
Owners are never counted.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TypeVar

WINDOW_S = 60.0
PER_USER = 2  # a stranger's /help and then /status
PER_CHAT = 3  # whoever asks: a flood gets three answers a minute

_K = TypeVar("_K")


@dataclass(slots=True)
class AnswerBudget:
    """Sliding one-minute windows of answers to non-owners, per (chat, user) and per chat."""

    per_user: int = PER_USER
    per_chat: int = PER_CHAT
    window_s: float = WINDOW_S
    dropped: int = 0  # answers not given because the budget was spent
    _users: dict[tuple[int, int], deque[float]] = field(default_factory=dict)
    _chats: dict[int, deque[float]] = field(default_factory=dict)

    def allows(self, chat_id: int, who: int, now: float) -> bool:
        """Whether one more answer to ``who`` in ``chat_id`` fits the budget now."""
        return (
            self._left(self._chats, chat_id, now) < self.per_chat
            and self._left(self._users, (chat_id, who), now) < self.per_user
        )

    def take(self, chat_id: int, who: int, now: float) -> None:
        """Count one answer given."""
        self._chats.setdefault(chat_id, deque()).append(now)
        self._users.setdefault((chat_id, who), deque()).append(now)

    def drop(self) -> None:
        """Count one answer not given."""
        self.dropped += 1

    def _left(self, windows: dict[_K, deque[float]], key: _K, now: float) -> int:
        window = windows.get(key)
        if window is None:
            return 0
        while window and now - window[0] >= self.window_s:
            window.popleft()
        if not window:
            del windows[key]  # nothing kept for who went quiet
            return 0
        return len(window)


__all__ = ["PER_CHAT", "PER_USER", "WINDOW_S", "AnswerBudget"]
