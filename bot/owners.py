"""One owner per chat across replicas: the loop that takes chats' leases and processes their
stored updates (docs/webhook.md, "Several replicas").

Every replica runs one :class:`ChatOwners` loop beside its webhook. Each round it

1. renews the leases it holds once a third of their lifetime has passed; a lease it could not
   renew (another replica took the chat, or this one paused too long), or did not renew within
   its lifetime (the database away), is *lost*: that chat's
   processing stops and ``on_lost`` runs (the engine kills its sandbox processes and disarms
   its goal);
2. tries to take the lease of every chat with pending updates, and of every chat whose
   holder let its lease lapse without releasing it (a replica that died); a chat taken runs
   ``on_taken`` (the engine's takeover recovery) before any of its updates;
3. processes each held chat's pending updates in order, one at a time per chat, chats side by
   side. Each runs inside :func:`storage.postgres.inbox.processing`, so its first append marks
   it done in the same transaction; one that appended nothing is marked after its handlers.

A notification (``LISTEN``) wakes the loop early; without one it polls every ``poll_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Protocol, runtime_checkable

from engine.keys import ChatKey
from engine.ports import ChatLeases, Lease
from storage.postgres.inbox import InboxUpdate, PgUpdateInbox, UpdateClaim, processing

_log = logging.getLogger("plangate.owners")

# Done updates are kept this long for deduplication, then pruned (Telegram re-delivers for at
# most a day).
KEEP_DONE_S = 26 * 3600.0
PRUNE_EVERY_S = 3600.0


@runtime_checkable
class Counted(Protocol):
    """How many replicas hold live leases (``storage.postgres.leases``)."""

    async def replicas(self) -> int: ...


@runtime_checkable
class Lapsed(Protocol):
    """Leases whose holder let them lapse without releasing them (``storage.postgres.leases``)."""

    async def lapsed(self) -> list[ChatKey]: ...


Process = Callable[[InboxUpdate], Awaitable[None]]
ChatHook = Callable[[ChatKey], Awaitable[None]]


class ChatOwners:
    """This replica's side of chat ownership: leases taken and kept, updates processed."""

    def __init__(
        self,
        inbox: PgUpdateInbox,
        leases: ChatLeases,
        *,
        replica: str,
        ttl_s: float,
        process: Process,
        on_taken: ChatHook,
        on_lost: ChatHook,
        poll_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        source: str | None = None,
        owns: Callable[[ChatKey], bool] | None = None,
        on_share: Callable[[int], None] | None = None,
    ) -> None:
        """``source``: process only the updates of this front end (``telegram``, ``slack``),
        and ``owns``: take only the chats whose keys are its own; a replica serving two front
        ends runs one loop for each. ``on_share``: told each round how many replicas hold
        chats (Telegram's overall limit is theirs to share: bot.telegram.shared_rate)."""
        self.inbox = inbox
        self.leases = leases
        self.replica = replica
        self.ttl_s = ttl_s
        self.renew_s = ttl_s / 3
        self.poll_s = poll_s if poll_s is not None else min(1.0, ttl_s / 6)
        self._process = process
        self._on_taken = on_taken
        self._on_lost = on_lost
        self._clock = clock
        self.source = source
        self._owns = owns
        self._on_share = on_share
        self.held: dict[ChatKey, Lease] = {}
        self._renewed: dict[ChatKey, float] = {}
        self._workers: dict[ChatKey, asyncio.Task[None]] = {}
        self._taking: set[ChatKey] = set()  # taken; the takeover recovery has not run yet
        self._renewing: set[ChatKey] = set()  # a renewal in flight
        self._wake = asyncio.Event()
        self._pruned_at: float | None = None

    def wake(self, chat: ChatKey | None = None) -> None:
        """Run the next round now (a notification heard, or a test)."""
        self._wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Rounds until ``stop``, then wait for the updates being processed. The leases stay
        held (and renewed by :meth:`keep`) until :meth:`close`: the engine's shutdown still
        writes for its chats."""
        # Renewals run on their own too: a round busy taking chats or waiting for the
        # database never delays them past a lease's lifetime.
        keeping = asyncio.ensure_future(self.keep())
        try:
            async with self.inbox.listening(self.wake):
                while not stop.is_set():
                    try:
                        await self.round()
                    except Exception as exc:  # the database away for a moment: next round
                        _log.warning("plangate.owners.round_failed %s: %s", type(exc).__name__, exc)
                    self._wake.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wait(stop), self.poll_s)
            await self.idle()
        finally:
            keeping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeping

    async def keep(self) -> None:
        """Only renew the leases held, until cancelled (beside the rounds, and while the
        engine shuts down)."""
        while True:
            try:
                await self._renew()
            except Exception as exc:
                _log.warning("plangate.owners.renew_failed %s: %s", type(exc).__name__, exc)
            await asyncio.sleep(min(self.poll_s, self.renew_s / 2))

    async def _wait(self, stop: asyncio.Event) -> None:
        waits = [asyncio.ensure_future(self._wake.wait()), asyncio.ensure_future(stop.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()

    async def round(self) -> None:
        """Renew, take, process (see the module docstring)."""
        await self._renew()
        wanted = await self.inbox.pending_chats(self.source)
        if isinstance(self.leases, Lapsed):
            # Its own too: a replica restarted under the same name holds nothing yet.
            wanted += [c for c in await self.leases.lapsed() if c not in wanted]
        if self._owns is not None:
            wanted = [c for c in wanted if self._owns(c)]
        for chat in wanted:
            if chat not in self.held:
                await self._take(chat)
        for chat in {*wanted, *self._taking}:
            if chat in self.held:
                self._start(chat)
        if self._on_share is not None and isinstance(self.leases, Counted):
            self._on_share(max(1, await self.leases.replicas()))
        await self._prune()

    async def _renew(self) -> None:
        """Renew each lease due, all at once: one chat's renewal waiting (its row is locked
        by a write of this replica in flight) must not make the others lapse.

        A lease not renewed within its lifetime is lost first, whatever the database answers:
        cut off from it (or every renewal failing), this replica cannot hear that another took
        the chat, and by then another may have."""
        now = self._clock()
        for chat in [c for c in self.held if now - self._renewed.get(c, now) >= self.ttl_s]:
            await self._lose(chat)
        due = [
            chat
            for chat in self.held
            if chat not in self._renewing
            and self._clock() - self._renewed.get(chat, 0.0) >= self.renew_s
        ]
        if due:
            await asyncio.gather(*(self._renew_one(chat) for chat in due))

    async def _renew_one(self, chat: ChatKey) -> None:
        lease = self.held.get(chat)
        if lease is None:
            return
        self._renewing.add(chat)
        try:
            # Taken before the request leaves: the lease's expiry on the database's clock is
            # no earlier than ``now + ttl_s`` here, so the lifetime check above comes first.
            now = self._clock()
            left = self.ttl_s - (now - self._renewed.get(chat, now))
            # A database that does not answer at all must not hold the renewals past the
            # lease's lifetime: the check above has to run again by then.
            renewed = await asyncio.wait_for(
                self.leases.acquire(chat, self.replica, self.ttl_s), max(left, 0.001)
            )
        finally:
            self._renewing.discard(chat)
        if self.held.get(chat) is not lease:
            return  # lost or taken again meanwhile
        if renewed is None:
            # Refused, or the lease row stayed locked (this replica's own write in flight)
            # longer than an acquire waits: only the former is a loss.
            current = await self.leases.holder(chat)
            if current is not None and (current.replica, current.epoch) == (
                self.replica,
                lease.epoch,
            ):
                return  # still ours: the next renewal tries again
        if renewed is None or renewed.epoch != lease.epoch:
            await self._lose(chat)
            if renewed is not None:
                # Lapsed and taken back at once: the chat may have changed hands in between.
                await self._took(chat, renewed, now)
            return
        self.held[chat] = renewed
        self._renewed[chat] = now

    async def _take(self, chat: ChatKey) -> None:
        since = self._clock()
        lease = await self.leases.acquire(chat, self.replica, self.ttl_s)
        if lease is not None:
            await self._took(chat, lease, since)

    async def _took(self, chat: ChatKey, lease: Lease, since: float) -> None:
        """``since``: this replica's clock before the acquire was sent (the lifetime runs
        from there at the latest)."""
        self.held[chat] = lease
        self._renewed[chat] = since
        # The takeover recovery runs in the chat's worker, before its updates: a slow one
        # (loading sessions, redrawing cards) holds up that chat only, never the renewals.
        self._taking.add(chat)
        _log.info("plangate.owners.taken chat=%s epoch=%s", chat, lease.epoch)

    async def _lose(self, chat: ChatKey) -> None:
        lease = self.held.pop(chat, None)
        self._renewed.pop(chat, None)
        self._taking.discard(chat)
        worker = self._workers.pop(chat, None)
        if worker is not None:
            worker.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await worker
        _log.warning("plangate.owners.lost chat=%s epoch=%s", chat, lease.epoch if lease else None)
        try:
            await self._on_lost(chat)
        except Exception:
            _log.exception("plangate.owners.lost_failed chat=%s", chat)

    def _start(self, chat: ChatKey) -> None:
        worker = self._workers.get(chat)
        if worker is not None and not worker.done():
            return
        self._workers[chat] = asyncio.ensure_future(self._drain(chat))

    async def _drain(self, chat: ChatKey) -> None:
        """Process the chat's pending updates in order while this replica holds it (after
        the takeover recovery, when the chat was just taken)."""
        if chat in self._taking:
            try:
                await self._on_taken(chat)
            except Exception:
                _log.exception("plangate.owners.taken_failed chat=%s", chat)
            self._taking.discard(chat)
        while chat in self.held:
            batch = await self.inbox.pending(chat, source=self.source)
            if not batch:
                return
            for item in batch:
                if chat not in self.held:
                    return
                lease = self.held.get(chat)
                if lease is None:
                    return
                claim = UpdateClaim(item.source, item.update_id, self.replica, lease=lease)
                with processing(claim):
                    try:
                        await self._process(item)
                    except Exception:
                        # A payload that does not even parse would otherwise come back every
                        # round: logged, and done (handler errors never get here, PTB's error
                        # handler takes them).
                        _log.exception("plangate.owners.process_failed update=%s", item.update_id)
                if not claim.done and not await self.inbox.mark_done(claim):
                    # Not marked: the lease moved on meanwhile; the next owner processes it.
                    return

    async def _prune(self) -> None:
        now = self._clock()
        if self._pruned_at is not None and now - self._pruned_at < PRUNE_EVERY_S:
            return
        self._pruned_at = now
        gone = await self.inbox.prune(older_than_s=KEEP_DONE_S)
        if gone:
            _log.info("plangate.owners.pruned %d", gone)

    async def idle(self) -> None:
        """Wait until no chat's updates are being processed (the caller bounds it)."""
        while any(not w.done() for w in self._workers.values()):
            await asyncio.gather(*self._workers.values(), return_exceptions=True)

    async def close(self) -> None:
        """Stop processing (what runs now finishes first) and release every lease held."""
        with contextlib.suppress(Exception):
            await self.idle()
        for chat in list(self.held):
            with contextlib.suppress(Exception):
                await self.leases.release(chat, self.replica)
        self.held.clear()
        self._renewed.clear()


__all__ = ["KEEP_DONE_S", "ChatOwners", "Lapsed"]
