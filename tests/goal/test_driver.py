"""RoundDriver on the real APScheduler: the cap, coalesced ticks, dropped ticks, disarming."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from engine.agent.ports import IdleListener
from engine.events import GoalRoundSource, TurnEnd, TurnStart, UserMessage
from engine.goal.driver import RoundDriver, round_prompt
from engine.goal.fold import GoalRefusal
from engine.goal.service import GoalService
from engine.goal.types import GoalSnapshot
from engine.scheduler import ApsScheduler
from engine.testing import InMemoryEventLog
from tests.agent.harness import goal_rounds

SID = "s1"
WAIT_S = 10.0  # a safety bound on waits, never an assertion about speed


@dataclass
class FakeAgent:
    """A RoundTarget that records rounds and finishes each as a real turn would."""

    log: InMemoryEventLog
    driver: RoundDriver | None = None
    running: bool = False
    human_queued: bool = False
    rounds: list[GoalRoundSource] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    outcome: str = "completed"
    turns: int = 0

    def listen_idle(self, driver: IdleListener) -> None:
        assert isinstance(driver, RoundDriver)
        self.driver = driver

    def is_idle(self, session_id: str) -> bool:
        return not self.running and not self.human_queued

    async def submit_round(self, session_id: str, text: str, source: GoalRoundSource) -> None:
        assert self.is_idle(session_id), "a round was submitted while the agent was busy"
        self.rounds.append(source)
        self.texts.append(text)
        self.running = True
        asyncio.get_running_loop().create_task(self._turn(session_id, text, source))

    async def _turn(self, session_id: str, text: str, source: GoalRoundSource) -> None:
        assert self.driver is not None
        await asyncio.sleep(0)
        self.turns += 1
        turn_id = f"t{self.turns}"
        await self.log.append(session_id, [TurnStart(turn_id=turn_id)])
        if await self.driver.validate_round(session_id, source):
            await self.log.append(session_id, [UserMessage(text=text, source=source)])
        await self.log.append(session_id, [TurnEnd(turn_id=turn_id, outcome="completed")])
        self.running = False
        self.driver.notify_idle(session_id, outcome=self.outcome)

    async def human_turn(self, session_id: str) -> None:
        """A human turn that was running; it ends now."""
        assert self.driver is not None
        self.running = False
        self.driver.notify_idle(session_id, outcome="completed")


@dataclass
class Rig:
    log: InMemoryEventLog
    goals: GoalService
    agent: FakeAgent
    driver: RoundDriver
    sched: ApsScheduler
    changes: asyncio.Event


def fake_agent(log: InMemoryEventLog, goals: GoalService) -> FakeAgent:
    return FakeAgent(log)


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    async with goal_rounds(fake_agent, paused=True) as rounds:
        changes = asyncio.Event()
        rounds.goals.add_listener(lambda _sid, _goal: changes.set())
        yield Rig(rounds.log, rounds.goals, rounds.target, rounds.driver, rounds.sched, changes)


async def until(predicate: object, rig: Rig) -> None:
    async def loop() -> None:
        while not predicate():  # type: ignore[operator]
            await asyncio.sleep(0.01)

    await asyncio.wait_for(loop(), WAIT_S)


async def settle(rounds: int = 50) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


async def test_exactly_rounds_one_to_n_then_round_limit(rig: Rig) -> None:
    rig.sched.aps.resume()
    goal = await rig.goals.create(SID, 'fix "all" tests', max_rounds=3, arm=True)
    assert isinstance(goal, GoalSnapshot)
    await until(lambda: (g := rig.goals.peek(SID)) is not None and g.phase == "blocked", rig)
    await settle()
    final = await rig.goals.get(SID)
    assert final is not None and final.blocked is not None
    assert final.blocked.code == "round-limit"
    assert final.rounds_started == 3
    assert [r.round for r in rig.agent.rounds] == [1, 2, 3]
    assert {(r.goal_id, r.revision) for r in rig.agent.rounds} == {(goal.id, 1)}
    assert '"fix \\"all\\" tests"' in rig.agent.texts[0]
    assert "Round 1/3" in rig.agent.texts[0] and "Round 3/3" in rig.agent.texts[2]
    assert not rig.goals.is_armed(SID)
    assert not rig.sched.has_job(f"goal-round:{SID}")


async def test_raising_the_cap_then_resume_runs_on(rig: Rig) -> None:
    rig.sched.aps.resume()
    goal = await rig.goals.create(SID, "go", max_rounds=1, arm=True)
    assert isinstance(goal, GoalSnapshot)
    await until(lambda: (g := rig.goals.peek(SID)) is not None and g.phase == "blocked", rig)
    blocked = await rig.goals.get(SID)
    assert blocked is not None
    refused = await rig.goals.resume(SID, blocked.ref)
    assert not isinstance(refused, GoalSnapshot) and refused.code == "no-capacity"
    raised = await rig.goals.edit(SID, blocked.ref, max_rounds=2)
    assert isinstance(raised, GoalSnapshot) and raised.phase == "blocked"
    resumed = await rig.goals.resume(SID, raised.ref)
    assert isinstance(resumed, GoalSnapshot)
    await until(lambda: (g := rig.goals.peek(SID)) is not None and g.phase == "blocked", rig)
    assert [r.round for r in rig.agent.rounds] == [1, 2]


async def test_waits_for_idle_before_reserving(rig: Rig) -> None:
    rig.agent.running = True  # a human turn is running
    rig.sched.aps.resume()
    goal = await rig.goals.create(SID, "later", max_rounds=5, arm=True)
    assert isinstance(goal, GoalSnapshot)
    await until(lambda: rig.driver.has_attempt(SID), rig)
    await settle()
    assert rig.agent.rounds == []
    await rig.goals.disarm(SID)  # keep the test to one round
    await rig.goals.arm(SID, goal.ref)
    await rig.agent.human_turn(SID)
    await until(lambda: len(rig.agent.rounds) >= 1, rig)
    assert rig.agent.rounds[0].round == 1


async def test_scheduled_goal_coalesces_missed_ticks_into_one_round(rig: Rig) -> None:
    goal = await rig.goals.create(SID, "nightly", max_rounds=10, schedule_s=3600, arm=True)
    assert isinstance(goal, GoalSnapshot)
    job = rig.sched.aps.get_job(f"goal-round:{SID}")
    assert job is not None
    # The process "stalled" for ten intervals: the job is ten ticks overdue.
    job.modify(next_run_time=datetime.now(UTC) - timedelta(hours=10))
    rig.sched.aps.resume()
    await until(lambda: len(rig.agent.rounds) == 1 and rig.agent.is_idle(SID), rig)
    await until(lambda: not rig.driver.has_attempt(SID), rig)
    await settle()
    assert [r.round for r in rig.agent.rounds] == [1]
    job = rig.sched.aps.get_job(f"goal-round:{SID}")
    assert job is not None and job.next_run_time > datetime.now(UTC)
    current = await rig.goals.get(SID)
    assert current is not None and current.rounds_started == 1 and current.phase == "active"


async def test_tick_while_attempt_queued_is_dropped(rig: Rig) -> None:
    rig.agent.running = True
    goal = await rig.goals.create(SID, "hourly", max_rounds=10, schedule_s=3600, arm=True)
    assert isinstance(goal, GoalSnapshot)
    job = rig.sched.aps.get_job(f"goal-round:{SID}")
    assert job is not None
    for _ in range(3):  # three ticks fired the way the scheduler fires them
        await job.func(*job.args)
    assert rig.driver.has_attempt(SID)
    await settle()
    assert rig.agent.rounds == []
    await rig.agent.human_turn(SID)
    await until(lambda: len(rig.agent.rounds) == 1 and rig.agent.is_idle(SID), rig)
    await until(lambda: not rig.driver.has_attempt(SID), rig)
    await settle()
    assert [r.round for r in rig.agent.rounds] == [1]


async def test_jobs_exist_only_while_armed(rig: Rig) -> None:
    goal = await rig.goals.create(SID, "x", schedule_s=60, source="model")
    assert isinstance(goal, GoalSnapshot)
    assert not rig.sched.has_job(f"goal-round:{SID}")  # model goals start disarmed
    await rig.goals.arm(SID, goal.ref)
    assert rig.sched.has_job(f"goal-round:{SID}")
    await rig.goals.disarm(SID)
    assert not rig.sched.has_job(f"goal-round:{SID}")
    await rig.goals.arm(SID, goal.ref)
    off = await rig.goals.edit(SID, goal.ref, schedule_s=None)
    assert isinstance(off, GoalSnapshot)
    paused = await rig.goals.pause(SID, off.ref)
    assert isinstance(paused, GoalSnapshot)
    assert not rig.sched.has_job(f"goal-round:{SID}")


async def test_uncertain_failure_disarms(rig: Rig) -> None:
    rig.agent.outcome = "failed"
    rig.sched.aps.resume()
    goal = await rig.goals.create(SID, "flaky", max_rounds=5, arm=True)
    assert isinstance(goal, GoalSnapshot)
    await until(lambda: not rig.goals.is_armed(SID), rig)
    await until(lambda: not rig.driver.has_attempt(SID), rig)
    await settle()
    assert [r.round for r in rig.agent.rounds] == [1]
    current = await rig.goals.get(SID)
    assert current is not None and current.phase == "active" and current.revision == 1


async def test_restart_is_disarmed_and_runs_nothing(rig: Rig) -> None:
    goal = await rig.goals.create(SID, "survive", arm=True)
    assert isinstance(goal, GoalSnapshot)
    # A second process on the same log: same goal, no activation, no job.
    async with goal_rounds(fake_agent, log=rig.log) as second:
        goals2, sched2, agent2, driver2 = second.goals, second.sched, second.target, second.driver
        assert await goals2.get(SID) == goal
        assert not goals2.is_armed(SID)
        await goals2.on_session_start(SID)  # what the session's first load does
        driver2.notify_idle(SID)  # the new process's agent goes idle: still no round
        assert not sched2.has_job(f"goal-round:{SID}")
        await settle()
        assert agent2.rounds == []


async def test_a_failed_round_disarms_the_goal_whatever_round_waits_next(rig: Rig) -> None:
    # The owner edited the goal while a round ran: that round's attempt is gone and a newer
    # one waits for the busy agent. The old round's turn then fails: the goal still stops.
    rig.agent.running = True
    goal = await rig.goals.create(SID, "edited mid-round", arm=True)
    assert isinstance(goal, GoalSnapshot) and rig.goals.is_armed(SID)
    rig.driver.notify_idle(SID, outcome="failed", goal_id=goal.id)
    await until(lambda: not rig.goals.is_armed(SID), rig)
    assert rig.agent.rounds == []


async def test_a_failed_round_of_a_replaced_goal_leaves_the_new_goal_armed(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    # The owner cleared the goal while its round ran and set a new one: the old round's
    # failure says nothing about the new goal, which has not run yet.
    rig.agent.running = True
    old = await rig.goals.create(SID, "the old aim", arm=True)
    assert isinstance(old, GoalSnapshot)
    assert not isinstance(await rig.goals.clear(SID, old.ref), GoalRefusal)
    new = await rig.goals.create(SID, "the new aim", arm=True)
    assert isinstance(new, GoalSnapshot) and new.id != old.id
    caplog.set_level(logging.INFO, logger="plangate.goal.driver")
    rig.driver.notify_idle(SID, outcome="failed", goal_id=old.id)
    await settle()
    # The driver decided nothing: a decided failure is logged the moment its task runs.
    assert "round_failed" not in caplog.text
    assert rig.goals.is_armed(SID)
    rig.driver.notify_idle(SID, outcome="failed", goal_id=new.id)  # its own round: it stops
    await until(lambda: not rig.goals.is_armed(SID), rig)
    assert "round_failed" in caplog.text


def test_round_prompt_quotes_objective() -> None:
    goal = GoalSnapshot(id="g", revision=1, objective="a\nb", phase="active", max_goal_rounds=4)
    text = round_prompt(goal, 2)
    assert '"a\\nb"' in text and "Round 2/4" in text and "workspace" in text


async def test_scheduler_coalesces_overdue_interval_ticks() -> None:
    sched = ApsScheduler()
    sched.start(paused=True)
    calls: list[int] = []
    done = asyncio.Event()

    async def tick() -> None:
        calls.append(1)
        done.set()

    sched.run_every("job", 3600, tick)
    job = sched.aps.get_job("job")
    assert job is not None
    job.modify(next_run_time=datetime.now(UTC) - timedelta(hours=10))
    sched.aps.resume()
    await asyncio.wait_for(done.wait(), WAIT_S)
    await settle()
    assert calls == [1]
    sched.cancel("job")
    assert not sched.has_job("job")
    sched.shutdown()
    await asyncio.sleep(0)


async def test_no_round_is_dispatched_while_held() -> None:
    editing = {SID: True}

    async def hold(session_id: str) -> bool:
        return editing[session_id]

    async with goal_rounds(fake_agent, hold=hold) as rounds:
        goals, agent, driver = rounds.goals, rounds.target, rounds.driver
        goal = await goals.create(SID, "after planning", max_rounds=1, arm=True)
        assert isinstance(goal, GoalSnapshot)
        await asyncio.wait_for(_until_attempt(driver), WAIT_S)
        await settle()
        assert agent.rounds == []
        editing[SID] = False
        driver.notify_idle(SID)
        await asyncio.wait_for(_until_rounds(agent, 1), WAIT_S)
        assert [r.round for r in agent.rounds] == [1]


async def _until_attempt(driver: RoundDriver) -> None:
    while not driver.has_attempt(SID):
        await asyncio.sleep(0.01)


async def _until_rounds(agent: FakeAgent, n: int) -> None:
    while len(agent.rounds) < n:
        await asyncio.sleep(0.01)
