"""A goal round is validated before it is admitted (docs/goals.md).

Admission is the goal-source ``user/message``: it counts toward the cap, so a round refused at
its first pre-step must leave no ``user/message`` (and no ``turn/start``) behind, and the fold
counts a goal message only when its goal id and revision are the live snapshot's.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from engine.agent.ports import IdleListener
from engine.events import GoalChange, GoalRoundSource, TurnStart, UserMessage
from engine.goal.driver import RoundDriver
from engine.goal.service import GoalService
from engine.goal.types import GoalSnapshot
from engine.model.script import say
from engine.projections import fold_session
from engine.testing import InMemoryEventLog
from tests.agent.harness import goal_rounds, make_agent

SID = "s1"
WAIT_S = 20.0


class IdleRecorder:
    """The driver's side of the controller: records every idle notification."""

    def __init__(self) -> None:
        self.outcomes: list[str | None] = []

    def notify_idle(
        self, session_id: str, *, outcome: str | None = None, goal_id: str | None = None
    ) -> None:
        self.outcomes.append(outcome)


async def test_round_paused_before_admission_uses_no_round(tmp_path: Path) -> None:
    log = InMemoryEventLog()
    goals = GoalService(log)
    registry = make_agent(tmp_path, [say("should not run")], goals=goals, log=log).registry
    idle = IdleRecorder()
    registry.listen_idle(idle)
    try:
        goal = await goals.create(SID, "keep going", max_rounds=3, arm=True)
        assert isinstance(goal, GoalSnapshot)
        # The driver reserved round 1 at this revision; then the owner paused the goal.
        source = GoalRoundSource(goal_id=goal.id, revision=goal.revision, round=1)
        paused = await goals.pause(SID, goal.ref)
        assert isinstance(paused, GoalSnapshot)
        await registry.submit_round(SID, "next round", source)
        await asyncio.wait_for(registry.wait_idle(SID), WAIT_S)
    finally:
        await registry.shutdown()
    events = [e.event for e in await log.read(SID)]
    assert not any(isinstance(e, UserMessage) for e in events)
    assert not any(isinstance(e, TurnStart) for e in events)
    after = await goals.get(SID)
    assert after is not None and after.rounds_started == 0
    assert idle.outcomes  # the driver still hears that the session went idle


def _snapshot(revision: int, rounds: int = 0) -> GoalSnapshot:
    return GoalSnapshot(
        id="g1",
        revision=revision,
        objective="o",
        phase="active",
        max_goal_rounds=5,
        rounds_started=rounds,
    )


def test_fold_ignores_a_goal_message_with_a_stale_revision() -> None:
    events = [
        GoalChange(snapshot=_snapshot(1)),
        GoalChange(snapshot=_snapshot(2)),
        UserMessage(text="stale", source=GoalRoundSource(goal_id="g1", revision=1, round=1)),
    ]
    goal = fold_session(events).goal
    assert goal is not None and goal.rounds_started == 0
    events.append(
        UserMessage(text="live", source=GoalRoundSource(goal_id="g1", revision=2, round=1))
    )
    goal = fold_session(events).goal
    assert goal is not None and goal.rounds_started == 1


class RefusingOnceTarget:
    """A RoundTarget whose first round is refused before admission (as at a plan switch)."""

    def __init__(self, log: InMemoryEventLog) -> None:
        self.log = log
        self.driver: RoundDriver | None = None
        self.running = False
        self.rounds: list[GoalRoundSource] = []

    def listen_idle(self, driver: IdleListener) -> None:
        assert isinstance(driver, RoundDriver)
        self.driver = driver

    def is_idle(self, session_id: str) -> bool:
        return not self.running

    async def submit_round(self, session_id: str, text: str, source: GoalRoundSource) -> None:
        self.rounds.append(source)
        self.running = True
        asyncio.get_running_loop().create_task(self._turn(session_id, text, source))

    async def _turn(self, session_id: str, text: str, source: GoalRoundSource) -> None:
        assert self.driver is not None
        await asyncio.sleep(0)
        if len(self.rounds) > 1:
            await self.log.append(session_id, [UserMessage(text=text, source=source)])
        self.running = False
        self.driver.notify_idle(session_id, outcome="completed")


async def test_driver_settles_a_round_refused_before_admission(tmp_path: Path) -> None:
    async with goal_rounds(lambda log, _goals: RefusingOnceTarget(log)) as rounds:
        goals, target = rounds.goals, rounds.target
        goal = await goals.create(SID, "keep going", max_rounds=1, arm=True)
        assert isinstance(goal, GoalSnapshot)

        async def blocked() -> None:
            while (g := goals.peek(SID)) is None or g.phase != "blocked":
                await asyncio.sleep(0.01)

        # Not stuck on the refused reservation: round 1 is offered again, then the cap blocks.
        await asyncio.wait_for(blocked(), WAIT_S)
    assert [s.round for s in target.rounds] == [1, 1]
    final = await goals.get(SID)
    assert final is not None and final.rounds_started == 1
