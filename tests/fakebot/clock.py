"""A manual clock whose ``sleep`` advances time at once (for the outbox and the access gate)."""

from __future__ import annotations

import asyncio


class ManualClock:
    """Call it for the time; ``await sleep(s)`` records ``s``, advances, and yields once."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)
