"""Replay (docs/storage.md): a 10,000-event session folds cold to the projections it had live."""

from __future__ import annotations

import random
from pathlib import Path

from engine.events import (
    AssistantMessage,
    CommandRun,
    GoalRoundSource,
    PlanMode,
    SessionEvent,
    TodoItem,
    TodoWrite,
    ToolCall,
    ToolResult,
    TurnEnd,
    TurnStart,
    UserMessage,
)
from engine.projections import (
    SessionProjections,
    apply_session_event,
    fold_session,
    replay_projections,
)
from storage.db import Database
from storage.eventlog import SqliteEventLog
from tests.storage.helpers import cleared, goal

EVENTS = 10_000


def session_events(rng: random.Random) -> list[SessionEvent]:
    """Turns with messages and tools, interleaved with every event the projections read:
    plan commands and modes, goal revisions and clears, todo writes, goal rounds."""
    events: list[SessionEvent] = []
    goal_id, revision, turn = "g0", 0, 0
    while len(events) < EVENTS:
        turn += 1
        events.append(TurnStart(turn_id=f"t{turn}"))
        roll = rng.random()
        if roll < 0.2 and revision:
            source = GoalRoundSource(goal_id=goal_id, revision=revision, round=turn)
            events.append(UserMessage(text="next round", source=source))
        else:
            events.append(UserMessage(text=f"message {turn}"))
        for step in range(rng.randint(0, 3)):
            call = f"c{turn}.{step}"
            events.append(ToolCall(call_id=call, name="grep", arguments={"pattern": "x"}))
            events.append(
                ToolResult(call_id=call, name="grep", content="hit\n" * rng.randint(1, 9))
            )
            if rng.random() < 0.3:
                status = rng.choice(["pending", "in_progress", "completed"])
                todos = [
                    TodoItem(content=f"item {k}", status=status) for k in range(rng.randint(0, 4))
                ]
                events.append(TodoWrite(todos=todos))
        if rng.random() < 0.1:
            target = rng.random() < 0.5
            events.append(CommandRun(name="plan", actor="tg:1", data={"target": target}))
            if rng.random() < 0.5:
                events.append(PlanMode(active=target))
        if rng.random() < 0.08:
            if revision and rng.random() < 0.2:
                revision += 1
                events.append(cleared(revision, goal_id=goal_id))
                goal_id, revision = f"g{turn}", 0
            else:
                revision += 1
                phase = rng.choice(["active", "paused", "complete"])
                events.append(goal(revision, goal_id=goal_id, phase=phase))
        events.append(AssistantMessage(text="done"))
        events.append(TurnEnd(turn_id=f"t{turn}", outcome="completed"))
    return events[:EVENTS]


async def test_a_cold_fold_of_10000_events_matches_the_live_projections(tmp_path: Path) -> None:
    rng = random.Random(3)
    events = session_events(rng)
    path = tmp_path / "plangate.db"
    live = SessionProjections()
    async with await Database.open(path) as db:
        log = SqliteEventLog(db)
        first = 0
        while first < len(events):
            size = rng.randint(1, 12)
            for stored in await log.append("s1", events[first : first + size]):
                live = apply_session_event(live, stored.event)
            first += size
    # The run reached states worth comparing, not just the empty projection.
    assert live.goal is not None or live.todos is not None or live.plan_mode.active

    async with await Database.open(path) as db:
        stored_events = await SqliteEventLog(db).read("s1")
        # The filtered cold replay reads only the projections' types and folds to the same.
        replayed = await replay_projections(SqliteEventLog(db), "s1")
    assert [e.seq for e in stored_events] == list(range(1, EVENTS + 1))
    assert [e.event for e in stored_events] == events
    assert replayed == live
    assert fold_session(e.event for e in stored_events) == live
