"""Differential: any sequence of appends (goal claims included) and forks gives the same results
and the same logs on SQLite as on the in-memory fake."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import AppendConflict
from engine.events import SessionEvent, StoredEvent
from engine.ports import EventLog, SessionStore
from engine.testing import InMemoryEventLog, InMemorySessionStore
from storage.db import Database
from storage.eventlog import SqliteEventLog
from storage.sessions import SqliteSessionStore
from tests.storage.helpers import StepClock, cleared, goal, says

event = st.one_of(
    st.text(max_size=8).map(says),
    st.builds(lambda r, g: goal(r, goal_id=g), st.integers(1, 4), st.sampled_from(["g1", "g2"])),
    st.builds(lambda r: cleared(r), st.integers(1, 4)),
)
# ("append", session index, events) or ("fork", session index, upto_seq or None)
operation = st.one_of(
    st.tuples(st.just("append"), st.integers(0, 3), st.lists(event, max_size=4)),
    st.tuples(st.just("fork"), st.integers(0, 3), st.one_of(st.none(), st.integers(0, 8))),
)


async def play(
    log: EventLog, sessions: SessionStore, ops: list[tuple[str, int, object]]
) -> list[object]:
    """Run ``ops``; sessions are named by creation order so the two runs compare."""
    ids = [(await sessions.create_session(workspace="/w")).id]
    seen: list[object] = []
    for kind, index, arg in ops:
        session = ids[index % len(ids)]
        if kind == "fork":
            assert arg is None or isinstance(arg, int)
            ids.append((await sessions.fork(session, upto_seq=arg)).id)
            seen.append(("fork", index % len(ids)))
            continue
        assert isinstance(arg, list)
        batch: list[SessionEvent] = arg
        try:
            stored = await log.append(session, batch)
        except AppendConflict:
            seen.append("conflict")
        else:
            seen.append([(e.seq, e.event) for e in stored])
    for n, session in enumerate(ids):
        logged: list[StoredEvent] = await log.read(session)
        seen.append((n, [(e.seq, e.event) for e in logged]))
    return seen


async def both(ops: list[tuple[str, int, object]]) -> tuple[list[object], list[object]]:
    fake_log = InMemoryEventLog(clock=StepClock())
    expected = await play(fake_log, InMemorySessionStore(fake_log, clock=StepClock()), ops)
    with tempfile.TemporaryDirectory() as tmp:
        async with await Database.open(Path(tmp) / "plangate.db") as db:
            got = await play(SqliteEventLog(db), SqliteSessionStore(db), ops)
    return expected, got


@settings(max_examples=40, deadline=None)
@given(st.lists(operation, max_size=12))
def test_sqlite_behaves_like_the_fake(ops: list[tuple[str, int, object]]) -> None:
    expected, got = asyncio.run(both(ops))
    assert got == expected
