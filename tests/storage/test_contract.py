"""One contract for engine.ports.EventLog and SessionStore, run against every implementation:
the in-memory fakes (engine.testing), SQLite (storage) and PostgreSQL (storage.postgres)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from engine.errors import AppendConflict
from engine.events import (
    AssistantMessage,
    CommandRun,
    FeedbackSource,
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
from engine.keys import Chat
from engine.ports import EventLog, SessionStore
from engine.recovery import INTERRUPTED_TOOL_TEXT, load_session_events
from engine.testing import InMemoryEventLog, InMemorySessionStore
from engine.usage.meter import UsageHistory
from storage.db import Database
from storage.eventlog import SqliteEventLog
from storage.postgres.eventlog import PgEventLog
from storage.postgres.sessions import PgSessionStore
from storage.sessions import SqliteSessionStore
from tests.keys import chat
from tests.pg import pg_cluster
from tests.storage.helpers import StepClock, cleared, goal, pg_store, says

__all__ = ["pg_cluster"]


@dataclass
class Stores:
    log: EventLog
    sessions: SessionStore
    clock: StepClock


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def stores(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Stores]:
    clock = StepClock()
    if request.param == "memory":
        log = InMemoryEventLog(clock=clock)
        yield Stores(log, InMemorySessionStore(log, clock=clock), clock)
        return
    if request.param == "postgres":
        async with pg_store(request) as pg:
            yield Stores(PgEventLog(pg, clock=clock), PgSessionStore(pg, clock=clock), clock)
        return
    db = await Database.open(tmp_path / "plangate.db")
    try:
        yield Stores(SqliteEventLog(db, clock=clock), SqliteSessionStore(db, clock=clock), clock)
    finally:
        await db.close()


def every_kind_of_event() -> list[SessionEvent]:
    return [
        TurnStart(turn_id="t1"),
        UserMessage(text='hi ✓ «quotes» "and" \\ back\nslash'),
        UserMessage(text="round", source=GoalRoundSource(goal_id="g1", revision=3, round=2)),
        UserMessage(text="seed", source=SeedSource(plan_id="p1")),
        UserMessage(text="more", source=FeedbackSource(user_id="tg:7", message_id="9")),
        AssistantMessage(text="ok"),
        ToolCall(
            call_id="c1", name="read_file", arguments={"path": "a.py", "nested": [1, {"x": None}]}
        ),
        ToolResult(call_id="c1", name="read_file", content="x = 1\n" * 50, is_error=False),
        CommandRun(name="plan", args="write it", actor="tg:42", data={"target": True}),
        PlanMode(active=True),
        PlanChanged(status="Editing", revision=2, plan_id="p1", reason="md changed"),
        goal(1),
        cleared(2),
        TodoWrite(
            todos=[
                TodoItem(content="a", status="in_progress"),
                TodoItem(content="b", status="pending"),
            ]
        ),
        TodoWrite(todos=[]),
        TurnEnd(turn_id="t1", outcome="completed", detail=""),
    ]


# --- EventLog ---------------------------------------------------------------------------------


async def test_append_numbers_events_densely_from_one(stores: Stores) -> None:
    first = await stores.log.append("s1", [says("a"), says("b"), says("c")])
    second = await stores.log.append("s1", [says("d"), says("e")])
    assert [e.seq for e in first + second] == [1, 2, 3, 4, 5]
    assert await stores.log.read("s1") == first + second


async def test_events_of_every_type_round_trip(stores: Stores) -> None:
    events = every_kind_of_event()
    await stores.log.append("s1", events)
    assert [stored.event for stored in await stores.log.read("s1")] == events


async def test_one_append_shares_one_clock_reading(stores: Stores) -> None:
    first = await stores.log.append("s1", [says("a"), says("b")])
    second = await stores.log.append("s1", [says("c")])
    assert {e.at for e in first} == {first[0].at}
    assert second[0].at > first[0].at
    assert [(e.seq, e.at) for e in await stores.log.read("s1")] == [
        (e.seq, e.at) for e in first + second
    ]


async def test_read_after_seq_returns_the_suffix(stores: Stores) -> None:
    await stores.log.append("s1", [says(str(i)) for i in range(6)])
    tail = await stores.log.read("s1", after_seq=4)
    assert [(e.seq, e.event) for e in tail] == [(5, says("4")), (6, says("5"))]
    assert await stores.log.read("s1", after_seq=6) == []


async def test_read_filters_by_type_and_keeps_seq_order(stores: Stores) -> None:
    events = every_kind_of_event()
    await stores.log.append("s1", events)
    await stores.log.append("s2", [PlanMode(active=False)])
    wanted = {"plan/mode", "tool/result", "user/message"}
    expected = [(i, e) for i, e in enumerate(events, start=1) if e.type in wanted]
    got = await stores.log.read("s1", types=wanted)
    assert [(e.seq, e.event) for e in got] == expected
    assert got == [e for e in await stores.log.read("s1") if e.event.type in wanted]
    # Any collection works, and it combines with after_seq.
    tail = await stores.log.read("s1", after_seq=expected[2][0], types=["user/message"])
    assert [e.seq for e in tail] == [s for s, e in expected[3:] if e.type == "user/message"]
    assert await stores.log.read("s1", types=frozenset({"todo/write"})) == [
        e for e in await stores.log.read("s1") if isinstance(e.event, TodoWrite)
    ]


async def test_a_read_filter_of_nothing_or_an_unknown_type_is_empty(stores: Stores) -> None:
    await stores.log.append("s1", every_kind_of_event())
    assert await stores.log.read("s1", types=()) == []
    assert await stores.log.read("s1", types={"no/such"}) == []
    assert await stores.log.read("nobody", types={"plan/mode"}) == []
    with pytest.raises(TypeError):
        # A bare string would be a set of characters; it is refused rather than matching none.
        await stores.log.read("s1", types="plan/mode")


async def test_sessions_have_their_own_sequences(stores: Stores) -> None:
    await stores.log.append("s1", [says("a"), says("b")])
    other = await stores.log.append("s2", [says("x")])
    assert other[0].seq == 1
    assert [e.session_id for e in await stores.log.read("s1")] == ["s1", "s1"]


async def test_unknown_session_and_empty_append(stores: Stores) -> None:
    assert await stores.log.read("nobody") == []
    assert await stores.log.append("s1", []) == []
    assert await stores.log.read("s1") == []


async def test_a_taken_goal_revision_conflicts_and_commits_nothing(stores: Stores) -> None:
    await stores.log.append("s1", [goal(1)])
    with pytest.raises(AppendConflict):
        await stores.log.append("s1", [says("before"), goal(1), says("after")])
    assert [e.event for e in await stores.log.read("s1")] == [goal(1)]
    # The log goes on densely after the refused append.
    nxt = await stores.log.append("s1", [goal(2)])
    assert nxt[0].seq == 2


async def test_the_same_revision_twice_in_one_append_conflicts(stores: Stores) -> None:
    with pytest.raises(AppendConflict):
        await stores.log.append("s1", [goal(1), says("x"), goal(1, phase="paused")])
    assert await stores.log.read("s1") == []


async def test_a_tombstone_takes_its_revision(stores: Stores) -> None:
    await stores.log.append("s1", [goal(1), cleared(2)])
    with pytest.raises(AppendConflict):
        await stores.log.append("s1", [goal(2)])
    # A different goal id, or the same ref in another session, is free.
    await stores.log.append("s1", [goal(2, goal_id="g2")])
    await stores.log.append("s2", [goal(1), goal(2)])


# --- SessionStore -----------------------------------------------------------------------------


async def test_created_sessions_are_uuid4_hex_and_found_again(stores: Stores) -> None:
    one = await stores.sessions.create_session(workspace="/w/a", profile="work")
    two = await stores.sessions.create_session(workspace="/w/b")
    assert re.fullmatch(r"[0-9a-f]{32}", one.id) and one.id[12] == "4"
    assert one.id != two.id
    assert (one.workspace, one.profile, one.parent_id) == ("/w/a", "work", None)
    assert one.created_at == pytest.approx(stores.clock.now - 1)
    assert await stores.sessions.get_session(one.id) == one
    assert await stores.sessions.get_session(two.id) == two
    assert await stores.sessions.get_session("0" * 32) is None


async def test_chat_keys_bind_and_rebind(stores: Stores) -> None:
    old = await stores.sessions.create_session(workspace="/w")
    new = await stores.sessions.create_session(workspace="/w")
    topic = await stores.sessions.create_session(workspace="/w")
    group, thread = chat(-100), chat(-100, 17)
    assert await stores.sessions.session_for_chat(group.key) is None
    await stores.sessions.bind_chat(group, old.id)
    await stores.sessions.bind_chat(thread, topic.id)
    assert await stores.sessions.session_for_chat(group.key) == old.id
    await stores.sessions.bind_chat(group, new.id)
    assert await stores.sessions.session_for_chat(group.key) == new.id
    assert await stores.sessions.session_for_chat(thread.key) == topic.id
    assert await stores.sessions.session_for_chat(chat(-101).key) is None
    bindings = {b.chat: b.session_id for b in await stores.sessions.chat_bindings()}
    # The kind and the thread's parent come back as they were bound.
    assert bindings == {
        Chat.group("tg:-100"): new.id,
        Chat.thread("tg:-100/17", "tg:-100"): topic.id,
    }
    private = await stores.sessions.create_session(workspace="/w")
    await stores.sessions.bind_chat(chat(55), private.id)
    kinds = {b.chat.key: b.chat.kind for b in await stores.sessions.chat_bindings()}
    assert kinds == {"tg:-100": "group", "tg:-100/17": "thread", "tg:55": "private"}


async def test_fork_copies_the_whole_log(stores: Stores) -> None:
    parent = await stores.sessions.create_session(workspace="/w", profile="p")
    events = every_kind_of_event()
    await stores.log.append(parent.id, events)
    child = await stores.sessions.fork(parent.id)
    assert (child.parent_id, child.workspace, child.profile) == (parent.id, "/w", "p")
    assert child.id != parent.id
    assert await stores.sessions.get_session(child.id) == child
    copied = await stores.log.read(child.id)
    assert [(e.seq, e.event) for e in copied] == list(enumerate(events, start=1))
    assert {e.session_id for e in copied} == {child.id}
    # Each copy keeps its event's time: a fork is no newer than what it copied.
    assert [e.at for e in copied] == [e.at for e in await stores.log.read(parent.id)]


async def test_fork_copies_a_prefix_and_the_two_logs_part(stores: Stores) -> None:
    parent = await stores.sessions.create_session(workspace="/w")
    await stores.log.append(parent.id, [says("1"), goal(1), says("3"), goal(2), says("5")])
    child = await stores.sessions.fork(parent.id, upto_seq=3)
    assert [e.event for e in await stores.log.read(child.id)] == [says("1"), goal(1), says("3")]
    # Revision 1 came with the prefix; revision 2 did not, so it is free in the child.
    with pytest.raises(AppendConflict):
        await stores.log.append(child.id, [goal(1)])
    added = await stores.log.append(child.id, [goal(2, phase="paused")])
    assert added[0].seq == 4
    assert (await stores.log.read(parent.id))[3].event == goal(2)
    assert len(await stores.log.read(parent.id)) == 5


async def test_fork_at_zero_is_empty_and_unknown_parent_fails(stores: Stores) -> None:
    parent = await stores.sessions.create_session(workspace="/w")
    await stores.log.append(parent.id, [says("a")])
    empty = await stores.sessions.fork(parent.id, upto_seq=0)
    assert await stores.log.read(empty.id) == []
    with pytest.raises(KeyError):
        await stores.sessions.fork("f" * 32)


# --- loading ----------------------------------------------------------------------------------


async def test_loading_closes_a_turn_a_dead_process_left_open(stores: Stores) -> None:
    await stores.log.append(
        "s1",
        [
            TurnStart(turn_id="t1"),
            says("go"),
            ToolCall(call_id="c1", name="bash", arguments={"command": "make"}),
            ToolCall(call_id="c2", name="read_file", arguments={"path": "x"}),
            ToolResult(call_id="c2", name="read_file", content="x"),
        ],
    )
    loaded = await load_session_events(stores.log, "s1")
    assert [e.seq for e in loaded] == [1, 2, 3, 4, 5, 6, 7]
    assert loaded[5].event == ToolResult(
        call_id="c1", name="bash", content=INTERRUPTED_TOOL_TEXT, is_error=True, interrupted=True
    )
    assert loaded[6].event == TurnEnd(turn_id="t1", outcome="interrupted")
    assert await stores.log.read("s1") == loaded
    # Loading again finds nothing open and appends nothing.
    assert await load_session_events(stores.log, "s1") == loaded


async def test_loading_a_closed_log_appends_nothing(stores: Stores) -> None:
    events = [TurnStart(turn_id="t1"), says("hi"), TurnEnd(turn_id="t1", outcome="completed")]
    await stores.log.append("s1", events)
    loaded = await load_session_events(stores.log, "s1")
    assert [e.event for e in loaded] == events
    assert await load_session_events(stores.log, "empty") == []


async def test_needs_attention_names_open_turns_live_goals_and_undecided_commands(
    stores: Stores,
) -> None:
    log = stores.log
    await log.append("idle", [TurnStart(turn_id="t"), TurnEnd(turn_id="t", outcome="completed")])
    await log.append("open", [TurnStart(turn_id="t"), says("hi")])
    await log.append("open", [says("no turn mark: still open")])
    await log.append("goal", [goal(1)])
    await log.append("done", [goal(1)])
    await log.append("done", [goal(2, phase="complete")])
    await log.append("cleared", [goal(1), cleared(2)])
    await log.append("plan", [CommandRun(name="plan", data={"target": True})])
    await log.append("planned", [CommandRun(name="plan"), PlanMode(active=True)])
    await log.append("approved", [CommandRun(name="approve", data={"revision": 1})])
    await log.append("taken-back", [CommandRun(name="approve"), CommandRun(name="discard")])
    await log.append("status", [CommandRun(name="status")])
    # A conflicting append commits nothing, its marks included.
    await log.append("conflict", [goal(1, phase="complete")])
    with pytest.raises(AppendConflict):
        await log.append("conflict", [TurnStart(turn_id="t"), goal(1)])
    assert await log.needs_attention() == ["approved", "goal", "open", "plan"]
    await log.append("open", [TurnEnd(turn_id="t", outcome="interrupted")])
    await log.append("goal", [goal(2, phase="paused")])
    assert await log.needs_attention() == ["approved", "plan"]


async def test_last_command_is_the_newest_of_its_name_in_any_session(stores: Stores) -> None:
    log = stores.log
    assert isinstance(log, UsageHistory)
    assert await log.last_command("usage_cap") is None
    await log.append("s1", [CommandRun(name="usage_cap", data={"cap": 1})])
    newest = await log.append("s2", [says("x"), CommandRun(name="usage_cap", data={"cap": 2})])
    # Other names do not count, nor the name anywhere but the command's own field.
    await log.append("s1", [CommandRun(name="usage", args="cap 9", data={"cap": 9})])
    await log.append("s3", [CommandRun(name="note", data={"name": "usage_cap", "cap": 8})])
    await log.append("s3", [says("usage_cap"), PlanMode(active=True)])
    assert await log.last_command("usage_cap") == newest[1]
    assert await log.last_command("nothing") is None
    # The greatest clock reading wins, not the last append: a clock set back is older.
    stores.clock.now -= 100
    await log.append("s4", [CommandRun(name="usage_cap", data={"cap": 3})])
    assert await log.last_command("usage_cap") == newest[1]
    # Two in one append share a reading: the later one wins.
    stores.clock.now += 200
    both = await log.append(
        "s1",
        [
            CommandRun(name="usage_cap", data={"cap": 4}),
            CommandRun(name="usage_cap", data={"cap": 5}),
        ],
    )
    assert await log.last_command("usage_cap") == both[1]
    usage = await log.last_command("usage")
    assert usage is not None and usage.session_id == "s1" and usage.seq == 2
