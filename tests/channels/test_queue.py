"""The engine's channel as a queue (bot.channels.ChannelQueue): the break in the engine ⇄
front end loop that lets both be built in one pass."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

import pytest

from bot.channels import ChannelQueue
from engine.api import ApprovalView
from engine.events import ApprovalDecision, TurnOutcome
from engine.keys import MessageKey
from engine.limits import ChannelLimits

LIMITS = ChannelLimits(message_chars=100)


class Recording:
    """A front end's channel that writes down what it was told."""

    limits = LIMITS

    def __init__(self) -> None:
        self.said: list[tuple[str, str]] = []
        self.release = asyncio.Event()
        self.release.set()

    async def reply(self, session_id: str, text: str, *, reply_to: MessageKey | None) -> None:
        await self.release.wait()
        self.said.append((session_id, text))

    async def ask(self, session_id: str, question: str, options: Sequence[str]) -> None: ...
    async def typing(self, session_id: str) -> None: ...
    async def turn_started(self, session_id: str) -> None: ...
    async def turn_ended(self, session_id: str, outcome: TurnOutcome) -> None: ...
    async def plan_changed(self, session_id: str) -> None: ...
    async def goal_changed(self, session_id: str) -> None: ...

    async def notice(self, session_id: str, text: str) -> None:
        self.said.append((session_id, f"notice: {text}"))

    async def send_file(
        self, session_id: str, data: bytes, filename: str, *, caption: str | None
    ) -> None:
        raise RuntimeError(f"{filename} is too large")

    async def drafts_wanted(self, session_id: str) -> bool:
        return session_id == "private"

    async def draft(self, session_id: str, text: str, *, more: bool = False) -> None: ...
    async def approval_asked(self, session_id: str, view: ApprovalView) -> None: ...
    async def approval_closed(
        self, session_id: str, view: ApprovalView, decision: ApprovalDecision
    ) -> None: ...


async def test_what_the_engine_says_before_the_front_end_exists_waits_and_comes_in_order() -> None:
    queue = ChannelQueue(LIMITS)
    first = asyncio.ensure_future(queue.reply("s1", "one", reply_to=None))
    second = asyncio.ensure_future(queue.notice("s1", "two"))
    await asyncio.sleep(0)
    assert not first.done()  # nothing dropped: it waits for the front end
    channel = Recording()
    delivering = asyncio.ensure_future(queue.deliver(channel))
    await asyncio.wait_for(asyncio.gather(first, second), 5)
    assert channel.said == [("s1", "one"), ("s1", "notice: two")]
    # Answers and errors come back to the caller as from the channel itself.
    assert await queue.drafts_wanted("private") is True
    assert await queue.drafts_wanted("group") is False
    with pytest.raises(RuntimeError, match="too large"):
        await queue.send_file("s1", b"x", "big.bin", caption=None)
    assert queue.limits == LIMITS
    delivering.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await delivering


async def test_one_slow_chat_does_not_hold_another() -> None:
    queue, channel = ChannelQueue(LIMITS), Recording()
    delivering = asyncio.ensure_future(queue.deliver(channel))
    channel.release.clear()  # the reply waits out a rate limit
    slow = asyncio.ensure_future(queue.reply("s1", "slow", reply_to=None))
    await asyncio.wait_for(queue.notice("s2", "quick"), 5)
    assert channel.said == [("s2", "notice: quick")] and not slow.done()
    channel.release.set()
    await asyncio.wait_for(slow, 5)
    delivering.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await delivering


async def test_once_delivery_ended_calls_are_dropped_as_a_gone_chat_drops_them() -> None:
    queue, channel = ChannelQueue(LIMITS), Recording()
    delivering = asyncio.ensure_future(queue.deliver(channel))
    await asyncio.sleep(0)
    delivering.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await delivering
    await asyncio.wait_for(queue.reply("s1", "late", reply_to=None), 5)
    assert await queue.drafts_wanted("private") is False
    with pytest.raises(RuntimeError, match="not connected"):
        await queue.send_file("s1", b"x", "f.txt", caption=None)
    assert channel.said == []
