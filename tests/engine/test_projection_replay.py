"""The filtered cold replay (``replay_projections``) folds to what the whole log folds to."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.events import (
    AssistantMessage,
    CommandRun,
    FeedbackSource,
    GoalChange,
    GoalRoundSource,
    PlanChanged,
    PlanMode,
    SeedSource,
    SessionEvent,
    TodoItem,
    TodoWrite,
    ToolCall,
    ToolResult,
    TurnEnd,
    TurnStart,
    UserMessage,
)
from engine.goal.types import GoalSnapshot, GoalTombstone
from engine.projections import (
    PROJECTION_EVENT_TYPES,
    SessionProjections,
    fold_session,
    replay_projections,
)
from engine.testing import InMemoryEventLog

KINDS = (
    "turn",
    "end",
    "user",
    "goal_round",
    "seed",
    "feedback",
    "assistant",
    "tool",
    "command",
    "plan_command",
    "plan_mode",
    "plan_changed",
    "goal",
    "clear",
    "todo",
)

# (kind, a small number that picks goal ids, targets, statuses)
steps = st.lists(st.tuples(st.sampled_from(KINDS), st.integers(0, 3)), max_size=80)


def build_log(plan: list[tuple[str, int]]) -> list[SessionEvent]:
    """Events from a generated plan. Goal revisions count up per goal (the log refuses a
    revision twice), goal ids come from a pool of three so rounds and clears hit or miss."""
    revisions: dict[str, int] = {}
    events: list[SessionEvent] = []
    for k, (kind, n) in enumerate(plan):
        goal_id = f"g{n % 3}"
        if kind == "turn":
            events.append(TurnStart(turn_id=f"t{k}"))
        elif kind == "end":
            events.append(TurnEnd(turn_id=f"t{k}", outcome="completed"))
        elif kind == "user":
            events.append(UserMessage(text=f"message {k}"))
        elif kind == "goal_round":
            source = GoalRoundSource(goal_id=goal_id, revision=revisions.get(goal_id, 0), round=k)
            events.append(UserMessage(text="next round", source=source))
        elif kind == "seed":
            events.append(UserMessage(text="go", source=SeedSource(plan_id="p1")))
        elif kind == "feedback":
            events.append(UserMessage(text="more", source=FeedbackSource(user_id=n)))
        elif kind == "assistant":
            events.append(AssistantMessage(text="ok " * n))
        elif kind == "tool":
            events.append(ToolCall(call_id=f"c{k}", name="grep", arguments={"n": n}))
            events.append(ToolResult(call_id=f"c{k}", name="grep", content="hit\n" * n))
        elif kind == "command":
            events.append(CommandRun(name="status", actor="tg:1", data={"target": n % 2 == 0}))
        elif kind == "plan_command":
            data: dict[str, object] = {"target": n % 2 == 0} if n < 3 else {}
            events.append(CommandRun(name="plan", actor="tg:1", data=data))
        elif kind == "plan_mode":
            events.append(PlanMode(active=n % 2 == 0))
        elif kind == "plan_changed":
            events.append(PlanChanged(status="Editing", revision=n))
        elif kind in ("goal", "clear"):
            revision = revisions[goal_id] = revisions.get(goal_id, 0) + 1
            if kind == "clear":
                events.append(GoalChange(tombstone=GoalTombstone(id=goal_id, revision=revision)))
            else:
                snapshot = GoalSnapshot.model_validate(
                    {
                        "id": goal_id,
                        "revision": revision,
                        "objective": "make the suite pass",
                        "phase": ("active", "paused", "complete")[n % 3],
                        "max_goal_rounds": 20,
                        "rounds_started": n,
                    }
                )
                events.append(GoalChange(snapshot=snapshot))
        else:
            statuses = ("pending", "in_progress", "completed")
            todos = [TodoItem(content=f"item {i}", status=statuses[i % 3]) for i in range(n)]
            events.append(TodoWrite(todos=todos))
    return events


async def _replay(events: list[SessionEvent]) -> tuple[SessionProjections, SessionProjections]:
    log = InMemoryEventLog()
    # Random-sized appends would not change the fold; one per event keeps the seqs obvious.
    for event in events:
        await log.append("s1", [event])
    full = fold_session(stored.event for stored in await log.read("s1"))
    return full, await replay_projections(log, "s1")


@settings(max_examples=150, deadline=None)
@given(steps)
def test_the_filtered_replay_folds_to_the_full_fold(plan: list[tuple[str, int]]) -> None:
    events = build_log(plan)
    full, filtered = asyncio.run(_replay(events))
    assert filtered == full
    # And no event outside the set moves any fold: dropping them all changes nothing.
    assert fold_session(e for e in events if e.type in PROJECTION_EVENT_TYPES) == full


def test_every_type_in_the_set_is_read_by_some_fold() -> None:
    """Dropping any one of the types changes the fold of a log made to need it (so the set is
    not merely a superset that happens to pass)."""
    snapshot = GoalSnapshot.model_validate(
        {
            "id": "g1",
            "revision": 1,
            "objective": "o",
            "phase": "active",
            "max_goal_rounds": 20,
        }
    )
    logs: dict[str, list[SessionEvent]] = {
        "plan/mode": [PlanMode(active=True)],
        "command/run": [CommandRun(name="plan", data={"target": True})],
        "goal/change": [GoalChange(snapshot=snapshot)],
        "user/message": [
            GoalChange(snapshot=snapshot),
            UserMessage(text="r", source=GoalRoundSource(goal_id="g1", revision=1, round=1)),
        ],
        "todo/write": [TodoWrite(todos=[TodoItem(content="a", status="pending")])],
        "turn/start": [TodoWrite(todos=[]), TurnStart(turn_id="t")],
    }
    assert set(logs) == PROJECTION_EVENT_TYPES
    for type_, events in logs.items():
        assert fold_session(e for e in events if e.type != type_) != fold_session(events), type_
