"""Chat leases in one process: :class:`engine.ports.ChatLeases` in memory.

A SQLite home has one process, which holds every chat; this keeps the rules of the PostgreSQL
leases (``storage.postgres.leases``) so the engine's code path is the same with either store:
a free or lapsed lease is taken with the next epoch, the holder's live lease is renewed with its
epoch kept, and another replica's live lease is refused. The engine's tests use it as the fake.
"""

from __future__ import annotations

import time

from engine.keys import ChatKey
from engine.ports import Clock, Lease


class LocalChatLeases:
    """:class:`engine.ports.ChatLeases` in memory, on ``clock``."""

    def __init__(self, *, clock: Clock = time.time) -> None:
        self._clock = clock
        self._leases: dict[ChatKey, Lease] = {}

    async def acquire(self, chat: ChatKey, replica: str, ttl_s: float) -> Lease | None:
        """Take or renew ``chat`` for ``replica`` (see the protocol)."""
        now = self._clock()
        held = self._leases.get(chat)
        live = held is not None and held.expires_at > now
        if held is not None and live and held.replica != replica:
            return None
        epoch = held.epoch if held is not None and live else (held.epoch + 1 if held else 1)
        lease = Lease(chat=chat, replica=replica, epoch=epoch, expires_at=now + ttl_s)
        self._leases[chat] = lease
        return lease

    async def release(self, chat: ChatKey, replica: str) -> None:
        """Let ``chat`` go if ``replica`` holds it; its epoch is kept for the next taker."""
        held = self._leases.get(chat)
        if held is not None and held.replica == replica:
            self._leases[chat] = Lease(chat, replica, held.epoch, expires_at=0.0)

    async def held_by(self, replica: str) -> list[Lease]:
        """``replica``'s live leases, by chat key."""
        now = self._clock()
        return sorted(
            (x for x in self._leases.values() if x.replica == replica and x.expires_at > now),
            key=lambda x: x.chat,
        )

    async def lapsed(self) -> list[ChatKey]:
        """Chats whose holder let the lease lapse without releasing it, by key."""
        now = self._clock()
        return sorted(x.chat for x in self._leases.values() if 0 < x.expires_at <= now)

    async def replicas(self) -> int:
        """How many replicas hold a live lease now."""
        now = self._clock()
        return len({x.replica for x in self._leases.values() if x.expires_at > now})

    async def holder(self, chat: ChatKey) -> Lease | None:
        """The live lease on ``chat``, if any."""
        held = self._leases.get(chat)
        return held if held is not None and held.expires_at > self._clock() else None


__all__ = ["LocalChatLeases"]
