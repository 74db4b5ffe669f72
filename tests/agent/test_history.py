"""The context's incremental build: a step reads and converts only the events logged since the
step before, and the messages equal the whole-log builder's."""

from __future__ import annotations

import random
from collections.abc import Collection
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.agent.context import TurnSplitter, assemble_messages, build_messages, split_turns
from engine.agent.history import SessionHistory
from engine.agent.settings import AgentSettings
from engine.events import (
    AssistantMessage,
    CommandRun,
    FeedbackSource,
    GoalRoundSource,
    PlanMode,
    SeedSource,
    SessionEvent,
    StoredEvent,
    TodoItem,
    TodoWrite,
    ToolCall,
    ToolResult,
    TurnEnd,
    TurnStart,
    UserMessage,
)
from engine.model.script import call, say
from engine.projections import fold_session
from engine.testing import InMemoryEventLog
from tests.agent import context_reference as reference
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
    agent.registry.submit(SID, "write a", message_id="1")
    await agent.registry.wait_idle(SID)
    # Step 1 reads turn/start + user/message; step 2 only assistant + tool/call + tool/result.
    assert log.reads == [(0, 2), (2, 3)]
    log.reads.clear()
    agent.registry.submit(SID, "again", message_id="2")
    await agent.registry.wait_idle(SID)
    # The next turn's first step: the last turn's reply and end, this turn's start and message.
    assert log.reads == [(5, 4)]
    # And the model saw the same history a whole read would give.
    roles = [m["role"] for m in agent.scripted.last_messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user"]


def event_pool() -> list[SessionEvent]:
    """Every shape the splitter treats differently: calls with and without results, orphan
    results, empty answers, early turn ends, messages of every source, events no turn owns."""
    return [
        TurnStart(turn_id="t"),
        TurnEnd(turn_id="t", outcome="completed"),
        TurnEnd(turn_id="t", outcome="interrupted"),
        UserMessage(text="hi"),
        UserMessage(text="fb", source=FeedbackSource(user_id="tg:1")),
        UserMessage(text="seed", source=SeedSource()),
        UserMessage(text="round", source=GoalRoundSource(goal_id="g", revision=1, round=1)),
        AssistantMessage(text=""),
        AssistantMessage(text="ok " * 30),
        ToolCall(call_id="a", name="grep", arguments={"p": "x"}),
        ToolCall(call_id="b", name="bash", arguments={"c": "ls"}),
        ToolResult(call_id="a", name="grep", content="hit\n" * 40),
        ToolResult(call_id="b", name="bash", content="y" * 300),
        ToolResult(call_id="z", name="bash", content="orphan"),
        CommandRun(name="plan", data={"target": True}),
        PlanMode(active=True),
        TodoWrite(todos=[TodoItem(content="a", status="pending")]),
    ]


POOL = event_pool()


@settings(max_examples=120, deadline=None)
@given(
    st.lists(st.lists(st.sampled_from(range(len(POOL))), max_size=12), max_size=12),
    st.sampled_from([60, 400, 120_000]),
    st.sampled_from([50, 150, 8_000]),
    st.sampled_from([20, 16_000]),
)
def test_incremental_messages_equal_the_old_whole_log_builder(
    chunks: list[list[int]], budget: int, summary: int, cap: int
) -> None:
    config = AgentSettings(
        context_budget_chars=budget, summary_budget_chars=summary, tool_result_cap_chars=cap
    )
    splitter = TurnSplitter(result_cap=cap)
    seen: list[SessionEvent] = []
    for chunk in chunks:
        events = [POOL[i] for i in chunk]
        splitter.feed(events)
        seen += events
        expected = reference.build_messages(seen, system_prompt="SYS", settings=config)
        assert assemble_messages(splitter.turns(), system_prompt="SYS", settings=config) == expected
        # Assembling (eliding, fixing up) changed nothing the next step builds on.
        assert assemble_messages(splitter.turns(), system_prompt="SYS", settings=config) == expected
        assert build_messages(seen, system_prompt="SYS", settings=config) == expected


async def test_the_history_equals_a_whole_read_and_fold_at_every_point() -> None:
    rng = random.Random(5)
    log = InMemoryEventLog()
    history = SessionHistory()
    for _ in range(60):
        for session in ("s1", "s2"):
            if rng.random() < 0.7:
                await log.append(session, rng.choices(POOL, k=rng.randint(1, 4)))
            turns, projections = await history.read(log, session, result_cap=50)
            whole = [stored.event for stored in await log.read(session)]
            assert turns == split_turns(whole, result_cap=50)
            assert projections == fold_session(whole)


async def test_an_evicted_or_foreign_session_is_read_whole_again() -> None:
    log = CountingLog()
    history = SessionHistory(max_sessions=1)
    await log.append("s1", [UserMessage(text="a")])
    await log.append("s2", [UserMessage(text="b")])
    await history.read(log, "s1", result_cap=100)
    await history.read(log, "s2", result_cap=100)  # evicts s1
    log.reads.clear()
    turns, _ = await history.read(log, "s1", result_cap=100)
    assert log.reads == [(0, 1)] and [t.user_text for t in turns] == ["a"]
    await history.read(log, "s1", result_cap=100)
    assert log.reads == [(0, 1), (1, 0)]
    # Another log than the one the cache was built from is read whole, not appended to the
    # stale turns; so is the same log with another result cap.
    other = InMemoryEventLog()
    await other.append("s1", [UserMessage(text=str(i)) for i in range(3)])
    turns, _ = await history.read(other, "s1", result_cap=100)
    assert [t.user_text for t in turns] == ["0"]  # one turn: messages outside turns share it
    assert len(turns[0].messages) == 3
    log.reads.clear()
    await history.read(log, "s1", result_cap=100)
    await history.read(log, "s1", result_cap=5)
    history.forget("s1")
    await history.read(log, "s1", result_cap=5)
    assert log.reads == [(0, 1), (0, 1), (0, 1)]
