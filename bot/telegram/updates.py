"""Concurrent updates across chats, in order within a session; the processed-update watermark.

PTB's Application runs one update at a time unless told otherwise, so a slow ``/stop`` in one
chat (it waits for the turn to cancel and the bash process group to die) stalls every chat.
Plain ``concurrent_updates(N)`` would break the order within a chat (a message, then the
button press after it). :class:`ChatLaneProcessor` runs each update in a *lane*:

    session lane  (chat id, topic thread id or 0)  a message or a button press (bot.telegram.keys)
    chat lane     (chat id, None)                   a chat-wide update (``my_chat_member``, a
                                                    press on an inaccessible message): waits for
                                                    every earlier update of the chat, and every
                                                    later one of the chat waits for it
    global lane   None                              no chat, or not an ``Update`` at all

Updates of one lane run strictly in arrival order; different lanes run concurrently, at most
``max_running`` at once. An update waiting for its lane holds no running slot, so a busy chat
never starves the others.

:class:`UpdateLedger` answers "was this update processed before?" under that concurrency: the
watermark only moves to the highest update id below which every update that arrived has been
taken up by its handlers, so an older update of chat A still waiting for its lane is never
judged a repeat because a newer one of chat B went first.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from telegram import Update
from telegram.ext import BaseUpdateProcessor

from bot.telegram.keys import update_key

# (chat, thread) for a session lane, (chat, None) for a chat lane, None for the global lane.
Lane = tuple[int, int | None] | None

DEFAULT_MAX_RUNNING = 64
DEFAULT_MAX_HELD = 4096


def lane_of(update: object) -> Lane:
    """The lane an update runs in (see the module docstring)."""
    if not isinstance(update, Update):
        return None
    key = update_key(update)
    if key is not None:
        return key
    chat = update.effective_chat  # also a press on an inaccessible message
    return (chat.id, None) if chat is not None else None


def update_date(update: Update) -> float | None:
    """When Telegram says the update happened (POSIX seconds), or ``None`` when it carries no
    date of its own (a button press carries its message's, which is older)."""
    msg = update.message or update.channel_post
    if msg is not None:
        return msg.date.timestamp()
    edited = update.edited_message or update.edited_channel_post
    if edited is not None:
        return (edited.edit_date or edited.date).timestamp()
    member = update.my_chat_member or update.chat_member or update.chat_join_request
    if member is not None:
        return member.date.timestamp()
    return None


# How many of the latest taken ids are persisted (Telegram re-delivers at most what was not yet
# confirmed: one getUpdates batch of 100, or the webhook's in-flight few).
PERSISTED_RECENT = 1000


class UpdateLedger:
    """Which updates arrived and which were taken up, and the watermark below which all were.

    An update is *taken* when its handlers begin (:meth:`take`, the dedupe handler) or, if
    nothing took it, when the processor is done with it (:meth:`finished`). Taken means
    processed: a crash mid-handler does not re-run it after a restart (at most once).
    ``arrived`` must be called in arrival order (the processor does it before any await);
    ``on_advance`` is called with the new watermark each time it moves (persist it there, with
    :meth:`recent`).

    Only re-deliveries are dropped. An id taken recently (the last ``remember`` here, the last
    ``PERSISTED_RECENT`` across a restart) is a repeat, unless it now carries a newer date than
    it had (a new numbering reached an old id). Another id at or below the *floor* (the
    restored watermark, or ids forgotten) is a repeat unless its date is newer than the newest
    update handled: Telegram restarts its numbering after a week without updates, and such an
    update is new. It *rebases* the ledger (floor and watermark just below it), so the new
    numbering's next ids are judged as usual. A button press carries no date of its own: below
    the floor it counts as a repeat until a message has rebased the ledger.
    """

    def __init__(
        self, *, on_advance: Callable[[int], None] | None = None, remember: int = 10_000
    ) -> None:
        self.watermark: int | None = None
        self.on_advance = on_advance
        self._remember = remember
        self._floor: int | None = None  # ids <= floor not in _done: judged by their date
        self._waiting: dict[int, int] = {}  # id(update object) -> update_id, not yet taken
        # Taken ids, exactly (the latest ``remember``), with their dates.
        self._done: dict[int, float | None] = {}
        self._ahead: set[int] = set()  # taken ids above the watermark
        self.last_date: float | None = None  # the newest date of an update taken

    def restore(self, stored: int) -> None:
        """Take a watermark persisted by an earlier process: every id up to it is old."""
        if self.watermark is None or stored > self.watermark:
            self.watermark = stored
            self._ahead = {d for d in self._ahead if d > stored}
        if self._floor is None or stored > self._floor:
            self._floor = stored

    def restore_recent(self, ids: Mapping[int, float | None], last_date: float | None) -> None:
        """Take the ids (with dates) and the newest date :meth:`recent` persisted."""
        self._done.update(ids)
        if last_date is not None and (self.last_date is None or last_date > self.last_date):
            self.last_date = last_date

    def recent(self) -> tuple[dict[int, float | None], float | None]:
        """The latest taken ids (at most ``PERSISTED_RECENT``, with their dates) and the
        newest date, to persist."""
        latest = sorted(self._done)[-PERSISTED_RECENT:]
        return {i: self._done[i] for i in latest}, self.last_date

    def arrived(self, update: Update) -> None:
        """An update entered the processor (its handlers have not begun)."""
        self._waiting[id(update)] = update.update_id

    def take(self, update: Update) -> bool:
        """The update's handlers begin: False if it is a repeat (drop it), else it counts.

        Either way the update no longer holds the watermark back.
        """
        self._waiting.pop(id(update), None)
        uid, date = update.update_id, update_date(update)
        fresh = not self.is_repeat(uid, date)
        if fresh:
            if (self._floor is not None and uid <= self._floor) or self._jumped(uid, date):
                self._rebase(uid)
            self._done[uid] = date
            if self.watermark is None or uid > self.watermark:
                self._ahead.add(uid)
            if date is not None and (self.last_date is None or date > self.last_date):
                self.last_date = date
        self._advance()
        return fresh

    def finished(self, update: Update) -> None:
        """The processor is done with the update; taken now if nothing took it."""
        if id(update) in self._waiting:
            self.take(update)

    def is_repeat(self, update_id: int, date: float | None = None) -> bool:
        """True when this update was taken before (in this process or an earlier one).

        An id at or below the floor that is not known exactly counts as new only with a
        ``date`` newer than every update taken (see the class docstring).
        """
        if update_id in self._done:
            # The same id with a newer date is the new numbering reaching an old id.
            seen = self._done[update_id]
            return date is None or seen is None or date <= seen
        if self._floor is None or update_id > self._floor:
            return False
        return date is None or self.last_date is None or date <= self.last_date

    def _jumped(self, update_id: int, date: float | None) -> bool:
        """A new numbering in a process that restored no watermark (so has no floor): an id
        below the watermark dated after every update taken. A late arrival (a webhook out of
        order) is below it too, but never newer than what came after it. Without this the
        watermark would stay above the new ids, never move, and none would be persisted."""
        return (
            self._floor is None
            and self.watermark is not None
            and update_id <= self.watermark
            and date is not None
            and self.last_date is not None
            and date > self.last_date
        )

    def _rebase(self, update_id: int) -> None:
        """Telegram numbers anew from ``update_id``: the old numbering's ids above it stay
        known (with their dates, a re-delivery of one is still dropped)."""
        self._floor = update_id - 1
        self.watermark = update_id - 1
        self._ahead = set()

    @property
    def in_flight(self) -> int:
        """How many updates arrived and have not been taken."""
        return len(self._waiting)

    def _advance(self) -> None:
        # The watermark may pass only taken ids with nothing still waiting below them.
        lowest = min(self._waiting.values()) if self._waiting else None
        below = [d for d in self._ahead if lowest is None or d < lowest]
        if below:
            self.watermark = max(below)
            self._ahead.difference_update(below)
            if self.on_advance is not None:
                self.on_advance(self.watermark)
        if len(self._done) > self._remember:
            self._forget()

    def _forget(self) -> None:
        """Keep the last ``remember`` ids; the floor rises, never past a waiting update."""
        limit = self.watermark
        if limit is None:
            return
        if self._waiting:
            limit = min(limit, min(self._waiting.values()) - 1)
        old = sorted(d for d in self._done if d <= limit)[: len(self._done) - self._remember]
        if old:
            self._floor = old[-1] if self._floor is None else max(self._floor, old[-1])
            for d in old:
                del self._done[d]


class ChatLaneProcessor(BaseUpdateProcessor):
    """Run updates of different lanes concurrently and each lane's updates in arrival order.

    ``max_running`` bounds the updates whose handlers run at once; ``max_held`` (PTB's
    ``max_concurrent_updates``) bounds every update held, running or waiting for its lane.
    Hand it to ``ApplicationBuilder.concurrent_updates``.
    """

    def __init__(
        self,
        *,
        max_running: int = DEFAULT_MAX_RUNNING,
        max_held: int = DEFAULT_MAX_HELD,
        ledger: UpdateLedger | None = None,
    ) -> None:
        if max_running < 1:
            raise ValueError("max_running must be a positive integer")
        # PTB acquires its semaphore before do_process_update, so a waiting update holds a
        # slot there: it must be larger than the running bound, or one busy chat's queue
        # would fill it and stall every other chat.
        super().__init__(max(max_held, max_running + 1))
        self.max_running = max_running
        self.ledger = ledger
        self._running = asyncio.Semaphore(max_running)
        self._sessions: dict[int, dict[int, asyncio.Event]] = {}
        self._barriers: dict[int, asyncio.Event] = {}
        self._global: asyncio.Event | None = None
        self._held = 0
        self._idle = asyncio.Event()
        self._idle.set()

    async def initialize(self) -> None:
        """Nothing to allocate."""

    async def shutdown(self) -> None:
        """Nothing to free (PTB has awaited every update before it calls this)."""

    async def idle(self) -> None:
        """Wait until no update is held (the caller bounds the wait)."""
        await self._idle.wait()

    async def do_process_update(self, update: object, coroutine: Awaitable[Any]) -> None:
        """Wait for the lane's earlier updates, then run this one under the running bound."""
        # Everything up to the first await runs in arrival order (PTB starts one task per
        # update, in order, and its semaphore does not suspend while it has room).
        lane = lane_of(update)
        done = asyncio.Event()
        waits = self._enter(lane, done)
        tracked = update if self.ledger is not None and isinstance(update, Update) else None
        if tracked is not None and self.ledger is not None:
            self.ledger.arrived(tracked)
        self._held += 1
        self._idle.clear()
        started = False
        try:
            for earlier in waits:
                await earlier.wait()
            async with self._running:
                started = True
                await coroutine
        finally:
            if not started and inspect.iscoroutine(coroutine):
                coroutine.close()  # cancelled while waiting: never ran
            done.set()
            self._leave(lane, done)
            if tracked is not None and self.ledger is not None:
                self.ledger.finished(tracked)
            self._held -= 1
            if self._held == 0:
                self._idle.set()

    def _enter(self, lane: Lane, done: asyncio.Event) -> list[asyncio.Event]:
        """Register ``done`` as the lane's tail; return what this update must wait for."""
        if lane is None:
            waits = [self._global] if self._global is not None else []
            self._global = done
            return waits
        chat, thread = lane
        barrier = self._barriers.get(chat)
        if thread is None:
            # Chat-wide: after every earlier update of the chat; later ones wait for it (and
            # so, through it, for everything before it).
            waits = list(self._sessions.pop(chat, {}).values())
            self._barriers[chat] = done
        else:
            tails = self._sessions.setdefault(chat, {})
            tail = tails.get(thread)
            waits = [tail] if tail is not None else []
            tails[thread] = done
        if barrier is not None:
            waits.append(barrier)
        return waits

    def _leave(self, lane: Lane, done: asyncio.Event) -> None:
        """Forget ``done`` if it is still a tail (no later update of the lane arrived)."""
        if lane is None:
            if self._global is done:
                self._global = None
            return
        chat, thread = lane
        if thread is None:
            if self._barriers.get(chat) is done:
                del self._barriers[chat]
            return
        tails = self._sessions.get(chat)
        if tails is not None and tails.get(thread) is done:
            del tails[thread]
            if not tails:
                del self._sessions[chat]


__all__ = [
    "DEFAULT_MAX_HELD",
    "DEFAULT_MAX_RUNNING",
    "PERSISTED_RECENT",
    "ChatLaneProcessor",
    "Lane",
    "UpdateLedger",
    "lane_of",
    "update_date",
]
