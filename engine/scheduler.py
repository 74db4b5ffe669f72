"""The one scheduler interface every engine timer goes through (docs/architecture.md).

:class:`Scheduler` is the port; :class:`ApsScheduler` implements it on one APScheduler 3.11
``AsyncIOScheduler`` that the engine owns. Jobs are in memory only: a restart forgets them, which
is what goals want (a restarted process is disarmed and catches nothing up). Among several
replicas on PostgreSQL, ``storage.postgres.election.ElectedScheduler`` implements the same port:
one elected replica fires the schedules, each round once, and the goal's owner runs it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Protocol

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger

JobFn = Callable[[], Awaitable[None]]

log = logging.getLogger("plangate.scheduler")


class Scheduler(Protocol):
    """Named in-memory jobs; adding a job under an existing id replaces it."""

    def run_soon(self, job_id: str, fn: JobFn) -> None:
        """Run ``fn`` once, as soon as the event loop gets to it."""
        ...

    def run_every(self, job_id: str, interval_s: float, fn: JobFn) -> None:
        """Run ``fn`` every ``interval_s``; missed ticks coalesce into one, never a burst."""
        ...

    def cancel(self, job_id: str) -> None:
        """Remove the job if it exists (a running call is not interrupted)."""
        ...

    def has_job(self, job_id: str) -> bool: ...


async def _call(fn: JobFn) -> None:
    # APScheduler runs a native coroutine function on the loop and anything else in a thread
    # pool; wrapping every job in this coroutine keeps all jobs on the event loop.
    await fn()


class ApsScheduler:
    """:class:`Scheduler` on an APScheduler ``AsyncIOScheduler``.

    Call :meth:`start` inside the running event loop. Pass ``scheduler`` to share one instance
    (tests start it paused to stand for a stalled process).
    """

    def __init__(self, scheduler: AsyncIOScheduler | None = None) -> None:
        self.aps: AsyncIOScheduler = scheduler if scheduler is not None else AsyncIOScheduler()

    def start(self, *, paused: bool = False) -> None:
        """Start the underlying scheduler on the running loop (no-op when already running)."""
        if not self.aps.running:
            self.aps.start(paused=paused)

    def shutdown(self) -> None:
        """Stop without waiting for running jobs; the loop finishes the stop on its next turn."""
        if self.aps.running:
            self.aps.shutdown(wait=False)

    def run_soon(self, job_id: str, fn: JobFn) -> None:
        self._add(job_id, fn, DateTrigger(run_date=datetime.now(UTC)))

    def run_every(self, job_id: str, interval_s: float, fn: JobFn) -> None:
        self._add(job_id, fn, IntervalTrigger(seconds=interval_s))

    def cancel(self, job_id: str) -> None:
        if self.aps.get_job(job_id) is not None:
            self.aps.remove_job(job_id)

    def has_job(self, job_id: str) -> bool:
        return self.aps.get_job(job_id) is not None

    def _add(self, job_id: str, fn: JobFn, trigger: Any) -> None:
        # coalesce + max_instances=1: ticks missed while the loop was stalled run once; no
        # misfire grace limit, so a late tick still runs (once) instead of being skipped.
        self.aps.add_job(
            _call,
            trigger=trigger,
            args=[fn],
            id=job_id,
            replace_existing=True,
            coalesce=True,
            max_instances=1,
            misfire_grace_time=None,
        )


__all__ = ["ApsScheduler", "JobFn", "Scheduler"]
