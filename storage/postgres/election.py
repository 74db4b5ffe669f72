"""One elected scheduler among several replicas (docs/storage.md, "One scheduler").

Goal schedules stay on APScheduler 3 with its memory job store, never shared. Of the replicas on
one database, only the one holding a session-level PostgreSQL advisory lock on a dedicated
connection runs the schedules (:class:`LeaderElection`): when that replica dies, or its
connection does, the server drops the lock with the connection and the next candidate to ask
takes it.

:class:`ElectedScheduler` is the engine's :class:`engine.scheduler.Scheduler` on a replica:

- ``run_every`` (a goal's schedule, armed on the replica that owns the goal's chat) keeps the job
  in this replica's memory and publishes it as a row of ``scheduled_jobs`` (job id, owner,
  interval, and an anchor on the server's clock); ``cancel`` removes both.
- The leader mirrors ``scheduled_jobs`` into its own APScheduler, each job on an interval
  trigger from its anchor. A tick first claims its round, ``(job id, slot)`` with ``slot`` the
  number of intervals since the anchor, in ``job_fires``, whose primary key lets one claim win:
  two leaders for a moment (a deposed one that has not noticed yet) or a new leader repeating
  a tick the old one fired cannot fire a round twice.
- The owner runs a claimed round: at once when the leader is the owner, otherwise when its
  poll of ``job_fires`` finds the rows addressed to it (nothing depends on a notification).
  Rounds for an owner that holds no live lease any more are not claimed (a dead replica's
  goals stay disarmed, as after a restart).
- ``run_soon`` (a continuous goal's next round) is the owner's own business and runs here at
  once, leader or not.

With SQLite there is one process: :class:`engine.scheduler.ApsScheduler`, always the leader.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from datetime import UTC, datetime

import asyncpg
from apscheduler.triggers.interval import IntervalTrigger

from engine.scheduler import ApsScheduler, JobFn
from engine.tasks import BackgroundTasks
from storage.postgres.db import PgDatabase

log = logging.getLogger("plangate.scheduler.election")

# The advisory lock the scheduler's leader holds ("plgsched" in ASCII): the one-bigint key
# space, distinct from the migration lock's key.
SCHEDULER_LOCK = 0x706C677363686564

# Fired rounds older than this are forgotten by the leader (a slot that old is never fired
# again: slots only grow).
KEEP_FIRES_S = 7 * 86400.0

# How often a candidate asks for the lock, and how often a replica looks for rounds fired for
# it, in seconds: a new leader within one campaign interval, a round within one poll.
CAMPAIGN_S = 5.0
POLL_S = 1.0

_NOW = "extract(epoch FROM now())::float8"

# Claim the round a tick stands for; nothing when already claimed or when the job's owner
# holds no live lease. Returns the owner; a round for the leader itself ($3) is taken at once,
# so its own poll never runs it a second time.
_CLAIM = f"""
INSERT INTO job_fires (job_id, slot, replica, fired_at, taken)
SELECT j.job_id, $2::bigint, j.replica, {_NOW}, j.replica = $3
FROM scheduled_jobs AS j
WHERE j.job_id = $1 AND EXISTS (
    SELECT 1 FROM chat_leases AS l WHERE l.replica = j.replica AND l.expires_at > {_NOW}
)
ON CONFLICT (job_id, slot) DO NOTHING
RETURNING replica
"""


class LeaderElection:
    """A session-level advisory lock on a connection of its own: held means leader."""

    def __init__(self, url: str, *, key: int = SCHEDULER_LOCK) -> None:
        self._url = url
        self._key = key
        self._conn: asyncpg.Connection | None = None
        self.leader = False

    async def campaign(self) -> bool:
        """Ask for the lock (reconnecting if the connection went); whether this is the leader.

        A leader checks that its connection still answers: a lost connection is a lost lock.
        """
        try:
            if self._conn is None or self._conn.is_closed():
                self.leader = False
                self._conn = await asyncpg.connect(self._url)
                self._conn.add_termination_listener(self._terminated)
            if self.leader:
                await self._conn.fetchval("SELECT 1")
            else:
                self.leader = bool(
                    await self._conn.fetchval("SELECT pg_try_advisory_lock($1)", self._key)
                )
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            log.warning("plangate.scheduler.campaign_failed %s: %s", type(exc).__name__, exc)
            self.leader = False
            await self._drop()
        return self.leader

    def _terminated(self, conn: asyncpg.Connection) -> None:
        self.leader = False

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            conn.terminate()

    async def close(self) -> None:
        """Give the lock up (closing the connection releases it)."""
        self.leader = False
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            with contextlib.suppress(OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
                await conn.close(timeout=2)


class ElectedScheduler(ApsScheduler):
    """:class:`engine.scheduler.Scheduler` for a replica among several (see the module)."""

    def __init__(
        self,
        db: PgDatabase,
        url: str,
        replica: str,
        *,
        campaign_s: float = CAMPAIGN_S,
        poll_s: float = POLL_S,
    ) -> None:
        super().__init__()
        self._db = db
        self.replica = replica
        self.election = LeaderElection(url)
        self._campaign_s = campaign_s
        self._poll_s = poll_s
        # This replica's jobs: what runs when one of their rounds is fired for it.
        self._every: dict[str, JobFn] = {}
        self._soon: dict[str, asyncio.Handle] = {}
        # The leader's mirror: job id -> (interval, anchor) as added to APScheduler.
        self._mirrored: dict[str, tuple[float, float]] = {}
        # Row writes in the order the engine asked for them (the port's methods are sync).
        self._writes = asyncio.Lock()
        self._tasks = BackgroundTasks(log, event="scheduler_failed")
        self._loops: list[asyncio.Task[None]] = []

    # --- the Scheduler port ---------------------------------------------------------------

    def run_soon(self, job_id: str, fn: JobFn) -> None:
        """Run ``fn`` once, here, on the loop's next turn (a continuous goal's next round is
        its owner's business, leader or not)."""
        self._cancel_soon(job_id)

        def begin() -> None:
            del self._soon[job_id]
            self._tasks.spawn(_await(fn), name=f"soon {job_id}")

        self._soon[job_id] = asyncio.get_running_loop().call_soon(begin)

    def run_every(self, job_id: str, interval_s: float, fn: JobFn) -> None:
        """Publish the schedule (the leader fires it); its rounds run ``fn`` here."""
        self._cancel_soon(job_id)
        self._every[job_id] = fn
        self._tasks.spawn(self._publish(job_id, interval_s), name=f"publish {job_id}")

    def cancel(self, job_id: str) -> None:
        """Forget the job here and withdraw its schedule."""
        self._cancel_soon(job_id)
        if self._every.pop(job_id, None) is not None:
            self._tasks.spawn(self._withdraw(job_id), name=f"withdraw {job_id}")

    def has_job(self, job_id: str) -> bool:
        return job_id in self._every or job_id in self._soon

    def _cancel_soon(self, job_id: str) -> None:
        # Only a call that has not begun: a running one is not interrupted (the port's rule).
        handle = self._soon.pop(job_id, None)
        if handle is not None:
            handle.cancel()

    async def _publish(self, job_id: str, interval_s: float) -> None:
        # The anchor is kept when the same owner republishes the same interval, so the
        # schedule's rounds keep their slots.
        async with self._writes:
            await self._db.pool.execute(
                "INSERT INTO scheduled_jobs AS j (job_id, replica, interval_s, anchor) "
                f"VALUES ($1, $2, $3, {_NOW}) ON CONFLICT (job_id) DO UPDATE SET "
                "anchor = CASE WHEN j.replica = excluded.replica "
                "AND j.interval_s = excluded.interval_s THEN j.anchor ELSE excluded.anchor END, "
                "replica = excluded.replica, interval_s = excluded.interval_s",
                job_id,
                self.replica,
                interval_s,
            )
        if self.election.leader:
            await self.sync()

    async def _withdraw(self, job_id: str) -> None:
        async with self._writes:
            await self._db.pool.execute(
                "DELETE FROM scheduled_jobs WHERE job_id = $1 AND replica = $2",
                job_id,
                self.replica,
            )
        if self.election.leader:
            await self.sync()

    # --- lifecycle ------------------------------------------------------------------------

    def start(self, *, paused: bool = False) -> None:
        """Start APScheduler (empty until elected), the campaign and the poll for rounds."""
        super().start(paused=paused)
        if not self._loops:
            self._loops = [
                asyncio.get_running_loop().create_task(self._campaign_loop(), name="campaign"),
                asyncio.get_running_loop().create_task(self._poll_loop(), name="fired rounds"),
            ]

    def shutdown(self) -> None:
        """Stop firing and polling; :meth:`aclose` also gives the leadership up."""
        for task in self._loops:
            task.cancel()
        self._unmirror()
        self._tasks.cancel()
        super().shutdown()

    async def aclose(self) -> None:
        """Shut down and release the lock (its connection closes)."""
        loops = list(self._loops)
        self.shutdown()
        self._loops = []
        for task in loops:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.election.close()

    async def _campaign_loop(self) -> None:
        while True:
            await self.campaign()
            await asyncio.sleep(self._campaign_s)

    async def _poll_loop(self) -> None:
        while True:
            try:
                await self.run_fired()
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                log.warning("plangate.scheduler.poll_failed %s: %s", type(exc).__name__, exc)
            await asyncio.sleep(self._poll_s)

    async def campaign(self) -> bool:
        """One round of the election; the leader (re)mirrors the schedules, a deposed one
        drops its mirror. Whether this replica leads now."""
        was = self.election.leader
        leader = await self.election.campaign()
        if leader:
            if not was:
                log.info("plangate.scheduler.elected replica=%s", self.replica)
            await self.sync()
        elif was or self._mirrored:
            log.info("plangate.scheduler.deposed replica=%s", self.replica)
            self._unmirror()
        return leader

    # --- the leader -----------------------------------------------------------------------

    async def sync(self) -> None:
        """Mirror ``scheduled_jobs`` into APScheduler (added, changed, removed)."""
        if not self.election.leader:
            return
        await self._db.pool.execute(
            f"DELETE FROM job_fires WHERE fired_at < {_NOW} - $1::float8", KEEP_FIRES_S
        )
        rows = await self._db.pool.fetch("SELECT job_id, interval_s, anchor FROM scheduled_jobs")
        wanted = {str(r[0]): (float(r[1]), float(r[2])) for r in rows}
        for job_id in set(self._mirrored) - set(wanted):
            self._remove_mirror(job_id)
        for job_id, (interval_s, anchor) in wanted.items():
            if self._mirrored.get(job_id) != (interval_s, anchor):
                self._add_mirror(job_id, interval_s, anchor)

    def _add_mirror(self, job_id: str, interval_s: float, anchor: float) -> None:
        trigger = IntervalTrigger(
            seconds=interval_s, start_date=datetime.fromtimestamp(anchor, UTC)
        )
        self._add(f"elected:{job_id}", _Fire(self, job_id, interval_s, anchor), trigger)
        self._mirrored[job_id] = (interval_s, anchor)

    def _remove_mirror(self, job_id: str) -> None:
        self._mirrored.pop(job_id, None)
        if self.aps.get_job(f"elected:{job_id}") is not None:
            self.aps.remove_job(f"elected:{job_id}")

    def _unmirror(self) -> None:
        for job_id in list(self._mirrored):
            self._remove_mirror(job_id)

    async def fire(self, job_id: str, slot: int) -> bool:
        """Claim round ``slot`` of ``job_id``; run it when this replica owns the job.

        False when the round was claimed before (by this or another leader) or its owner holds
        no live lease: nothing runs then.
        """
        if not self.election.leader:
            return False
        owner = await self._db.pool.fetchval(_CLAIM, job_id, slot, self.replica)
        if owner is None:
            return False
        log.info("plangate.scheduler.fired job=%s slot=%s owner=%s", job_id, slot, owner)
        if owner == self.replica:
            self._run_local(job_id)
        return True

    # --- every replica --------------------------------------------------------------------

    async def run_fired(self) -> int:
        """Run the rounds the leader fired for this replica's jobs; how many ran."""
        rows = await self._db.pool.fetch(
            "UPDATE job_fires SET taken = true WHERE replica = $1 AND NOT taken "
            "RETURNING job_id, slot",
            self.replica,
        )
        ran = 0
        for job_id, _ in sorted(rows, key=lambda r: (r[0], r[1])):
            ran += self._run_local(str(job_id))
        return ran

    def _run_local(self, job_id: str) -> bool:
        fn = self._every.get(job_id)
        if fn is None:
            return False  # disarmed here since: the round is dropped, as a late tick is
        self._tasks.spawn(_await(fn), name=f"round {job_id}")
        return True


async def _await(fn: JobFn) -> None:
    await fn()


class _Fire:
    """The leader's APScheduler job for one schedule (an object, so job ids stay readable)."""

    def __init__(
        self, scheduler: ElectedScheduler, job_id: str, interval_s: float, anchor: float
    ) -> None:
        self._scheduler = scheduler
        self._job_id = job_id
        self._interval_s = interval_s
        self._anchor = anchor

    async def __call__(self) -> None:
        # The round this tick stands for, on this replica's clock: rounding (not flooring)
        # keeps a tick and the same tick on another leader in one slot while the replicas'
        # clocks agree within half an interval.
        slot = round((time.time() - self._anchor) / self._interval_s)
        try:
            await self._scheduler.fire(self._job_id, slot)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            log.warning("plangate.scheduler.fire_failed %s: %s", type(exc).__name__, exc)


__all__ = ["CAMPAIGN_S", "POLL_S", "SCHEDULER_LOCK", "ElectedScheduler", "LeaderElection"]
