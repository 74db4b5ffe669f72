"""Builders for end-to-end engine tests: a real home, workspace and SQLite file."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from bot.compose import open_plangate
from engine.agent.testing import RecordingChannel
from engine.app import Engine, EngineConfig
from engine.events import SessionEvent, StoredEvent
from engine.model.script import call, say
from engine.model.types import ModelProvider
from engine.ports import Clock, EventLog
from engine.progress.stuck import StuckLimits
from engine.usage.meter import UsageConfig
from storage.open import Storage
from tests.keys import person

PLAN_MD = """# Greeting module

## Context
- **Problem:** The project cannot greet anyone.
- **Target state:** `greet.hello(name)` returns a greeting and a test checks it.
- **Intent:** The owner asked for it.

## Implementation steps
1. Module — write greet.py with hello(name).
   - Done when: hello("x") returns "Hello, x!"
2. Test — write test_greet.py and run it.
"""

PLANNING = [
    call("plan", {"op": "init", "title": "Greeting module", "mode": "design"}),
    call("write_file", {"path": "{plan_md}", "content": PLAN_MD}, expect="Design plan created"),
    call("plan", {"op": "submit"}),
    say("The plan is ready for review."),
]

GREET_PY = 'def hello(name):\n    return f"Hello, {name}!"\n'
TEST_PY = 'import greet\n\nassert greet.hello("x") == "Hello, x!"\nprint("ok")\n'

# The rule that lets the scripted checklist run its test without asking.
ALLOW_TEST_RUN: tuple[tuple[str, ...], ...] = (("python3", "test_greet.py"),)

EXECUTION = [
    call("plan", {"op": "start"}),
    call("write_file", {"path": "greet.py", "content": GREET_PY}),
    call("plan", {"op": "complete", "evidence": "greet.py written"}),
    call("plan", {"op": "start"}),
    call("write_file", {"path": "test_greet.py", "content": TEST_PY}),
    call("bash", {"command": "python3 test_greet.py"}),
    call("plan", {"op": "complete", "evidence": "test_greet.py prints ok"}, expect="ok"),
    say("All done: greet.py and its test."),
]


@dataclass
class Rig:
    engine: Engine
    channel: RecordingChannel
    storage: Storage
    workspace: Path
    home: Path


# A context variable the tests set, to see which context an append ran in.
PROBE: contextvars.ContextVar[str] = contextvars.ContextVar("plangate_test_probe", default="")


class FaultyLog:
    """The real event log, with faults switched on by the test: every append fails as on a
    full disk (``full``), or reads of one session fail as on a locked database
    (``locked``). ``reads`` records which sessions were read, in order; ``appends`` each
    append's event types, ``contexts`` the value of ``PROBE`` each append ran with."""

    def __init__(self, inner: EventLog) -> None:
        self.inner = inner
        self.full = False
        self.locked: str | None = None
        self.reads: list[str] = []
        self.appends: list[list[str]] = []
        self.contexts: list[str] = []

    async def append(self, session_id: str, events: Sequence[SessionEvent]) -> list[StoredEvent]:
        self.appends.append([event.type for event in events])
        self.contexts.append(PROBE.get())
        if self.full:
            raise OSError("database or disk is full")
        return await self.inner.append(session_id, events)

    async def read(
        self, session_id: str, *, after_seq: int = 0, types: Collection[str] | None = None
    ) -> list[StoredEvent]:
        self.reads.append(session_id)
        if session_id == self.locked:
            raise OSError("database is locked")
        return await self.inner.read(session_id, after_seq=after_seq, types=types)

    async def needs_attention(self) -> list[str]:
        return await self.inner.needs_attention()


@asynccontextmanager
async def faulty_rig(
    tmp_path: Path, model: ModelProvider, *, start: bool = True
) -> AsyncIterator[tuple[Rig, FaultyLog]]:
    """:func:`engine_rig` whose engine talks to a :class:`FaultyLog` over the real log;
    ``start=False`` leaves start-up to the test."""
    made: list[FaultyLog] = []

    def wrap(inner: EventLog) -> EventLog:
        made.append(FaultyLog(inner))
        return made[-1]

    async with engine_rig(tmp_path, model, wrap_log=wrap, start=start) as rig:
        yield rig, made[-1]


@asynccontextmanager
async def engine_rig(
    tmp_path: Path,
    model: ModelProvider,
    *,
    max_goal_rounds: int = 20,
    usage: UsageConfig | None = None,
    goal_idle_rounds: int = 3,
    clock: Clock | None = None,
    stuck: StuckLimits | None = None,
    max_steps: int = 50,
    allow_bash: tuple[tuple[str, ...], ...] = ALLOW_TEST_RUN,
    approval_timeout_s: float = 600.0,
    wrap_log: Callable[[EventLog], EventLog] | None = None,
    start: bool = True,
    owner_ids: frozenset[int] | None = None,
    plan_approvals: int = 1,
    owner_overrides: bool = False,
    database_url: str | None = None,
    replica: str | None = None,
) -> AsyncIterator[Rig]:
    """An engine over real files and SQLite in ``tmp_path``; shut down afterwards.

    ``clock`` (for the log's timestamps and the engine) pins the usage day in tests.
    ``allow_bash`` defaults to the one command the scripted checklist runs (it runs
    unattended, so it would be denied without a rule). ``database_url`` and ``replica``: a
    replica among several on one PostgreSQL (two rigs on one ``tmp_path`` share the home).
    """
    home = tmp_path / "home"
    workspace = tmp_path / "work"
    workspace.mkdir(exist_ok=True)
    channel = RecordingChannel()
    config = EngineConfig(
        workspace=workspace,
        max_goal_rounds=max_goal_rounds,
        usage=usage or UsageConfig(),
        goal_idle_rounds=goal_idle_rounds,
        stuck=stuck or StuckLimits(),
        max_steps=max_steps,
        allow_bash=allow_bash,
        approval_timeout_s=approval_timeout_s,
        owner_ids=owner_ids,
        plan_approvals=plan_approvals,
        owner_overrides=owner_overrides,
    )
    async with open_plangate(
        home,
        model=model,
        channel=channel,
        config=config,
        clock=clock,
        wrap_log=wrap_log,
        database_url=database_url,
        replica=replica,
    ) as opened:
        engine = opened.engine
        if start:
            await engine.start()
        try:
            yield Rig(engine, channel, opened.storage, workspace, home)
        finally:
            await engine.shutdown()


async def settle(engine: Engine, session_id: str, *, timeout_s: float = 30.0) -> None:
    """Wait (bounded) until the session's agent has nothing running or queued."""

    async def idle() -> None:
        while not engine.agents.is_idle(session_id):
            await engine.agents.wait_idle(session_id)
            await asyncio.sleep(0)

    await asyncio.wait_for(idle(), timeout_s)


OWNER = person(7)


async def post_init(rig: Rig, sid: str, md: str = PLAN_MD) -> None:
    """Take the session to post-init Editing with ``md`` as the plan text, as the agent would."""
    plans = rig.engine.plans
    assert (await plans.enter_pre_init(sid)).ok
    assert (await plans.init(sid, title="Greeting", mode="design", workspace=rig.workspace)).ok
    path = await plans.md_path(sid)
    path.write_text(md, encoding="utf-8")
    assert (await plans.md_written(sid)).ok
