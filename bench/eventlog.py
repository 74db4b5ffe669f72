"""Event log throughput and cold replay against bare sqlite3 (DESIGN.md §11).

Run: ``python -m bench.eventlog [--events N] [--batch B] [--repeat R]``.

- append: ``SqliteEventLog.append`` of N events in batches of B (one transaction each: seq
  lookup, insert, goal-revision claims, commit with fsync) against ``sqlite3`` running the same
  statements on the same rows, already serialised, on a file with the same schema and pragmas.
- replay: a cold ``read`` of the N-event session (new connection, rows decoded and validated
  into events) against a bare ``SELECT`` of the same columns of the same rows with
  ``fetchall``. The target is at most 2x. The fold of the events into projections is reported
  beside it.

Each figure is the best of R runs, and the heap is collected before each timed run, so the two
sides start alike. Ratios, not absolute times, are the result: the machine's speed cancels.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import sqlite3
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.events import (
    AssistantMessage,
    CommandRun,
    GoalChange,
    SessionEvent,
    TodoItem,
    TodoWrite,
    ToolCall,
    ToolResult,
    TurnEnd,
    TurnStart,
    UserMessage,
)
from engine.goal.types import GoalSnapshot
from engine.projections import fold_session
from storage.db import Database
from storage.eventlog import SqliteEventLog

SESSION = "bench0000000000000000000000000000"
SELECT = "SELECT seq, at, payload FROM events WHERE session_id = ? AND seq > ? ORDER BY seq"


def make_events(count: int, *, seed: int = 7) -> list[SessionEvent]:
    """A plausible session: turns of a message, tool calls with results, replies, todos,
    goal revisions and commands, with tool output of varying length."""
    rng = random.Random(seed)
    events: list[SessionEvent] = []
    turn = 0
    revision = 0
    while len(events) < count:
        turn += 1
        turn_id = f"turn-{turn}"
        events.append(TurnStart(turn_id=turn_id))
        events.append(UserMessage(text=f"please look at module {turn} and fix the failing test"))
        for step in range(rng.randint(1, 4)):
            call_id = f"call-{turn}-{step}"
            path = f"src/pkg/module_{rng.randint(1, 300)}.py"
            events.append(ToolCall(call_id=call_id, name="read_file", arguments={"path": path}))
            body = "\n".join(f"line {i}: value = compute({i})" for i in range(rng.randint(3, 40)))
            events.append(ToolResult(call_id=call_id, name="read_file", content=body))
        if turn % 5 == 0:
            items = [TodoItem(content=f"step {i}", status="pending") for i in range(4)]
            events.append(TodoWrite(todos=items))
        if turn % 25 == 0:
            revision += 1
            snapshot = GoalSnapshot(
                id="goal-1",
                revision=revision,
                objective="make the suite pass",
                phase="active",
                max_goal_rounds=20,
            )
            events.append(GoalChange(snapshot=snapshot))
        if turn % 10 == 0:
            events.append(CommandRun(name="status", actor=42))
        events.append(AssistantMessage(text="Done: the test passes now. " * rng.randint(1, 4)))
        events.append(TurnEnd(turn_id=turn_id, outcome="completed"))
    return events[:count]


# --- bare sqlite3 ---------------------------------------------------------------------------


def bare_append(
    path: Path, rows: Sequence[tuple[str, str, tuple[str, int] | None]], batch: int
) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    start = time.perf_counter()
    for first in range(0, len(rows), batch):
        chunk = rows[first : first + batch]
        conn.execute("BEGIN IMMEDIATE")
        (last,) = conn.execute(
            "SELECT COALESCE(MAX(seq), 0) FROM events WHERE session_id = ?", (SESSION,)
        ).fetchone()
        at = time.time()
        conn.executemany(
            "INSERT INTO events (session_id, seq, type, at, payload) VALUES (?, ?, ?, ?, ?)",
            [(SESSION, last + i, t, at, p) for i, (t, p, _) in enumerate(chunk, start=1)],
        )
        claims = [
            (SESSION, g[0], g[1], last + i) for i, (_, _, g) in enumerate(chunk, start=1) if g
        ]
        if claims:
            conn.executemany(
                "INSERT INTO goal_revisions (session_id, goal_id, revision, seq) "
                "VALUES (?, ?, ?, ?)",
                claims,
            )
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - start
    conn.close()
    return elapsed


def bare_replay(path: Path) -> float:
    conn = sqlite3.connect(path)
    start = time.perf_counter()
    rows = conn.execute(SELECT, (SESSION, 0)).fetchall()
    elapsed = time.perf_counter() - start
    conn.close()
    del rows
    return elapsed


# --- plangate -------------------------------------------------------------------------------


async def ours_append(path: Path, events: Sequence[SessionEvent], batch: int) -> float:
    db = await Database.open(path)
    log = SqliteEventLog(db)
    start = time.perf_counter()
    for first in range(0, len(events), batch):
        await log.append(SESSION, events[first : first + batch])
    elapsed = time.perf_counter() - start
    await db.close()
    return elapsed


async def ours_replay(path: Path) -> tuple[float, float]:
    db = await Database.open(path)
    start = time.perf_counter()
    stored = await SqliteEventLog(db).read(SESSION)
    read_s = time.perf_counter() - start
    start = time.perf_counter()
    fold_session(item.event for item in stored)
    fold_s = time.perf_counter() - start
    await db.close()
    del stored
    return read_s, fold_s


@dataclass(frozen=True)
class Figures:
    events: int
    batch: int
    append_s: float
    bare_append_s: float
    read_s: float
    fold_s: float
    bare_read_s: float

    def report(self) -> str:
        n = self.events
        return "\n".join(
            [
                f"event log bench: {n} events, appended in batches of {self.batch}",
                f"append   plangate {n / self.append_s:>9,.0f} events/s   "
                f"bare sqlite3 {n / self.bare_append_s:>9,.0f} events/s   "
                f"ratio {self.append_s / self.bare_append_s:.2f}x (time)",
                f"replay   plangate read {self.read_s * 1e3:7.1f} ms   "
                f"bare SELECT {self.bare_read_s * 1e3:7.1f} ms   "
                f"ratio {self.read_s / self.bare_read_s:.2f}x (target <= 2x)",
                f"         + fold {self.fold_s * 1e3:.1f} ms: read and fold "
                f"{(self.read_s + self.fold_s) / self.bare_read_s:.2f}x the bare SELECT",
            ]
        )


async def measure(*, events: int, batch: int, repeat: int, folder: Path) -> Figures:
    log_events = make_events(events)
    rows = [
        (
            e.type,
            e.model_dump_json(),
            (e.snapshot.id, e.snapshot.revision)
            if isinstance(e, GoalChange) and e.snapshot
            else None,
        )
        for e in log_events
    ]
    ours_path, bare_path = folder / "ours.db", folder / "bare.db"
    # The bare file gets the same schema from the same migrations.
    await (await Database.open(bare_path)).close()
    gc.collect()
    append_s = await ours_append(ours_path, log_events, batch)
    del log_events
    gc.collect()
    bare_append_s = bare_append(bare_path, rows, batch)
    del rows

    reads: list[tuple[float, float]] = []
    bare_reads: list[float] = []
    for _ in range(repeat):  # interleaved, so a slow moment hits both sides alike
        gc.collect()
        reads.append(await ours_replay(ours_path))
        gc.collect()
        bare_reads.append(bare_replay(ours_path))
    read_s, fold_s = min(reads)
    return Figures(
        events=events,
        batch=batch,
        append_s=append_s,
        bare_append_s=bare_append_s,
        read_s=read_s,
        fold_s=fold_s,
        bare_read_s=min(bare_reads),
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=10, help="events per append")
    parser.add_argument("--repeat", type=int, default=5, help="replay runs; the best counts")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="plangate-bench-") as tmp:
        figures = asyncio.run(
            measure(events=args.events, batch=args.batch, repeat=args.repeat, folder=Path(tmp))
        )
    print(figures.report())


if __name__ == "__main__":
    main()
