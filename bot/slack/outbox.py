"""Every Web API call that speaks in a channel, paced per channel (docs/slack.md).

Slack allows about one message a second per channel and ``chat.update`` in its own tier; a
burst past that answers 429 with ``Retry-After``. One lane per channel runs its calls in
order, at most one every ``interval_s``; a 429 waits what Slack says and tries again (the
same discipline as the Telegram outbox, bot.telegram.outbox, without PTB's types). Edits of
one message coalesce while they wait: only the newest text goes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

_log = logging.getLogger("plangate.slack.outbox")

MAX_TRIES = 5
MAX_POSTED_KEPT = 4096
MAX_RETRY_AFTER_S = 120.0
Sleep = Callable[[float], Awaitable[None]]


def retry_after_s(err: SlackApiError) -> float | None:
    """The wait a 429 asks for (seconds), None for any other refusal."""
    response = err.response
    if getattr(response, "status_code", None) != 429:
        return None
    headers = getattr(response, "headers", {}) or {}
    raw = headers.get("Retry-After") or headers.get("retry-after") or "1"
    try:
        return min(max(float(raw), 0.0), MAX_RETRY_AFTER_S)
    except ValueError:
        return 1.0


@dataclass(slots=True)
class _Lane:
    # Calls take the lock in arrival order (asyncio's lock is fair), so a conversation's calls
    # go out in the order they were made.
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    last_at: float | None = None
    waiting: int = 0
    # The newest text waiting for each message being edited: an older waiting edit skips.
    edits: dict[str, int] = field(default_factory=dict)


class SlackOutbox:
    """Paced, ordered Web API calls per channel (``post``, ``update``, ``upload``, ...)."""

    def __init__(
        self,
        client: AsyncWebClient,
        *,
        interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.client = client
        self._interval = interval_s
        self._clock = clock
        self._sleep = sleep
        self._lanes: dict[str, _Lane] = {}
        self._edit_seq = 0
        self.calls = 0
        self.retried = 0
        # The newest message posted in each conversation (its ts): a card already at the
        # bottom is edited rather than posted again.
        self.last_ts: dict[str, str] = {}
        # The ts of the messages posted lately (any conversation): a thread under one of them
        # is the bot's own thread.
        self.posted_ts: OrderedDict[str, None] = OrderedDict()

    async def post(
        self,
        channel: str,
        text: str,
        *,
        blocks: list[dict[str, Any]] | None = None,
        thread_ts: str | None = None,
    ) -> str:
        """``chat.postMessage``; returns the new message's ts."""
        kwargs: dict[str, Any] = {"channel": channel, "text": text, "unfurl_links": False}
        if blocks is not None:
            kwargs["blocks"] = blocks
        if thread_ts:
            kwargs["thread_ts"] = thread_ts
        result = await self._call(channel, "chat_postMessage", kwargs)
        ts = str(result["ts"])
        self.last_ts[channel] = ts
        self.posted_ts[ts] = None
        while len(self.posted_ts) > MAX_POSTED_KEPT:
            self.posted_ts.popitem(last=False)
        return ts

    async def update(
        self, channel: str, ts: str, text: str, *, blocks: list[dict[str, Any]] | None = None
    ) -> None:
        """``chat.update``; an edit of the same message still waiting is skipped for this one
        (only the newest text goes)."""
        kwargs: dict[str, Any] = {"channel": channel, "ts": ts, "text": text}
        kwargs["blocks"] = blocks if blocks is not None else []
        self._edit_seq += 1
        lane = self._lane(channel)
        lane.edits[ts] = mine = self._edit_seq
        await self._call(channel, "chat_update", kwargs, edit=(ts, mine))

    async def ephemeral(self, channel: str, user: str, text: str) -> None:
        """``chat.postEphemeral``: words only ``user`` sees (a refusal, a press's answer)."""
        kwargs = {"channel": channel, "user": user, "text": text}
        await self._call(channel, "chat_postEphemeral", kwargs)

    async def upload(
        self,
        channel: str,
        data: bytes,
        filename: str,
        *,
        comment: str | None = None,
        thread_ts: str | None = None,
    ) -> None:
        """``files_upload_v2`` of ``data`` into the channel (the thread when given)."""
        kwargs: dict[str, Any] = {"channel": channel, "content": data, "filename": filename}
        if comment:
            kwargs["initial_comment"] = comment
        if thread_ts:
            kwargs["thread_ts"] = thread_ts
        await self._call(channel, "files_upload_v2", kwargs)
        self.last_ts.pop(channel, None)

    async def leave(self, channel: str) -> None:
        await self._call(channel, "conversations_leave", {"channel": channel})

    async def flush(self) -> None:
        """Wait until no call is waiting or running in any lane."""
        while any(lane.waiting or lane.lock.locked() for lane in self._lanes.values()):
            await asyncio.sleep(0.01)

    async def aclose(self) -> None:
        self._lanes.clear()

    def _lane(self, channel: str) -> _Lane:
        lane = self._lanes.get(channel)
        if lane is None:
            lane = self._lanes[channel] = _Lane()
        return lane

    async def _call(
        self,
        channel: str,
        method: str,
        kwargs: dict[str, Any],
        *,
        edit: tuple[str, int] | None = None,
    ) -> Any:
        lane = self._lane(channel)
        lane.waiting += 1
        try:
            async with lane.lock:
                if edit is not None and lane.edits.get(edit[0]) != edit[1]:
                    return None  # a newer edit of this message waits: it goes instead
                if lane.last_at is not None:
                    wait = lane.last_at + self._interval - self._clock()
                    if wait > 0:
                        await self._sleep(wait)
                try:
                    return await self._send(method, kwargs)
                finally:
                    lane.last_at = self._clock()
                    if edit is not None and lane.edits.get(edit[0]) == edit[1]:
                        del lane.edits[edit[0]]
        finally:
            lane.waiting -= 1

    async def _send(self, method: str, kwargs: dict[str, Any]) -> Any:
        """One call; a 429 waits what Slack says and tries again (``MAX_TRIES`` in all)."""
        for attempt in range(1, MAX_TRIES + 1):
            self.calls += 1
            try:
                return await getattr(self.client, method)(**kwargs)
            except SlackApiError as err:
                wait_s = retry_after_s(err)
                if wait_s is None or attempt == MAX_TRIES:
                    raise
                self.retried += 1
                _log.info("slack: 429 on %s, waiting %.0f s", method, wait_s)
                await self._sleep(wait_s)
        raise AssertionError("unreachable")


__all__ = ["SlackOutbox", "retry_after_s"]
