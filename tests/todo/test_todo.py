"""todo_write validation, the parallel policy, and the projection's lifetimes."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.events import HumanSource, SessionEvent, TodoItem, TodoWrite, TurnEnd, TurnStart
from engine.projections import fold_session
from engine.testing import InMemoryEventLog
from engine.todo.fold import fold_todos, normalize_todos, summarize
from engine.todo.tool import TodoWriteTool
from engine.tools.base import ToolContext
from engine.tools.runtime import ToolCallRequest, ToolRuntime

SID = "s1"


def ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(session_id=SID, workspace=tmp_path, turn_id="t1", source=HumanSource())


def items(*pairs: tuple[str, str]) -> list[TodoItem]:
    return [TodoItem.model_validate({"content": c, "status": s}) for c, s in pairs]


def test_projection_null_before_first_write() -> None:
    assert fold_todos([]) is None
    assert fold_todos([TurnStart(turn_id="t1"), TurnEnd(turn_id="t1", outcome="completed")]) is None


def test_projection_replaced_kept_at_turn_end_cleared_at_turn_start() -> None:
    a = items(("one", "pending"))
    b = items(("one", "completed"), ("two", "in_progress"))
    events: list[SessionEvent] = [
        TurnStart(turn_id="t1"),
        TodoWrite(todos=a),
        TodoWrite(todos=b),
    ]
    assert fold_todos(events) == tuple(b)  # whole value replaced
    events.append(TurnEnd(turn_id="t1", outcome="completed"))
    assert fold_todos(events) == tuple(b)  # still standing after the turn ends
    events.append(TurnStart(turn_id="t2"))
    assert fold_todos(events) is None  # the next turn clears it
    assert fold_session(events).todos is None
    events.append(TodoWrite(todos=[]))
    assert fold_todos(events) == ()  # an explicit empty list is not null


def test_replay_does_not_reapply_active_count_policy() -> None:
    many = items(("a", "in_progress"), ("b", "in_progress"))
    # Written under a permissive deployment; the strict validator would reject it now...
    _, problems = normalize_todos([i.model_dump() for i in many], allow_parallel_in_progress=False)
    assert problems
    # ...but the log still replays.
    assert fold_todos([TodoWrite(todos=many)]) == tuple(many)


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ("nope", "must be a list"),
        ([{"content": "  ", "status": "pending"}], "content"),
        ([{"content": "x", "status": "done"}], "status"),
        ([{"content": "x", "status": "pending", "id": 1}], "unexpected"),
        (["x"], "must be an object"),
        ([{"status": "pending"}], "content"),
    ],
)
def test_invalid_items_rejected(raw: object, fragment: str) -> None:
    got, problems = normalize_todos(raw, allow_parallel_in_progress=True)
    assert got == []
    assert any(fragment in p for p in problems)


def test_content_is_stripped_and_empty_list_valid() -> None:
    got, problems = normalize_todos(
        [{"content": "  write tests \n", "status": "in_progress"}], allow_parallel_in_progress=True
    )
    assert problems == [] and got == items(("write tests", "in_progress"))
    assert normalize_todos([], allow_parallel_in_progress=False) == ([], [])


@pytest.mark.parametrize("parallel", [True, False])
async def test_policy_shapes_description_and_validation(tmp_path: Path, parallel: bool) -> None:
    log = InMemoryEventLog()
    tool = TodoWriteTool(log, allow_parallel_in_progress=parallel)
    if parallel:
        assert "Several items may be in_progress" in tool.description
    else:
        assert "At most one item may be in_progress" in tool.description
    two_active = {
        "todos": [
            {"content": "a", "status": "in_progress"},
            {"content": "b", "status": "in_progress"},
        ]
    }
    outcome = await tool.run(two_active, ctx(tmp_path))
    assert outcome.is_error is (not parallel)
    written = [e.event for e in await log.read(SID) if isinstance(e.event, TodoWrite)]
    assert len(written) == (1 if parallel else 0)


async def test_two_writes_in_one_batch_apply_in_order(tmp_path: Path) -> None:
    log = InMemoryEventLog()
    runtime = ToolRuntime([TodoWriteTool(log)])
    first = {"todos": [{"content": "a", "status": "pending"}]}
    second = {
        "todos": [{"content": "a", "status": "completed"}, {"content": "b", "status": "pending"}]
    }
    outcomes = await runtime.run_batch(
        [
            ToolCallRequest(call_id="1", name="todo_write", arguments=first),
            ToolCallRequest(call_id="2", name="todo_write", arguments=second),
        ],
        ctx(tmp_path),
    )
    assert [o.is_error for o in outcomes] == [False, False]
    assert "1/2 completed" in outcomes[1].content
    state = fold_todos(e.event for e in await log.read(SID))
    assert state == tuple(items(("a", "completed"), ("b", "pending")))
    assert not runtime.is_parallel(ToolCallRequest(call_id="3", name="todo_write", arguments=first))


async def test_schema_rejects_bad_shape_through_runtime(tmp_path: Path) -> None:
    log = InMemoryEventLog()
    runtime = ToolRuntime([TodoWriteTool(log)])
    outcomes = await runtime.run_batch(
        [ToolCallRequest(call_id="1", name="todo_write", arguments={"todos": [{"content": 3}]})],
        ctx(tmp_path),
    )
    assert outcomes[0].is_error and "invalid arguments" in outcomes[0].content
    assert await log.read(SID) == []


def test_summarize() -> None:
    text = summarize(items(("a", "completed"), ("b", "in_progress"), ("c", "in_progress")))
    assert text == "1/3 completed; in progress: b (+1 more)"
