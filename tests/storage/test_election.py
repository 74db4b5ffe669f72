"""One elected scheduler among replicas on one real PostgreSQL: the leader's connection is
killed, the other candidate takes over and fires, and no round fires twice."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from engine.goal.driver import RoundDriver
from engine.goal.service import GoalService
from engine.goal.types import GoalSnapshot
from engine.testing import InMemoryEventLog
from storage.postgres.db import PgDatabase
from storage.postgres.election import ElectedScheduler
from storage.postgres.leases import PgChatLeases
from tests.goal.test_driver import SID, FakeAgent
from tests.pg import pg_cluster, pg_dsn

__all__ = ["pg_cluster", "pg_dsn"]

JOB = "goal:s1"


async def _until(predicate: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    async def poll() -> None:
        while not predicate():
            await asyncio.sleep(0.02)

    try:
        await asyncio.wait_for(poll(), timeout_s)
    except TimeoutError:
        raise AssertionError(f"not within {timeout_s}s: {what}") from None


async def test_the_leaders_connection_killed_the_other_fires_and_no_round_fires_twice(
    pg_dsn: str,
) -> None:
    dbs = [await PgDatabase.open(pg_dsn) for _ in range(3)]
    try:
        # Replica o owns the goal's chat (a live lease) and arms its schedule; a leads first.
        await PgChatLeases(dbs[0]).acquire("c1", "o", 600)
        a, b, o = (
            ElectedScheduler(db, pg_dsn, name, campaign_s=0.05, poll_s=0.05)
            for db, name in zip(dbs, "abo", strict=True)
        )
        rounds: list[str] = []

        async def round_() -> None:
            rounds.append("o")

        a.start()
        await _until(lambda: a.election.leader, "a is elected")
        b.start()
        o.start()
        o.run_every(JOB, 0.2, round_)
        await _until(lambda: len(rounds) >= 2, "the leader fires o's rounds")
        assert not b.election.leader and not o.election.leader

        # a's host dies: its process stops, and the server drops its connection and the lock.
        a.shutdown()
        killed = await dbs[1].pool.fetchval(
            "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted"
        )
        assert killed
        await _until(lambda: b.election.leader or o.election.leader, "another is elected")
        after = len(rounds)
        await _until(lambda: len(rounds) >= after + 2, "the new leader fires o's rounds")

        o.cancel(JOB)
        await _until(lambda: not o.has_job(JOB) and not o._tasks, "withdrawn")  # noqa: SLF001
        for one in (a, b, o):
            await one.aclose()
        fired = await dbs[0].pool.fetch(
            "SELECT slot, taken FROM job_fires WHERE job_id = $1 ORDER BY slot", JOB
        )
        slots = [int(r[0]) for r in fired]
        assert len(slots) == len(set(slots))
        # Every round was claimed once and run once: as many runs as rounds taken.
        assert len(rounds) == sum(1 for r in fired if r[1])
        assert await dbs[0].pool.fetchval("SELECT count(*) FROM scheduled_jobs") == 0
    finally:
        for db in dbs:
            await db.close()


async def test_a_round_claimed_by_one_leader_is_not_fired_again_by_the_next(pg_dsn: str) -> None:
    async with await PgDatabase.open(pg_dsn) as db:
        await PgChatLeases(db).acquire("c1", "a", 600)
        await PgChatLeases(db).acquire("c2", "b", 600)
        a = ElectedScheduler(db, pg_dsn, "a")
        b = ElectedScheduler(db, pg_dsn, "b")
        ran: list[int] = []

        async def round_() -> None:
            ran.append(1)

        a.run_every(JOB, 3600, round_)
        await _until(lambda: len(a._tasks) == 0, "published")  # noqa: SLF001
        assert await a.campaign()
        assert await a.fire(JOB, 5)
        await a.election.close()  # a goes; b is elected
        assert await b.campaign()
        assert not await b.fire(JOB, 5)  # the tick a fired, repeated by the new leader
        assert await b.fire(JOB, 6)
        assert await a.run_fired() == 1  # slot 6, addressed to a; slot 5 ran when fired
        await _until(lambda: len(ran) == 2, "both rounds ran on a")
        assert not await b.fire(JOB, 6)
        # An owner with no live lease (dead, its chats taken) gets no round.
        await db.pool.execute("UPDATE chat_leases SET expires_at = 0 WHERE replica = 'a'")
        assert not await b.fire(JOB, 7)
        await a.aclose()
        await b.aclose()


async def test_a_scheduled_goal_runs_its_rounds_through_the_elected_scheduler(
    pg_dsn: str,
) -> None:
    async with await PgDatabase.open(pg_dsn) as db:
        await PgChatLeases(db).acquire("c1", "o", 600)
        sched = ElectedScheduler(db, pg_dsn, "o", campaign_s=0.05, poll_s=0.05)
        sched.start()
        log = InMemoryEventLog()
        goals = GoalService(log)
        agent = FakeAgent(log)
        driver = RoundDriver(goals, agent, sched)
        try:
            await _until(lambda: sched.election.leader, "o is elected")
            made = await goals.create(SID, "x", schedule_s=1, max_rounds=2, arm=True)
            assert isinstance(made, GoalSnapshot)
            await _until(
                lambda: (g := goals.peek(SID)) is not None and g.phase == "blocked",
                "the goal ran its rounds",
            )
            assert [r.round for r in agent.rounds] == [1, 2]
            assert not sched.has_job(f"goal-round:{SID}")
        finally:
            await driver.close()
            await sched.aclose()
        assert await db.pool.fetchval("SELECT count(*) FROM job_fires") >= 2


async def test_a_schedule_armed_again_fires_its_rounds_again(pg_dsn: str) -> None:
    # A goal paused and resumed (or resumed by the chat's next owner) publishes its schedule
    # again under the same job id with a new anchor: its rounds count from 1 again, and must
    # not be taken for the rounds of the earlier arming already in job_fires.
    async with await PgDatabase.open(pg_dsn) as db:
        await PgChatLeases(db).acquire("c1", "a", 600)
        a = ElectedScheduler(db, pg_dsn, "a")
        ran: list[int] = []

        async def round_() -> None:
            ran.append(1)

        async def tick() -> None:
            # The leader's mirror of the schedule ticks now (its slot from its anchor).
            job = a.aps.get_job(f"elected:{JOB}")
            assert job is not None
            await job.func(*job.args)
            await _until(lambda: len(a._tasks) == 0, "the round ran")  # noqa: SLF001

        a.run_every(JOB, 3600, round_)
        await _until(lambda: len(a._tasks) == 0, "published")  # noqa: SLF001
        assert await a.campaign()
        await tick()
        assert ran == [1]
        first = await db.pool.fetchval("SELECT anchor FROM scheduled_jobs WHERE job_id = $1", JOB)
        a.cancel(JOB)
        await _until(lambda: len(a._tasks) == 0, "withdrawn")  # noqa: SLF001
        a.run_every(JOB, 3600, round_)
        await _until(lambda: len(a._tasks) == 0, "published again")  # noqa: SLF001
        await tick()
        assert ran == [1, 1]
        # A leader whose mirror still has the first anchor (not synced since) claims nothing.
        assert not await a.fire(JOB, 1, anchor=first)
        await a.aclose()
