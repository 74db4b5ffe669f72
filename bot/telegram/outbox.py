"""The outbox: the one owner of every send and edit to Telegram.

Per chat, operations run on one worker, paced: about one call a second with a short burst
tolerated (a token bucket), and in a group at most 20 calls in any rolling minute (each
counted from its answer, the latest it can have reached Telegram).

Priority, per chat, highest first::

    interactive  sends (replies, notices, cards posted), documents, pins, other
                 calls, and edits marked ``interactive=True`` (the visible effect of a
                 press or a command): strictly in the order queued
    progress     every other edit (card progress), coalesced per message: while an edit
                 waits, a newer one replaces its content, so only the latest state is sent
    low          ``send_text(priority="low")`` (refusals to non-owners): at most
                 ``LOW_QUEUE_MAX`` waiting per chat, dropped when older than
                 ``LOW_MAX_AGE_S``, on any 429, or when the group's minute is half spent

Progress edits are never starved: after ``PROGRESS_EVERY`` interactive calls in a row while
one waits, the oldest waiting progress edit goes next. An interactive edit of a message whose
progress edit waits takes that edit over (latest content, interactive place), so a message's
edits never reorder; an edit exists only once its message's send has returned, so it never
overtakes the send. An edit whose text and keyboard equal what was last delivered makes no
call; "message is not modified" counts as success; "message to edit not found" is reported
back (``EditResult.outcome == "not_found"`` and ``on_edit_lost``) so the caller reposts.

Transient errors are retried for as long as it takes, up to ``deadline_s`` (10 minutes) of
failing: ``RetryAfter`` pauses only that chat for the time Telegram asked; network errors
(timeouts, 5xx such as 502 Bad Gateway) pause it with a backoff of 1, 2, 4 ... 30 s. A send
that timed out may have arrived: it is sent again all the same (a duplicate beats a loss).
When the next try could only come past the deadline the operation fails,
``on_delivery_failed`` is told (the presenter redraws
its cards), and the chat gets one short notice (one until a later call succeeds).

Errors (what callers see)::

    send_*  -> the PTB exception (BadRequest, Forbidden, ...) raised from the awaited call;
               :class:`Dropped` for a low-priority send that was dropped
    edit    -> never raises; EditResult(outcome, error)

Clock and sleep are injected so tests run without real waiting. ``AIORateLimiter`` stays in
the Application as the backstop.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dtm
import functools
import logging
import time
import warnings
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Literal

from telegram import Bot, InlineKeyboardMarkup, InputFile, LinkPreviewOptions, Message
from telegram.constants import ParseMode
from telegram.error import BadRequest, ChatMigrated, NetworkError, RetryAfter, TelegramError

from bot.telegram.render import clip_html
from engine.tasks import BackgroundTasks

log = logging.getLogger("plangate.outbox")

EditOutcome = Literal["edited", "unchanged", "not_modified", "not_found", "failed"]
Priority = Literal["interactive", "progress", "low"]
Sleep = Callable[[float], Awaitable[None]]
EditLost = Callable[[int, int], Coroutine[Any, Any, None]]
# (chat_id, message_id of the edit or None for a send, the error)
DeliveryFailed = Callable[[int, int | None, Exception], Coroutine[Any, Any, None]]
ChatMoved = Callable[[int, int], Coroutine[Any, Any, None]]  # (old chat id, new chat id)

_NO_PREVIEW = LinkPreviewOptions(is_disabled=True)
_GROUP_WINDOW_S = 60.0
DELIVERY_DEADLINE_S = 600.0
BACKOFF_MAX_S = 30.0
PROGRESS_EVERY = 4
LOW_QUEUE_MAX = 2
LOW_MAX_AGE_S = 60.0
CAPTION_LIMIT = 1024  # UTF-16 units of a caption's visible text
FAILED_NOTICE = (
    "⚠️ Telegram kept refusing my messages for {minutes} min; something I sent here was lost. "
    "/status shows where things stand."
)


class Dropped(Exception):
    """A low-priority send the outbox dropped (queue full, too old, or the chat was limited)."""


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


def _consume(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def _markup_key(markup: InlineKeyboardMarkup | None) -> Any:
    if markup is None:
        return None
    return tuple(
        tuple((b.text, b.callback_data, b.url) for b in row) for row in markup.inline_keyboard
    )


@dataclass
class _Op:
    kind: Literal["send", "document", "edit", "pin", "call"]
    run: Callable[[], Awaitable[Any]] | None = None
    # sends and documents: the call for a chat id, so a migrated group's sends can follow it
    run_in: Callable[[int], Awaitable[Any]] | None = None
    future: asyncio.Future[Any] | None = None
    priority: Priority = "interactive"
    queued_at: float = 0.0
    attempts: int = 0
    failing_since: float | None = None  # clock of the first transient failure
    notice: bool = False  # the "could not deliver" notice itself: never noticed again
    # edits only
    message_id: int = 0
    html: str | None = None  # None: keep the text, change only the keyboard
    markup: InlineKeyboardMarkup | None = None
    waiters: list[asyncio.Future[EditResult]] = field(default_factory=list)


@dataclass
class _Lane:
    chat_id: int
    queues: dict[Priority, deque[_Op]] = field(
        default_factory=lambda: {"interactive": deque(), "progress": deque(), "low": deque()}
    )
    pending_edits: dict[int, _Op] = field(default_factory=dict)
    tokens: float = 0.0
    tokens_at: float = 0.0
    recent: deque[float] = field(default_factory=deque)  # calls' answer times, groups only
    paused_until: float = 0.0
    worker: asyncio.Task[None] | None = None
    current: _Op | None = None  # the operation in flight
    passed: int = 0  # interactive calls made while a progress edit waited
    noticed: bool = False  # a "could not deliver" notice went out since the last success
    # Last state delivered per message id: (html, markup key).
    known: dict[int, tuple[str | None, Any]] = field(default_factory=dict)

    def empty(self) -> bool:
        return not any(self.queues.values())

    def all_ops(self) -> list[_Op]:
        return [op for q in self.queues.values() for op in q]


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
        deadline_s: float = DELIVERY_DEADLINE_S,
        on_edit_lost: EditLost | None = None,
        on_delivery_failed: DeliveryFailed | None = None,
        on_chat_migrated: ChatMoved | None = None,
        max_in_flight: int = MAX_IN_FLIGHT,
    ) -> None:
        self._bot = bot
        self._clock = clock
        self._sleep = sleep
        self._interval_s = chat_interval_s
        self._burst = chat_burst
        self._group_per_minute = group_per_minute
        self._deadline_s = deadline_s
        self._on_edit_lost = on_edit_lost
        # Who hears of a delivery that failed past the deadline and of a group that moved:
        # given here, or subscribed by a part built on this outbox (:meth:`listen`).
        self._failure_hooks = [on_delivery_failed] if on_delivery_failed is not None else []
        self._move_hooks = [on_chat_migrated] if on_chat_migrated is not None else []
        self._moved: dict[int, int] = {}  # old group id -> its supergroup's id
        self._lanes: dict[int, _Lane] = {}
        self._closed = False
        # Typing and the owner's callbacks: a task, not an await (a callback will want this
        # same lane to repost).
        self._tasks = BackgroundTasks(log, event="callback_failed")
        # Calls in flight across all chats. Past a few, more only queue in the HTTP pool
        # (PTB's pool_timeout of 1 s then fails a send that never left: a lost reply); the
        # wait here has no timeout.
        self._in_flight = asyncio.Semaphore(max_in_flight)

    def listen(
        self,
        *,
        delivery_failed: DeliveryFailed | None = None,
        chat_migrated: ChatMoved | None = None,
    ) -> None:
        """Subscribe to a delivery that failed past the deadline (the presenter redraws the
        chat's cards) or a group that became a supergroup (the gate carries it over). A part
        built on this outbox subscribes itself when it is built."""
        if delivery_failed is not None:
            self._failure_hooks.append(delivery_failed)
        if chat_migrated is not None:
            self._move_hooks.append(chat_migrated)

    # ---- public verbs ----------------------------------------------------------------

    async def send_text(
        self,
        chat_id: int,
        html: str,
        *,
        thread_id: int | None = None,
        reply_to: int | None = None,
        reply_markup: Any = None,
        priority: Literal["interactive", "low"] = "interactive",
    ) -> Message:
        """Send an HTML message (paced, in order); returns the sent Message or raises.

        ``priority="low"``: droppable (refusals); raises :class:`Dropped` when dropped.
        """

        async def run_in(chat: int) -> Message:
            return await self._bot.send_message(
                chat,
                html,
                parse_mode=ParseMode.HTML,
                message_thread_id=thread_id,
                reply_to_message_id=reply_to,
                allow_sending_without_reply=True if reply_to is not None else None,
                reply_markup=reply_markup,
                link_preview_options=_NO_PREVIEW,
            )

        op = _Op(kind="send", run_in=run_in, priority=priority)
        msg: Message = await self._submit(chat_id, op)
        lane = self._lane(msg.chat_id)  # a migrated group's message is in the new chat
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
        """Send bytes as a document (e.g. a long plan as ``plan.md``); raises on failure.

        The caption is clipped to Telegram's 1,024 visible UTF-16 units.
        """
        caption = clip_html(caption_html, CAPTION_LIMIT) if caption_html else None

        async def run_in(chat: int) -> Message:
            return await self._bot.send_document(
                chat,
                InputFile(data, filename=filename),
                caption=caption,
                parse_mode=ParseMode.HTML if caption else None,
                message_thread_id=thread_id,
                reply_to_message_id=reply_to,
                allow_sending_without_reply=True if reply_to is not None else None,
            )

        result: Message = await self._submit(chat_id, _Op(kind="document", run_in=run_in))
        return result

    def edit(
        self,
        chat_id: int,
        message_id: int,
        html: str,
        *,
        reply_markup: InlineKeyboardMarkup | None,
        interactive: bool = False,
    ) -> asyncio.Future[EditResult]:
        """Queue an edit to this text and keyboard (``None`` removes the keyboard).

        Coalesced: a waiting edit of the same message takes the newer content and every
        caller's future gets the result of the edit that was actually delivered. Await the
        future to learn the outcome (``not_found``: repost the card); it never raises.
        ``interactive``: the edit answers a press or a command and goes ahead of progress.
        """
        return self._queue_edit(chat_id, message_id, html, reply_markup, interactive)

    def edit_keyboard(
        self,
        chat_id: int,
        message_id: int,
        reply_markup: InlineKeyboardMarkup | None,
        *,
        interactive: bool = False,
    ) -> asyncio.Future[EditResult]:
        """Queue a keyboard-only edit (``None`` strips it), coalesced like ``edit``."""
        return self._queue_edit(chat_id, message_id, None, reply_markup, interactive)

    async def pin(self, chat_id: int, message_id: int) -> bool:
        """Pin a message quietly; False where the bot may not pin (no error raised)."""

        async def run() -> bool:
            return bool(
                await self._bot.pin_chat_message(chat_id, message_id, disable_notification=True)
            )

        try:
            ok: bool = await self._submit(chat_id, _Op(kind="pin", run=run))
        except BadRequest as err:
            log.info("plangate.outbox.pin_refused chat=%s error=%s", chat_id, err.message)
            return False
        return ok

    async def call(self, chat_id: int, run: Callable[[], Awaitable[Any]]) -> Any:
        """Run any other Bot call for this chat under the same pacing and retry rules."""
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
                    "plangate.outbox.typing_failed chat=%s error=%s", chat_id, type(err).__name__
                )

        self._tasks.spawn(send(), name=f"typing:{chat_id}")

    def waiting(self, chat_id: int) -> dict[Priority, int]:
        """How many operations wait in this chat, per priority (diagnostics, tests)."""
        lane = self._lanes.get(chat_id)
        if lane is None:
            return {"interactive": 0, "progress": 0, "low": 0}
        return {p: len(q) for p, q in lane.queues.items()}

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
            await asyncio.gather(*workers, return_exceptions=True)
            await self._tasks.drain()

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
            for op in [*lane.all_ops(), *([inflight] if inflight else [])]:
                self._fail(op, RuntimeError("outbox closed"))
            for q in lane.queues.values():
                q.clear()
            lane.pending_edits.clear()
        self._tasks.cancel()

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
        op.queued_at = self._clock()
        if op.run_in is not None:
            chat_id = self._moved.get(chat_id, chat_id)
            op.run = functools.partial(op.run_in, chat_id)
        lane = self._lane(chat_id)
        queue = lane.queues[op.priority]
        if op.priority == "low" and len(queue) >= LOW_QUEUE_MAX:
            op.future.set_exception(Dropped("low-priority queue full"))
            return op.future
        queue.append(op)
        self._wake(lane)
        return op.future

    def _queue_edit(
        self,
        chat_id: int,
        message_id: int,
        html: str | None,
        markup: InlineKeyboardMarkup | None,
        interactive: bool,
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
            if interactive and op.priority == "progress":
                # Promoted: it now answers a press, so it goes in the interactive order.
                lane.queues["progress"].remove(op)
                op.priority = "interactive"
                lane.queues["interactive"].append(op)
            return waiter
        op = _Op(
            kind="edit",
            priority="interactive" if interactive else "progress",
            queued_at=self._clock(),
            message_id=message_id,
            html=html,
            markup=markup,
            waiters=[waiter],
        )
        lane.pending_edits[message_id] = op
        lane.queues[op.priority].append(op)
        self._wake(lane)
        return waiter

    def _wake(self, lane: _Lane) -> None:
        if lane.worker is None or lane.worker.done():
            lane.worker = asyncio.get_running_loop().create_task(self._work(lane))

    def _next(self, lane: _Lane) -> deque[_Op]:
        """The queue whose head goes next (see "Priority" in the module docstring)."""
        urgent, progress, low = (lane.queues[p] for p in ("interactive", "progress", "low"))
        if progress and (not urgent or lane.passed >= PROGRESS_EVERY):
            return progress
        if urgent:
            return urgent
        return low  # progress is empty here: a non-empty one went first above

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
            self._trim_window(lane, now)
            if len(lane.recent) >= self._group_per_minute:
                wait = max(wait, lane.recent[0] + _GROUP_WINDOW_S - now)
        return wait

    def _trim_window(self, lane: _Lane, now: float) -> None:
        while lane.recent and lane.recent[0] <= now - _GROUP_WINDOW_S:
            lane.recent.popleft()

    def _spend(self, lane: _Lane, now: float) -> None:
        lane.tokens -= 1.0
        if lane.chat_id < 0:
            lane.recent.append(now)

    def _drop_low(self, lane: _Lane, op: _Op, now: float) -> bool:
        """Whether a low-priority op at the head is dropped rather than sent."""
        if now - op.queued_at > LOW_MAX_AGE_S:
            return True
        if lane.chat_id < 0:
            # A refusal never spends the half of a group's minute that replies need.
            self._trim_window(lane, now)
            return len(lane.recent) >= self._group_per_minute // 2
        return False

    # ---- the worker ------------------------------------------------------------------

    async def _work(self, lane: _Lane) -> None:
        while not lane.empty():
            queue = self._next(lane)
            op = queue[0]
            if op.kind == "edit" and self._edit_is_noop(lane, op):
                queue.popleft()
                lane.pending_edits.pop(op.message_id, None)
                self._resolve_edit(op, EditResult("unchanged"))
                continue
            now = self._clock()
            if op.priority == "low" and self._drop_low(lane, op, now):
                queue.popleft()
                self._fail(op, Dropped("dropped to keep the chat's budget for replies"))
                continue
            wait = self._wait_s(lane, now)
            if wait > 0:
                await self._sleep(wait)
                continue
            queue.popleft()
            if op.kind == "edit":
                lane.pending_edits.pop(op.message_id, None)  # in flight: no more coalescing
            if op.priority == "progress":
                lane.passed = 0
            elif lane.queues["progress"]:
                lane.passed += 1
            self._spend(lane, now)
            op.attempts += 1
            lane.current = op
            try:
                async with self._in_flight:
                    await self._execute(lane, op)
                lane.noticed = False
            except RetryAfter as err:
                pause = retry_after_s(err)
                lane.paused_until = max(lane.paused_until, self._clock() + pause)
                log.warning(
                    "plangate.outbox.retry_after chat=%s kind=%s retry_after_s=%s attempt=%s",
                    lane.chat_id,
                    op.kind,
                    pause,
                    op.attempts,
                )
                self._retry_or_fail(lane, op, err)
            except ChatMigrated as err:
                self._follow_migration(lane, op, err)
            except BadRequest as err:  # a NetworkError subclass, but permanent
                self._fail(op, err)
            except NetworkError as err:
                # Timeouts and 5xx: back off and try again (a timed-out send may have
                # arrived; sending it twice is better than losing it).
                backoff = min(BACKOFF_MAX_S, 2.0 ** min(op.attempts - 1, 8))
                log.warning(
                    "plangate.outbox.network_error chat=%s kind=%s error=%s backoff_s=%s",
                    lane.chat_id,
                    op.kind,
                    type(err).__name__,
                    backoff,
                )
                lane.paused_until = max(lane.paused_until, self._clock() + backoff)
                self._retry_or_fail(lane, op, err)
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
        now = self._clock()
        if op.failing_since is None:
            op.failing_since = now
        if op.priority == "low":
            self._fail(op, Dropped(f"dropped after {type(err).__name__}"))
            return
        # Give up once the next try could only come past the deadline.
        if max(now, lane.paused_until) - op.failing_since >= self._deadline_s:
            log.warning(
                "plangate.outbox.gave_up chat=%s kind=%s attempts=%s error=%s",
                lane.chat_id,
                op.kind,
                op.attempts,
                type(err).__name__,
            )
            self._fail(op, err)
            self._delivery_failed(lane, op, err)
            return
        if op.kind == "edit":
            newer = lane.pending_edits.get(op.message_id)
            if newer is not None:
                # A newer state is already queued: it supersedes this one.
                newer.waiters.extend(op.waiters)
                newer.attempts = max(newer.attempts, op.attempts)
                newer.failing_since = op.failing_since
                return
            lane.pending_edits[op.message_id] = op
        lane.queues[op.priority].appendleft(op)

    def _follow_migration(self, lane: _Lane, op: _Op, err: ChatMigrated) -> None:
        """The group became a supergroup: its sends go there, in order; its edits cannot."""
        new_id = int(err.new_chat_id)
        log.info("plangate.outbox.chat_migrated from=%s to=%s", lane.chat_id, new_id)
        first_time = lane.chat_id not in self._moved
        self._moved[lane.chat_id] = new_id
        target = self._lane(new_id)
        if op.run_in is None:
            self._fail(op, err)  # a pin or another call names a message of the old group
        waiting = [o for o in lane.queues["interactive"] if o.run_in is not None]
        for o in [op, *waiting] if op.run_in is not None else waiting:
            with contextlib.suppress(ValueError):
                lane.queues["interactive"].remove(o)
            assert o.run_in is not None
            o.run = functools.partial(o.run_in, new_id)
            target.queues[o.priority].append(o)
        self._wake(target)
        if first_time:
            for hook in self._move_hooks:
                moved = hook(lane.chat_id, new_id)
                self._tasks.spawn(moved, name=f"chat_migrated:{lane.chat_id}")

    def _delivery_failed(self, lane: _Lane, op: _Op, err: Exception) -> None:
        if op.notice:
            return
        if not lane.noticed and not self._closed:
            lane.noticed = True
            text = FAILED_NOTICE.format(minutes=max(1, round(self._deadline_s / 60)))
            chat_id = lane.chat_id

            async def run() -> Message:
                return await self._bot.send_message(chat_id, text, link_preview_options=_NO_PREVIEW)

            notice = _Op(kind="send", notice=True, run=run)
            notice.future = asyncio.get_running_loop().create_future()
            notice.future.add_done_callback(_consume)  # nobody awaits it
            notice.queued_at = self._clock()
            lane.queues["interactive"].append(notice)
        for hook in self._failure_hooks:
            failed = hook(lane.chat_id, op.message_id if op.kind == "edit" else None, err)
            self._tasks.spawn(failed, name=f"delivery_failed:{lane.chat_id}")

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
                    lost = self._on_edit_lost(lane.chat_id, op.message_id)
                    self._tasks.spawn(lost, name=f"edit_lost:{lane.chat_id}")
            else:
                log.warning(
                    "plangate.outbox.edit_refused chat=%s error=%s", lane.chat_id, err.message
                )
                self._resolve_edit(op, EditResult("failed", err.message))
            return
        new_html = op.html if op.html is not None else (known[0] if known else None)
        lane.known[op.message_id] = (new_html, key)
        self._resolve_edit(op, EditResult("edited"))
