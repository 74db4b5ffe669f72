"""The outbox: the one owner of every send and edit to Telegram (DESIGN.md §7, §14).

Per chat, operations run in order on one worker, paced: about one call a second with a short
burst tolerated (a token bucket), and in a group at most 20 calls in any rolling minute
(each counted from its answer, the latest it can have reached Telegram).
Edits are coalesced per message: while an edit waits, a newer one replaces its content, so
only the latest card state is sent, and an edit whose text and keyboard equal what was last
delivered makes no call. "message is not modified" counts as success; "message to edit not
found" is reported back (``EditResult.outcome == "not_found"`` and ``on_edit_lost``) so the
caller reposts the card. ``RetryAfter`` pauses only that chat for the time Telegram asked,
then the same operation is tried again (at most ``max_attempts`` times): never a storm.

Errors (what callers see)::

    send_*  -> the PTB exception (BadRequest, Forbidden, ...) raised from the awaited call
    edit    -> never raises; EditResult(outcome, error)

Clock and sleep are injected so tests run without real waiting. ``AIORateLimiter`` stays in
the Application as the backstop.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dtm
import logging
import time
import warnings
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Literal

from telegram import Bot, InlineKeyboardMarkup, InputFile, LinkPreviewOptions, Message
from telegram.constants import ParseMode
from telegram.error import BadRequest, NetworkError, RetryAfter, TelegramError

log = logging.getLogger("telegram.outbox")

EditOutcome = Literal["edited", "unchanged", "not_modified", "not_found", "failed"]
Sleep = Callable[[float], Awaitable[None]]
EditLost = Callable[[int, int], Coroutine[Any, Any, None]]

_NO_PREVIEW = LinkPreviewOptions(is_disabled=True)
_GROUP_WINDOW_S = 60.0
MAX_IN_FLIGHT = 16  # Bot API calls at once, all chats together


@dataclass(frozen=True, slots=True)
class EditResult:
    """How an edit ended. ``ok`` is true for edited, unchanged and not_modified."""

    outcome: EditOutcome
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.outcome in ("edited", "unchanged", "not_modified")


def retry_after_s(err: RetryAfter) -> float:
    """Seconds Telegram asked to wait, whatever type this PTB version returns."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value: Any = err.retry_after
    if isinstance(value, dtm.timedelta):
        return value.total_seconds()
    return float(value)


def _markup_key(markup: InlineKeyboardMarkup | None) -> Any:
    if markup is None:
        return None
    return tuple(
        tuple((b.text, b.callback_data, b.url) for b in row) for row in markup.inline_keyboard
    )


@dataclass
class _Op:
    kind: Literal["send", "document", "edit", "delete", "pin", "unpin", "call"]
    run: Callable[[], Awaitable[Any]] | None = None
    future: asyncio.Future[Any] | None = None
    attempts: int = 0
    # edits only
    message_id: int = 0
    html: str | None = None  # None: keep the text, change only the keyboard
    markup: InlineKeyboardMarkup | None = None
    waiters: list[asyncio.Future[EditResult]] = field(default_factory=list)


@dataclass
class _Lane:
    chat_id: int
    queue: deque[_Op] = field(default_factory=deque)
    pending_edits: dict[int, _Op] = field(default_factory=dict)
    tokens: float = 0.0
    tokens_at: float = 0.0
    recent: deque[float] = field(default_factory=deque)  # calls' answer times, groups only
    paused_until: float = 0.0
    worker: asyncio.Task[None] | None = None
    current: _Op | None = None  # the operation in flight
    # Last state delivered per message id: (html, markup key).
    known: dict[int, tuple[str | None, Any]] = field(default_factory=dict)


class Outbox:
    """Every Telegram send and edit goes through here; see the module docstring for rules."""

    def __init__(
        self,
        bot: Bot,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        chat_interval_s: float = 1.0,
        chat_burst: int = 3,
        group_per_minute: int = 20,
        max_attempts: int = 5,
        on_edit_lost: EditLost | None = None,
        max_in_flight: int = MAX_IN_FLIGHT,
    ) -> None:
        self._bot = bot
        self._clock = clock
        self._sleep = sleep
        self._interval_s = chat_interval_s
        self._burst = chat_burst
        self._group_per_minute = group_per_minute
        self._max_attempts = max_attempts
        self._on_edit_lost = on_edit_lost
        self._lanes: dict[int, _Lane] = {}
        self._closed = False
        self._tasks: set[asyncio.Task[None]] = set()
        # Calls in flight across all chats. Past a few, more only queue in the HTTP pool
        # (PTB's pool_timeout of 1 s then fails a send that never left: a lost reply); the
        # wait here has no timeout.
        self._in_flight = asyncio.Semaphore(max_in_flight)

    # ---- public verbs ----------------------------------------------------------------

    async def send_text(
        self,
        chat_id: int,
        html: str,
        *,
        thread_id: int | None = None,
        reply_to: int | None = None,
        reply_markup: Any = None,
    ) -> Message:
        """Send an HTML message (paced, in order); returns the sent Message or raises."""

        async def run() -> Message:
            return await self._bot.send_message(
                chat_id,
                html,
                parse_mode=ParseMode.HTML,
                message_thread_id=thread_id,
                reply_to_message_id=reply_to,
                allow_sending_without_reply=True if reply_to is not None else None,
                reply_markup=reply_markup,
                link_preview_options=_NO_PREVIEW,
            )

        msg: Message = await self._submit(chat_id, _Op(kind="send", run=run))
        lane = self._lane(chat_id)
        markup = reply_markup if isinstance(reply_markup, InlineKeyboardMarkup) else None
        lane.known[msg.message_id] = (html, _markup_key(markup))
        return msg

    async def send_document(
        self,
        chat_id: int,
        data: bytes,
        filename: str,
        *,
        caption_html: str | None = None,
        thread_id: int | None = None,
        reply_to: int | None = None,
    ) -> Message:
        """Send bytes as a document (e.g. a long plan as ``plan.md``); raises on failure."""

        async def run() -> Message:
            return await self._bot.send_document(
                chat_id,
                InputFile(data, filename=filename),
                caption=caption_html,
                parse_mode=ParseMode.HTML if caption_html else None,
                message_thread_id=thread_id,
                reply_to_message_id=reply_to,
                allow_sending_without_reply=True if reply_to is not None else None,
            )

        result: Message = await self._submit(chat_id, _Op(kind="document", run=run))
        return result

    def edit(
        self,
        chat_id: int,
        message_id: int,
        html: str,
        *,
        reply_markup: InlineKeyboardMarkup | None,
    ) -> asyncio.Future[EditResult]:
        """Queue an edit to this text and keyboard (``None`` removes the keyboard).

        Coalesced: a waiting edit of the same message takes the newer content and every
        caller's future gets the result of the edit that was actually delivered. Await the
        future to learn the outcome (``not_found``: repost the card); it never raises.
        """
        return self._queue_edit(chat_id, message_id, html, reply_markup)

    def edit_keyboard(
        self, chat_id: int, message_id: int, reply_markup: InlineKeyboardMarkup | None
    ) -> asyncio.Future[EditResult]:
        """Queue a keyboard-only edit (``None`` strips it), coalesced like ``edit``."""
        return self._queue_edit(chat_id, message_id, None, reply_markup)

    async def delete(self, chat_id: int, message_id: int) -> bool:
        """Delete a message; False when Telegram refused (already gone, too old)."""

        async def run() -> bool:
            return bool(await self._bot.delete_message(chat_id, message_id))

        try:
            ok: bool = await self._submit(chat_id, _Op(kind="delete", run=run))
        except BadRequest as err:
            log.info("telegram.outbox.delete_refused chat=%s error=%s", chat_id, err.message)
            return False
        self._lane(chat_id).known.pop(message_id, None)
        return ok

    async def pin(self, chat_id: int, message_id: int) -> bool:
        """Pin a message quietly; False where the bot may not pin (no error raised)."""

        async def run() -> bool:
            return bool(
                await self._bot.pin_chat_message(chat_id, message_id, disable_notification=True)
            )

        try:
            ok: bool = await self._submit(chat_id, _Op(kind="pin", run=run))
        except BadRequest as err:
            log.info("telegram.outbox.pin_refused chat=%s error=%s", chat_id, err.message)
            return False
        return ok

    async def call(self, chat_id: int, run: Callable[[], Awaitable[Any]]) -> Any:
        """Run any other Bot call for this chat under the same pacing and RetryAfter rules."""
        return await self._submit(chat_id, _Op(kind="call", run=run))

    async def typing(self, chat_id: int, *, thread_id: int | None = None) -> None:
        """Show "typing" in the background (the turn does not wait for the call); not paced,
        dropped while the chat is paused or on any error."""
        lane = self._lane(chat_id)
        if self._clock() < lane.paused_until or self._closed:
            return

        async def send() -> None:
            try:
                async with self._in_flight:
                    await self._bot.send_chat_action(chat_id, "typing", message_thread_id=thread_id)
            except RetryAfter as err:
                lane.paused_until = max(lane.paused_until, self._clock() + retry_after_s(err))
            except TelegramError as err:
                log.info(
                    "telegram.outbox.typing_failed chat=%s error=%s", chat_id, type(err).__name__
                )

        task = asyncio.get_running_loop().create_task(send())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def forget(self, chat_id: int, message_id: int) -> None:
        """Drop what the outbox remembers of a message (so the next edit is always sent)."""
        self._lane(chat_id).known.pop(message_id, None)

    async def flush(self) -> None:
        """Wait until every queued operation has run."""
        while True:
            workers = [
                lane.worker
                for lane in self._lanes.values()
                if lane.worker is not None and not lane.worker.done()
            ]
            if not workers and not self._tasks:
                return
            await asyncio.gather(*workers, *self._tasks, return_exceptions=True)

    async def aclose(self) -> None:
        """Stop the workers; queued and in-flight operations fail with ``RuntimeError``
        (edits resolve ``failed``), so no caller waits forever."""
        self._closed = True
        for lane in self._lanes.values():
            inflight = lane.current
            if lane.worker is not None:
                lane.worker.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await lane.worker
            for op in [*lane.queue, *([inflight] if inflight else [])]:
                self._fail(op, RuntimeError("outbox closed"))
            lane.queue.clear()
            lane.pending_edits.clear()

    # ---- queueing --------------------------------------------------------------------

    def _lane(self, chat_id: int) -> _Lane:
        lane = self._lanes.get(chat_id)
        if lane is None:
            lane = _Lane(chat_id=chat_id, tokens=float(self._burst), tokens_at=self._clock())
            self._lanes[chat_id] = lane
        return lane

    def _submit(self, chat_id: int, op: _Op) -> asyncio.Future[Any]:
        if self._closed:
            raise RuntimeError("outbox closed")
        op.future = asyncio.get_running_loop().create_future()
        lane = self._lane(chat_id)
        lane.queue.append(op)
        self._wake(lane)
        return op.future

    def _queue_edit(
        self, chat_id: int, message_id: int, html: str | None, markup: InlineKeyboardMarkup | None
    ) -> asyncio.Future[EditResult]:
        if self._closed:
            raise RuntimeError("outbox closed")
        lane = self._lane(chat_id)
        waiter: asyncio.Future[EditResult] = asyncio.get_running_loop().create_future()
        op = lane.pending_edits.get(message_id)
        if op is not None:
            # Coalesce: the waiting edit takes the latest state.
            if html is not None or op.html is None:
                op.html = html
            op.markup = markup
            op.waiters.append(waiter)
            return waiter
        op = _Op(kind="edit", message_id=message_id, html=html, markup=markup, waiters=[waiter])
        lane.pending_edits[message_id] = op
        lane.queue.append(op)
        self._wake(lane)
        return waiter

    def _wake(self, lane: _Lane) -> None:
        if lane.worker is None or lane.worker.done():
            lane.worker = asyncio.get_running_loop().create_task(self._work(lane))

    # ---- pacing ----------------------------------------------------------------------

    def _wait_s(self, lane: _Lane, now: float) -> float:
        """How long this chat must wait before its next call (0: go now)."""
        wait = max(0.0, lane.paused_until - now)
        rate = 1.0 / self._interval_s if self._interval_s > 0 else float("inf")
        lane.tokens = min(float(self._burst), lane.tokens + (now - lane.tokens_at) * rate)
        lane.tokens_at = now
        if lane.tokens < 1.0:
            wait = max(wait, (1.0 - lane.tokens) / rate)
        if lane.chat_id < 0:
            while lane.recent and lane.recent[0] <= now - _GROUP_WINDOW_S:
                lane.recent.popleft()
            if len(lane.recent) >= self._group_per_minute:
                wait = max(wait, lane.recent[0] + _GROUP_WINDOW_S - now)
        return wait

    def _spend(self, lane: _Lane, now: float) -> None:
        lane.tokens -= 1.0
        if lane.chat_id < 0:
            lane.recent.append(now)

    # ---- the worker ------------------------------------------------------------------

    async def _work(self, lane: _Lane) -> None:
        while lane.queue:
            op = lane.queue[0]
            if op.kind == "edit" and self._edit_is_noop(lane, op):
                lane.queue.popleft()
                lane.pending_edits.pop(op.message_id, None)
                self._resolve_edit(op, EditResult("unchanged"))
                continue
            now = self._clock()
            wait = self._wait_s(lane, now)
            if wait > 0:
                await self._sleep(wait)
                continue
            lane.queue.popleft()
            if op.kind == "edit":
                lane.pending_edits.pop(op.message_id, None)  # in flight: no more coalescing
            self._spend(lane, now)
            op.attempts += 1
            lane.current = op
            try:
                async with self._in_flight:
                    await self._execute(lane, op)
            except RetryAfter as err:
                pause = retry_after_s(err)
                lane.paused_until = max(lane.paused_until, self._clock() + pause)
                log.warning(
                    "telegram.outbox.retry_after chat=%s kind=%s retry_after_s=%s attempt=%s",
                    lane.chat_id,
                    op.kind,
                    pause,
                    op.attempts,
                )
                self._retry_or_fail(lane, op, err)
            except NetworkError as err:
                # A timeout may hide a delivered send, so only edits (idempotent) retry.
                log.warning(
                    "telegram.outbox.network_error chat=%s kind=%s error=%s",
                    lane.chat_id,
                    op.kind,
                    type(err).__name__,
                )
                if op.kind == "edit":
                    lane.paused_until = max(lane.paused_until, self._clock() + self._interval_s)
                    self._retry_or_fail(lane, op, err)
                else:
                    self._fail(op, err)
            except Exception as err:  # worker boundary: the caller gets it, the lane goes on
                self._fail(op, err)
            finally:
                lane.current = None
                if lane.chat_id < 0 and lane.recent:
                    # Telegram counts a message when it arrives, which may be well after we
                    # sent it: the window counts this call from its answer, the latest moment
                    # it can have arrived, so the 21st never lands inside the 1st's minute.
                    lane.recent[-1] = max(lane.recent[-1], self._clock())

    def _retry_or_fail(self, lane: _Lane, op: _Op, err: Exception) -> None:
        if op.attempts >= self._max_attempts:
            self._fail(op, err)
            return
        if op.kind == "edit":
            newer = lane.pending_edits.get(op.message_id)
            if newer is not None:
                # A newer state is already queued: it supersedes this one.
                newer.waiters.extend(op.waiters)
                newer.attempts = max(newer.attempts, op.attempts)
                return
            lane.pending_edits[op.message_id] = op
        lane.queue.appendleft(op)

    def _fail(self, op: _Op, err: Exception) -> None:
        if op.kind == "edit":
            self._resolve_edit(op, EditResult("failed", f"{type(err).__name__}: {err}"))
        elif op.future is not None and not op.future.done():
            op.future.set_exception(err)

    def _resolve_edit(self, op: _Op, result: EditResult) -> None:
        for waiter in op.waiters:
            if not waiter.done():
                waiter.set_result(result)

    def _edit_is_noop(self, lane: _Lane, op: _Op) -> bool:
        known = lane.known.get(op.message_id)
        if known is None:
            return False
        html = known[0] if op.html is None else op.html
        return (html, _markup_key(op.markup)) == known

    async def _execute(self, lane: _Lane, op: _Op) -> None:
        if op.kind != "edit":
            assert op.run is not None and op.future is not None
            result = await op.run()
            if not op.future.done():
                op.future.set_result(result)
            return
        known = lane.known.get(op.message_id)
        key = _markup_key(op.markup)
        try:
            if op.html is None or (known is not None and known[0] == op.html):
                await self._bot.edit_message_reply_markup(
                    lane.chat_id, op.message_id, reply_markup=op.markup
                )
            else:
                await self._bot.edit_message_text(
                    op.html,
                    chat_id=lane.chat_id,
                    message_id=op.message_id,
                    parse_mode=ParseMode.HTML,
                    reply_markup=op.markup,
                    link_preview_options=_NO_PREVIEW,
                )
        except BadRequest as err:
            text = err.message.lower()
            if "message is not modified" in text:
                lane.known[op.message_id] = (op.html or (known[0] if known else None), key)
                self._resolve_edit(op, EditResult("not_modified"))
            elif "message to edit not found" in text:
                lane.known.pop(op.message_id, None)
                self._resolve_edit(op, EditResult("not_found", err.message))
                if self._on_edit_lost is not None:
                    # A task, not an await: the callback will want this same lane to repost.
                    task: asyncio.Task[None] = asyncio.get_running_loop().create_task(
                        self._on_edit_lost(lane.chat_id, op.message_id)
                    )
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
            else:
                log.warning(
                    "telegram.outbox.edit_refused chat=%s error=%s", lane.chat_id, err.message
                )
                self._resolve_edit(op, EditResult("failed", err.message))
            return
        new_html = op.html if op.html is not None else (known[0] if known else None)
        lane.known[op.message_id] = (new_html, key)
        self._resolve_edit(op, EditResult("edited"))
