"""One process, two channels: the engine's one ``Channel`` sends each session's words to the
front end its chat belongs to (docs/slack.md, "Both at once").

A chat belongs to exactly one channel (its key says which: bot.slack.keys), so the choice is
made per session from where the session lives.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from bot.telegram.routes import ChatRoute, MetaStore, route_key
from engine.events import ApprovalDecision, TurnOutcome
from engine.keys import MessageKey
from engine.limits import ChannelLimits
from engine.ports import Channel

if TYPE_CHECKING:
    from engine.api import ApprovalView


async def lives_in(meta: MetaStore, session_id: str, is_chat: Callable[[int], bool]) -> bool:
    """Whether the session's chat (its route in the meta table) is one ``is_chat`` claims."""
    stored = await meta.get_meta(route_key(session_id))
    route = ChatRoute.decode(stored) if stored else None
    return route is not None and is_chat(route.chat_id)


class SplitChannel:
    """``Channel`` that forwards each call to ``second`` when ``is_second(session)`` says the
    session lives there, else to ``first``."""

    def __init__(
        self, first: Channel, second: Channel, is_second: Callable[[str], Awaitable[bool]]
    ) -> None:
        self._first = first
        self._second = second
        self._is_second = is_second

    async def _pick(self, session_id: str) -> Channel:
        return self._second if await self._is_second(session_id) else self._first

    @property
    def limits(self) -> ChannelLimits:
        """What both channels carry: the smaller of each limit (a tool's size is chosen before
        the session's channel is)."""
        one, two = self._first.limits, self._second.limits
        return ChannelLimits(
            message_chars=min(one.message_chars, two.message_chars),
            caption_chars=min(one.caption_chars, two.caption_chars),
            file_bytes=min(one.file_bytes, two.file_bytes),
        )

    async def reply(self, session_id: str, text: str, *, reply_to: MessageKey | None) -> None:
        await (await self._pick(session_id)).reply(session_id, text, reply_to=reply_to)

    async def ask(self, session_id: str, question: str, options: Sequence[str]) -> None:
        await (await self._pick(session_id)).ask(session_id, question, options)

    async def typing(self, session_id: str) -> None:
        await (await self._pick(session_id)).typing(session_id)

    async def turn_started(self, session_id: str) -> None:
        await (await self._pick(session_id)).turn_started(session_id)

    async def turn_ended(self, session_id: str, outcome: TurnOutcome) -> None:
        await (await self._pick(session_id)).turn_ended(session_id, outcome)

    async def plan_changed(self, session_id: str) -> None:
        await (await self._pick(session_id)).plan_changed(session_id)

    async def goal_changed(self, session_id: str) -> None:
        await (await self._pick(session_id)).goal_changed(session_id)

    async def notice(self, session_id: str, text: str) -> None:
        await (await self._pick(session_id)).notice(session_id, text)

    async def send_file(
        self, session_id: str, data: bytes, filename: str, *, caption: str | None
    ) -> None:
        await (await self._pick(session_id)).send_file(session_id, data, filename, caption=caption)

    async def drafts_wanted(self, session_id: str) -> bool:
        return await (await self._pick(session_id)).drafts_wanted(session_id)

    async def draft(self, session_id: str, text: str, *, more: bool = False) -> None:
        await (await self._pick(session_id)).draft(session_id, text, more=more)

    async def approval_asked(self, session_id: str, view: ApprovalView) -> None:
        await (await self._pick(session_id)).approval_asked(session_id, view)

    async def approval_closed(
        self, session_id: str, view: ApprovalView, decision: ApprovalDecision
    ) -> None:
        await (await self._pick(session_id)).approval_closed(session_id, view, decision)


__all__ = ["SplitChannel", "lives_in"]
