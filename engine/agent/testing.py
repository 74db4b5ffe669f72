"""Test doubles for the agent: a channel that records what it was told.

Used by the engine's tests (the demo has its own console channel); it prints nothing itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.events import ApprovalDecision, TurnOutcome
from engine.keys import MessageKey
from engine.limits import ChannelLimits

if TYPE_CHECKING:
    from engine.approval.policy import ApprovalView


@dataclass(frozen=True, slots=True)
class ChannelCall:
    """One notification: the method name, the session and its arguments."""

    method: str
    session_id: str
    args: dict[str, Any] = field(default_factory=dict)


class RecordingChannel:
    """An :class:`engine.ports.Channel` that appends every call to ``calls``.

    ``wait_for(method)`` lets a test wait (without sleeping) until a notification arrives.
    """

    def __init__(self, *, drafts: bool = False, limits: ChannelLimits | None = None) -> None:
        self.calls: list[ChannelCall] = []
        self.drafts = drafts
        self.limits = limits or ChannelLimits()
        self._changed = asyncio.Condition()

    async def _record(self, method: str, session_id: str, **args: Any) -> None:
        async with self._changed:
            self.calls.append(ChannelCall(method, session_id, args))
            self._changed.notify_all()

    async def reply(self, session_id: str, text: str, *, reply_to: MessageKey | None) -> None:
        await self._record("reply", session_id, text=text, reply_to=reply_to)

    async def ask(self, session_id: str, question: str, options: Sequence[str]) -> None:
        await self._record("ask", session_id, question=question, options=list(options))

    async def typing(self, session_id: str) -> None:
        await self._record("typing", session_id)

    async def turn_started(self, session_id: str) -> None:
        await self._record("turn_started", session_id)

    async def turn_ended(self, session_id: str, outcome: TurnOutcome) -> None:
        await self._record("turn_ended", session_id, outcome=outcome)

    async def plan_changed(self, session_id: str) -> None:
        await self._record("plan_changed", session_id)

    async def goal_changed(self, session_id: str) -> None:
        await self._record("goal_changed", session_id)

    async def notice(self, session_id: str, text: str) -> None:
        await self._record("notice", session_id, text=text)

    async def send_file(
        self, session_id: str, data: bytes, filename: str, *, caption: str | None
    ) -> None:
        await self._record("send_file", session_id, data=data, filename=filename, caption=caption)

    async def drafts_wanted(self, session_id: str) -> bool:
        return self.drafts

    async def draft(self, session_id: str, text: str, *, more: bool = False) -> None:
        await self._record("draft", session_id, text=text, more=more)

    async def approval_asked(self, session_id: str, view: ApprovalView) -> None:
        await self._record("approval_asked", session_id, view=view)

    async def approval_closed(
        self, session_id: str, view: ApprovalView, decision: ApprovalDecision
    ) -> None:
        await self._record("approval_closed", session_id, view=view, decision=decision)

    def of(self, method: str) -> list[ChannelCall]:
        """The recorded calls of one method, in order."""
        return [c for c in self.calls if c.method == method]

    async def wait_for(self, method: str, count: int = 1) -> list[ChannelCall]:
        """Wait until ``count`` calls of ``method`` were recorded; return them.

        Callers bound the wait with ``asyncio.wait_for``.
        """
        async with self._changed:
            await self._changed.wait_for(lambda: len(self.of(method)) >= count)
            return self.of(method)


__all__ = ["ChannelCall", "RecordingChannel"]
