"""Every Web API call that speaks in a channel, paced per channel (docs/slack.md).

Slack allows about one message a second per channel and ``chat.update`` in its own tier; a
burst past that answers 429 with ``Retry-After``. One lane per channel runs its calls in
order, at most one every ``interval_s``; a 429 waits what Slack says and tries again (the
same discipline as the Telegram outbox, bot.telegram.outbox, without PTB's types). Edits of
one message coalesce while they wait: only the newest text goes, and every caller of the
replaced edit gets its answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

_log = logging.getLogger("plangate.slack.outbox")

MAX_TRIES = 5
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
class _Op:
    method: str
    kwargs: dict[str, Any]
    futures: list[asyncio.Future[Any]] = field(default_factory=list)
    edit_of: str | None = None  # the ts an update edits (coalescing key)


@dataclass(slots=True)
class _Lane:
    ops: deque[_Op] = field(default_factory=deque)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    last_at: float | None = None
    task: asyncio.Task[None] | None = None


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
        self.calls = 0
        self.retried = 0
        # The newest message posted in each conversation (its ts): a card already at the
        # bottom is edited rather than posted again.
        self.last_ts: dict[str, str] = {}

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
        result = await self._submit(channel, _Op("chat_postMessage", kwargs))
        ts = str(result["ts"])
        self.last_ts[channel] = ts
        return ts

    async def update(
        self, channel: str, ts: str, text: str, *, blocks: list[dict[str, Any]] | None = None
    ) -> None:
        """``chat.update``; a queued edit of the same message is replaced by this one."""
        kwargs: dict[str, Any] = {"channel": channel, "ts": ts, "text": text}
        kwargs["blocks"] = blocks if blocks is not None else []
        lane = self._lane(channel)
        for op in lane.ops:
            if op.edit_of == ts:
                op.kwargs = kwargs
                future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
                op.futures.append(future)
                await future
                return
        await self._submit(channel, _Op("chat_update", kwargs, edit_of=ts))

    async def ephemeral(self, channel: str, user: str, text: str) -> None:
        """``chat.postEphemeral``: words only ``user`` sees (a refusal, a press's answer)."""
        await self._submit(
            channel, _Op("chat_postEphemeral", {"channel": channel, "user": user, "text": text})
        )

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
        await self._submit(channel, _Op("files_upload_v2", kwargs))
        self.last_ts.pop(channel, None)

    async def leave(self, channel: str) -> None:
        await self._submit(channel, _Op("conversations_leave", {"channel": channel}))

    async def flush(self) -> None:
        """Wait until every lane is empty."""
        while any(lane.ops for lane in self._lanes.values()):
            await asyncio.sleep(0.01)

    async def aclose(self) -> None:
        for lane in self._lanes.values():
            if lane.task is not None:
                lane.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await lane.task
        self._lanes.clear()

    def _lane(self, channel: str) -> _Lane:
        lane = self._lanes.get(channel)
        if lane is None:
            lane = self._lanes[channel] = _Lane()
        if lane.task is None or lane.task.done():
            lane.task = asyncio.create_task(self._work(lane), name=f"slack-outbox:{channel}")
        return lane

    async def _submit(self, channel: str, op: _Op) -> Any:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        op.futures.append(future)
        lane = self._lane(channel)
        lane.ops.append(op)
        lane.wake.set()
        return await future

    async def _work(self, lane: _Lane) -> None:
        while True:
            if not lane.ops:
                lane.wake.clear()
                await lane.wake.wait()
                continue
            if lane.last_at is not None:
                wait = lane.last_at + self._interval - self._clock()
                if wait > 0:
                    await self._sleep(wait)
            op = lane.ops[0]
            result: Any = None
            error: BaseException | None = None
            for _ in range(MAX_TRIES):
                try:
                    self.calls += 1
                    result = await getattr(self.client, op.method)(**op.kwargs)
                    error = None
                    break
                except SlackApiError as err:
                    error = err
                    wait_s = retry_after_s(err)
                    if wait_s is None:
                        break
                    self.retried += 1
                    _log.info("slack: 429 on %s, waiting %.0f s", op.method, wait_s)
                    await self._sleep(wait_s)
                except Exception as err:  # network trouble: the caller hears it
                    error = err
                    break
            lane.last_at = self._clock()
            lane.ops.popleft()
            for future in op.futures:
                if future.done():
                    continue
                if error is not None:
                    future.set_exception(error)
                else:
                    future.set_result(result)


__all__ = ["SlackOutbox", "retry_after_s"]
