"""The context's incremental read: a step reads only the events logged since the step before."""

from __future__ import annotations

import random
from collections.abc import Collection
from pathlib import Path

from engine.agent.history import SessionHistory
from engine.events import (
    AssistantMessage,
    CommandRun,
    PlanMode,
    StoredEvent,
    TodoItem,
    TodoWrite,
    ToolCall,
    ToolResult,
    TurnStart,
    UserMessage,
)
from engine.model.script import call, say
from engine.projections import fold_session
from engine.testing import InMemoryEventLog
from tests.agent.harness import SID, make_agent


class CountingLog(InMemoryEventLog):
    """The in-memory log, recording each read as ``(after_seq, number of events returned)``."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[tuple[int, int]] = []

    async def read(
        self, session_id: str, *, after_seq: int = 0, types: Collection[str] | None = None
    ) -> list[StoredEvent]:
        out = await super().read(session_id, after_seq=after_seq, types=types)
        self.reads.append((after_seq, len(out)))
        return out


async def test_each_step_reads_only_the_events_since_the_step_before(tmp_path: Path) -> None:
    log = CountingLog()
    agent = make_agent(
        tmp_path,
        [
            call("write_file", {"path": "a.txt", "content": "abc"}),
            say("Wrote it.", expect="wrote 3 characters"),
            say("Again.", expect="again"),
        ],
        log=log,
    )
    agent.registry.submit(SID, "write a", message_id=1)
    await agent.registry.wait_idle(SID)
    # Step 1 reads turn/start + user/message; step 2 only assistant + tool/call + tool/result.
    assert log.reads == [(0, 2), (2, 3)]
    log.reads.clear()
    agent.registry.submit(SID, "again", message_id=2)
    await agent.registry.wait_idle(SID)
    # The next turn's first step: the last turn's reply and end, this turn's start and message.
    assert log.reads == [(5, 4)]
    # And the model saw the same history a whole read would give.
    roles = [m["role"] for m in agent.scripted.last_messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user"]


async def test_the_history_equals_a_whole_read_and_fold_at_every_point() -> None:
    rng = random.Random(5)
    log = InMemoryEventLog()
    history = SessionHistory()
    pool = [
        TurnStart(turn_id="t"),
        UserMessage(text="hi"),
        AssistantMessage(text="ok"),
        ToolCall(call_id="c", name="grep"),
        ToolResult(call_id="c", name="grep", content="x"),
        CommandRun(name="plan", data={"target": True}),
        PlanMode(active=True),
        TodoWrite(todos=[TodoItem(content="a", status="pending")]),
    ]
    for _ in range(60):
        for session in ("s1", "s2"):
            if rng.random() < 0.7:
                await log.append(session, rng.choices(pool, k=rng.randint(1, 4)))
            events, projections = await history.read(log, session)
            whole = [stored.event for stored in await log.read(session)]
            assert list(events) == whole
            assert projections == fold_session(whole)


async def test_an_evicted_or_foreign_session_is_read_whole_again() -> None:
    log = CountingLog()
    history = SessionHistory(max_sessions=1)
    await log.append("s1", [UserMessage(text="a")])
    await log.append("s2", [UserMessage(text="b")])
    await history.read(log, "s1")
    await history.read(log, "s2")  # evicts s1
    log.reads.clear()
    events, _ = await history.read(log, "s1")
    assert log.reads == [(0, 1)] and list(events) == [UserMessage(text="a")]
    # Another log than the one the cache was built from is read whole, not appended to the
    # stale events.
    other = InMemoryEventLog()
    await other.append("s1", [UserMessage(text=str(i)) for i in range(3)])
    events, _ = await history.read(other, "s1")
    assert list(events) == [UserMessage(text=str(i)) for i in range(3)]
    history.forget("s1")
    log.reads.clear()
    await history.read(log, "s1")
    assert log.reads == [(0, 1)]
