"""Telegram's overall limit shared by replicas: each one's share of about 30 calls a second.

Telegram limits a bot to about 30 messages a second in all, whichever process sends them. One
process gets that from ``AIORateLimiter``; several replicas each with their own would together
send up to 30 times their number. :class:`SharedRateLimiter` keeps AIORateLimiter for what is
per group (20 a minute) and for ``RetryAfter``, and replaces its overall limit with a leaky
bucket whose rate is the overall limit divided by the replicas that hold chats now (the owner
loop counts them every round: ``share``). A replica holding no chat sends nothing, so it takes
no share; a group's own pacing stays with its one owner.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from telegram.ext import AIORateLimiter, BaseRateLimiter

OVERALL_PER_S = 30.0


class SharedRateLimiter(BaseRateLimiter[int]):
    """AIORateLimiter's group limit and retries, with an overall rate this replica shares."""

    def __init__(
        self,
        overall_per_s: float = OVERALL_PER_S,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.overall_per_s = overall_per_s
        self.rate = overall_per_s  # this replica's share, calls a second
        self._inner = AIORateLimiter(overall_max_rate=0)  # its group limit and RetryAfter only
        self._clock = clock
        self._sleep = sleep
        self._level = 0.0  # calls in the bucket
        self._at = clock()
        self._lock = asyncio.Lock()

    def share(self, replicas: int) -> None:
        """``replicas`` hold chats now (this one among them): take an equal share."""
        self.rate = self.overall_per_s / max(1, replicas)

    async def initialize(self) -> None:
        await self._inner.initialize()

    async def shutdown(self) -> None:
        await self._inner.shutdown()

    async def take(self) -> None:
        """Wait until one more call fits this replica's share (bursts up to a second's)."""
        async with self._lock:
            now = self._clock()
            self._level = max(0.0, self._level - (now - self._at) * self.rate)
            self._at = now
            capacity = max(1.0, self.rate)
            over = self._level + 1 - capacity
            if over > 0:
                await self._sleep(over / self.rate)
                now = self._clock()
                self._level = max(0.0, self._level - (now - self._at) * self.rate)
                self._at = now
            self._level += 1

    async def process_request(
        self,
        callback: Callable[..., Coroutine[Any, Any, Any]],
        args: Any,
        kwargs: dict[str, Any],
        endpoint: str,
        data: dict[str, Any],
        rate_limit_args: int | None,
    ) -> Any:
        """The overall share first (calls to a chat only, as AIORateLimiter counts), then
        AIORateLimiter's group limit and retries."""
        if data.get("chat_id") is not None:
            await self.take()
        return await self._inner.process_request(
            callback, args, kwargs, endpoint, data, rate_limit_args
        )


__all__ = ["OVERALL_PER_S", "SharedRateLimiter"]
