"""An agent wired to in-memory fakes: the log, a scripted model and a recording channel."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.agent.build import build_agent
from engine.agent.config import AgentSettings
from engine.agent.controller import AgentRegistry
from engine.agent.ports import GoalPort, PlanPort
from engine.agent.testing import RecordingChannel
from engine.events import SessionEvent
from engine.model.script import ScriptStep
from engine.model.scripted import ScriptedProvider
from engine.model.types import ModelProvider
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
