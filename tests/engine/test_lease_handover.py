"""A chat moving between two replicas on one real PostgreSQL and one shared home: the replica
that lost the chat's lease kills the run's bash and writes nothing more; the one that took it
over shows the run paused with Resume (never re-armed), and Resume finishes it there. The real
engine, real sandboxed bash, the scripted model."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from engine.api import PLAN_RESUME
from engine.events import TurnEnd, TurnStart
from engine.model.script import call, say
from engine.model.scripted import ScriptedProvider
from engine.sessions import INTERRUPTED_NOTICE
from tests.engine.helpers import OWNER, engine_rig, post_init, settle
from tests.engine.test_checklist_run import TASK_2, _press
from tests.keys import chat
from tests.pg import pg_cluster, pg_dsn

__all__ = ["pg_cluster", "pg_dsn"]

# A sleep no other process on the machine runs: its command line identifies the run's bash.
SLEEP = "sleep 917.125"


def _sleepers() -> list[int]:
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if SLEEP in cmdline:
            found.append(int(entry))
    return found


async def _until(predicate: object, what: str, timeout_s: float = 30.0) -> None:
    async def poll() -> None:
        while not predicate():  # type: ignore[operator]
            await asyncio.sleep(0.05)

    try:
        await asyncio.wait_for(poll(), timeout_s)
    except TimeoutError:
        raise AssertionError(f"not within {timeout_s}s: {what}") from None


async def test_the_replica_that_lost_a_chat_kills_its_run_and_the_new_owner_offers_resume(
    pg_dsn: str, tmp_path: Path
) -> None:
    one_script = [
        call("plan", {"op": "start"}),
        call("bash", {"command": f"touch started && {SLEEP}"}),
        say("never reached"),
    ]
    two_script = [
        call("plan", {"op": "complete", "evidence": "greet.py written"}),
        *TASK_2,
        say("All done."),
    ]
    async with (
        engine_rig(
            tmp_path, ScriptedProvider(one_script), database_url=pg_dsn, replica="one"
        ) as one,
        engine_rig(
            tmp_path, ScriptedProvider(two_script), database_url=pg_dsn, replica="two"
        ) as two,
    ):
        room = chat(-1)
        assert await one.storage.leases.acquire(room.key, "one", 30) is not None
        sid = await one.engine.session_for_chat(room)
        await post_init(one, sid)
        await one.engine.command(sid, "execute", "", actor=OWNER)
        await _until(lambda: (one.workspace / "started").exists(), "the run's bash started")
        assert _sleepers()

        # One stalls past its lease; two takes the chat over (a new epoch).
        await one.storage.db.pool.execute("UPDATE chat_leases SET expires_at = 0")  # type: ignore[union-attr]
        taken = await two.storage.leases.acquire(room.key, "two", 30)
        assert taken is not None and taken.epoch == 2

        assert await one.engine.chat_lost(room.key) == [sid]
        await _until(lambda: not _sleepers(), "the lost run's bash is gone")
        assert one.engine.agents.is_idle(sid)
        assert not one.engine.goals.is_armed(sid)
        before = len(await two.storage.log.read(sid))
        one_notices = len(one.channel.of("notice"))

        restored = await two.engine.chat_taken(room.key)
        assert restored == []  # no goal in this chat
        events = [s.event for s in await two.storage.log.read(sid)]
        # The new owner closed the turn the old one left open; the old one added nothing.
        assert len(events) > before
        assert isinstance(events[-1], TurnEnd) and events[-1].outcome == "interrupted"
        assert [c.args["text"] for c in two.channel.of("notice")] == [INTERRUPTED_NOTICE]
        assert len(one.channel.of("notice")) == one_notices
        card = await two.engine.plan_card(sid)
        assert card.state == "paused", card.state
        assert any(PLAN_RESUME in row for row in card.actions)
        assert not two.engine.agents.controller(sid).checklist.armed

        # Resume on the new owner finishes the plan.
        assert await _press(two, sid, "resume") == "Continuing with the checklist."
        await settle(two.engine, sid)
        assert await two.engine.plans.state(sid) == "none"


async def test_a_replica_whose_write_meets_a_newer_epoch_lets_the_chat_go_by_itself(
    pg_dsn: str, tmp_path: Path
) -> None:
    # Nobody told replica one that it lost the chat (its lease loop stalled): the first
    # append after the takeover raises LeaseLost, and the engine lets the chat go itself.
    script = [
        call("bash", {"command": "touch started && while [ ! -e go ]; do sleep 0.05; done"}),
        say("never reached"),
    ]
    async with (
        engine_rig(tmp_path, ScriptedProvider(script), database_url=pg_dsn, replica="one") as one,
        engine_rig(tmp_path, ScriptedProvider([]), database_url=pg_dsn, replica="two") as two,
    ):
        room = chat(-2)
        assert await one.storage.leases.acquire(room.key, "one", 30) is not None
        sid = await one.engine.session_for_chat(room)
        await one.engine.user_message(sid, "run it", actor=OWNER, message_id=None)
        await _until(lambda: (one.workspace / "started").exists(), "the turn's bash started")
        await one.storage.db.pool.execute("UPDATE chat_leases SET expires_at = 0")  # type: ignore[union-attr]
        assert await two.storage.leases.acquire(room.key, "two", 30) is not None
        before = [s.seq for s in await two.storage.log.read(sid)]

        (one.workspace / "go").touch()  # the bash call returns; its result cannot be written
        await _until(
            lambda: not one.engine.sessions.is_loaded(sid) and one.engine.agents.is_idle(sid),
            "replica one let the chat go",
        )
        assert one.engine.sessions.chat_of(sid) is None
        assert [s.seq for s in await two.storage.log.read(sid)] == before


async def test_a_replica_started_without_recovery_loads_a_chat_only_when_it_takes_it(
    tmp_path: Path,
) -> None:
    room = chat(-3)
    async with engine_rig(tmp_path, ScriptedProvider([])) as rig:
        sid = await rig.engine.session_for_chat(room)
        # A process died in the middle of a turn.
        await rig.storage.log.append(sid, [TurnStart(turn_id="t1")])
    async with engine_rig(tmp_path, ScriptedProvider([]), start=False) as rig:
        assert await rig.engine.start(recover=False) == []
        assert not rig.engine.sessions.is_loaded(sid)
        assert rig.channel.of("notice") == []
        await rig.engine.chat_taken(room.key)
        assert rig.engine.sessions.is_loaded(sid)
        assert [c.args["text"] for c in rig.channel.of("notice")] == [INTERRUPTED_NOTICE]
        last = (await rig.storage.log.read(sid))[-1].event
        assert isinstance(last, TurnEnd) and last.outcome == "interrupted"


async def test_losing_a_chat_disarms_its_goal_and_withdraws_its_schedule(
    pg_dsn: str, tmp_path: Path
) -> None:
    async with engine_rig(
        tmp_path, ScriptedProvider([say("ok")] * 5), database_url=pg_dsn, replica="one"
    ) as one:
        room = chat(-4)
        assert await one.storage.leases.acquire(room.key, "one", 30) is not None
        sid = await one.engine.session_for_chat(room)
        await one.engine.command(sid, "goal", "every 1h keep the tests green", actor=OWNER)
        assert one.engine.goals.is_armed(sid)
        job = f"goal-round:{sid}"
        assert one.engine.scheduler.has_job(job)
        db = one.storage.db

        async def published() -> int:
            return int(await db.pool.fetchval("SELECT count(*) FROM scheduled_jobs"))  # type: ignore[union-attr]

        await _until_async(lambda: published(), 1, "the schedule is published")
        await one.engine.chat_lost(room.key)
        assert not one.engine.goals.is_armed(sid)
        assert not one.engine.scheduler.has_job(job)
        await _until_async(lambda: published(), 0, "the schedule is withdrawn")


async def _until_async(read: object, want: int, what: str, timeout_s: float = 30.0) -> None:
    async def poll() -> None:
        while await read() != want:  # type: ignore[operator]
            await asyncio.sleep(0.05)

    try:
        await asyncio.wait_for(poll(), timeout_s)
    except TimeoutError:
        raise AssertionError(f"not within {timeout_s}s: {what}") from None
