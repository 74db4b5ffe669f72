"""Test rigs over in-memory fakes: the agent (a log, a scripted model and a recording channel),
and goal rounds (goals, the real scheduler and the round driver over a target)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from engine.agent.build import build_agent
from engine.agent.controller import AgentRegistry
from engine.agent.ports import GoalPort, IdleListener, PlanPort
from engine.agent.settings import AgentSettings
from engine.agent.testing import RecordingChannel
from engine.events import SessionEvent
from engine.goal.driver import RoundDriver, RoundTarget
from engine.goal.service import GoalService
from engine.model.script import ScriptStep
from engine.model.scripted import ScriptedProvider
from engine.model.types import ModelProvider
from engine.scheduler import ApsScheduler
from engine.testing import InMemoryEventLog
from engine.tools.base import Tool
from engine.tools.bash import BashLimits

SID = "s1"


@dataclass
class Agent:
    registry: AgentRegistry
    log: InMemoryEventLog
    channel: RecordingChannel
    model: ModelProvider
    workspace: Path

    async def events(self, sid: str = SID) -> list[SessionEvent]:
        return [e.event for e in await self.log.read(sid)]

    async def types(self, sid: str = SID) -> list[str]:
        return [e.type for e in await self.events(sid)]

    @property
    def scripted(self) -> ScriptedProvider:
        assert isinstance(self.model, ScriptedProvider)
        return self.model


def make_agent(
    workspace: Path,
    script: Sequence[ScriptStep] | ModelProvider,
    *,
    plan: PlanPort | None = None,
    goals: GoalPort | None = None,
    extra_tools: Sequence[Tool] = (),
    settings: AgentSettings | None = None,
    log: InMemoryEventLog | None = None,
) -> Agent:
    log = log or InMemoryEventLog()
    channel = RecordingChannel()
    model = script if not isinstance(script, Sequence) else ScriptedProvider(script)

    async def workspace_for(session_id: str) -> Path:
        return workspace

    registry = build_agent(
        log=log,
        model=model,
        channel=channel,
        workspace_for=workspace_for,
        plan=plan,
        goals=goals,
        extra_tools=extra_tools,
        settings=settings,
        bash_limits=BashLimits(kill_grace_s=0.5),
    )
    return Agent(registry, log, channel, model, workspace)


class DrivenTarget(RoundTarget, Protocol):
    """A round target that hears back from its driver, as the agent registry does."""

    def listen_idle(self, driver: IdleListener) -> None: ...


T = TypeVar("T", bound=DrivenTarget)


@dataclass
class Rounds(Generic[T]):
    log: InMemoryEventLog
    goals: GoalService
    target: T
    driver: RoundDriver
    sched: ApsScheduler


@asynccontextmanager
async def goal_rounds(
    target: Callable[[InMemoryEventLog, GoalService], T],
    *,
    log: InMemoryEventLog | None = None,
    paused: bool = False,
    hold: Callable[[str], Awaitable[bool]] | None = None,
) -> AsyncIterator[Rounds[T]]:
    """Goals over ``log``, the real scheduler (started, ``paused`` if asked) and a RoundDriver
    over ``target(log, goals)``; closed afterwards (an agent registry target is shut down).
    """
    log = log or InMemoryEventLog()
    goals = GoalService(log)
    the_target = target(log, goals)
    sched = ApsScheduler()
    sched.start(paused=paused)
    driver = RoundDriver(goals, the_target, sched, hold=hold)
    try:
        yield Rounds(log, goals, the_target, driver, sched)
    finally:
        await driver.close()
        if isinstance(the_target, AgentRegistry):
            await the_target.shutdown()
        sched.shutdown()
        await asyncio.sleep(0)
