"""Event log throughput and cold replay against bare sqlite3 (DESIGN.md §11).

Run: ``python -m bench.eventlog [--events N] [--batch B] [--repeat R]``.

- append: ``SqliteEventLog.append`` of N events in batches of B (one transaction each: seq
  lookup, insert, goal-revision claims, commit) against ``sqlite3`` running the same statements
  on the same rows, already serialised, on a file with the same schema and pragmas. Twice: with
  ``synchronous=FULL`` as shipped (an fsync per commit, so the disk dominates), and with
  ``synchronous=OFF`` on both sides, which leaves plangate's own CPU cost (serialising with
  pydantic, aiosqlite's thread hops, the lock) against sqlite3's.
- replay: a cold ``read`` of the N-event session (new connection, rows decoded and validated
  into events) against a bare ``SELECT`` of the same columns of the same rows with
  ``fetchall``. The target is at most 2x. Reported beside it: the fold of the events into
  projections, and the same SELECT followed by ``json.loads`` of each payload, the floor for
  any reader that parses what it reads.

Both sides run interleaved (R append segments, R replays each) and the ratio is the median of
the per-pair ratios, so a burst of load on a shared machine hits both sides rather than one; the
heap is collected before each timed run. Ratios, not absolute times, are the result.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import random
import sqlite3
import statistics
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

Row = tuple[str, str, "tuple[str, int] | None"]


def bare_connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    return conn


def bare_append(conn: sqlite3.Connection, rows: Sequence[Row], batch: int) -> float:
    start = time.perf_counter()
    for first in range(0, len(rows), batch):
        chunk = rows[first : first + batch]
        conn.execute("BEGIN IMMEDIATE")
        cursor = conn.execute(
            "SELECT COALESCE(MAX(seq), 0) FROM events WHERE session_id = ?", (SESSION,)
        )
        (last,) = cursor.fetchone()
        cursor.close()  # as aiosqlite's `async with` does: the statement is reset at once
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
    return time.perf_counter() - start


def bare_replay(path: Path) -> float:
    gc.collect()
    conn = sqlite3.connect(path)
    start = time.perf_counter()
    rows = conn.execute(SELECT, (SESSION, 0)).fetchall()
    elapsed = time.perf_counter() - start
    conn.close()
    del rows
    return elapsed


def bare_replay_parsed(path: Path) -> float:
    """The floor for any reader that parses each payload: SELECT + ``json.loads``."""
    gc.collect()
    conn = sqlite3.connect(path)
    start = time.perf_counter()
    decoded = [json.loads(row[2]) for row in conn.execute(SELECT, (SESSION, 0)).fetchall()]
    elapsed = time.perf_counter() - start
    conn.close()
    del decoded
    return elapsed


# --- plangate -------------------------------------------------------------------------------


async def ours_append(log: SqliteEventLog, events: Sequence[SessionEvent], batch: int) -> float:
    start = time.perf_counter()
    for first in range(0, len(events), batch):
        await log.append(SESSION, events[first : first + batch])
    return time.perf_counter() - start


async def ours_replay(path: Path) -> tuple[float, float]:
    gc.collect()
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
class Appends:
    """Append timings, summed over segments, and the median per-segment ratio."""

    ours_s: float
    bare_s: float
    ratio: float


@dataclass(frozen=True)
class Figures:
    events: int
    batch: int
    durable: Appends
    unsynced: Appends
    read_s: float
    fold_s: float
    bare_read_s: float
    parsed_read_s: float
    read_ratio: float
    read_fold_ratio: float
    read_parsed_ratio: float

    def report(self) -> str:
        n = self.events

        def append_line(label: str, a: Appends) -> str:
            return (
                f"{label}  plangate {n / a.ours_s:>8,.0f} events/s   "
                f"bare sqlite3 {n / a.bare_s:>8,.0f} events/s   time ratio {a.ratio:.2f}x"
            )

        return "\n".join(
            [
                f"event log bench: {n:,} events, appended in batches of {self.batch}",
                append_line("append, synchronous=FULL (as shipped)", self.durable),
                append_line("append, synchronous=OFF (CPU cost only)", self.unsynced),
                f"replay  plangate read {self.read_s * 1e3:6.1f} ms   "
                f"bare SELECT {self.bare_read_s * 1e3:6.1f} ms   "
                f"time ratio {self.read_ratio:.2f}x (target <= 2x)",
                f"        read + fold {(self.read_s + self.fold_s) * 1e3:6.1f} ms   "
                f"time ratio {self.read_fold_ratio:.2f}x",
                f"        bare SELECT + json.loads {self.parsed_read_s * 1e3:6.1f} ms: "
                f"plangate's read is {self.read_parsed_ratio:.2f}x that",
                "(ratios: median over interleaved runs; times: the best run)",
            ]
        )


async def measure_appends(
    events: Sequence[SessionEvent],
    rows: Sequence[Row],
    *,
    batch: int,
    repeat: int,
    ours_path: Path,
    bare_path: Path,
    synchronous: str,
) -> Appends:
    """Both sides append the same events in ``repeat`` interleaved segments."""
    # The bare file gets the same schema from the same migrations.
    await (await Database.open(bare_path)).close()
    db = await Database.open(ours_path)
    async with db.reading() as raw:
        await raw.execute(f"PRAGMA synchronous = {synchronous}")
    log = SqliteEventLog(db)
    conn = bare_connect(bare_path)
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    ours_seg: list[float] = []
    bare_seg: list[float] = []
    size = -(-len(events) // repeat)
    for k, first in enumerate(range(0, len(events), size)):
        gc.collect()
        # Alternate who goes first, so neither side always runs on a warmer cache.
        if k % 2:
            bare_seg.append(bare_append(conn, rows[first : first + size], batch))
        ours_seg.append(await ours_append(log, events[first : first + size], batch))
        if not k % 2:
            bare_seg.append(bare_append(conn, rows[first : first + size], batch))
    conn.close()
    await db.close()
    return Appends(
        ours_s=sum(ours_seg),
        bare_s=sum(bare_seg),
        ratio=statistics.median(o / b for o, b in zip(ours_seg, bare_seg, strict=True)),
    )


async def measure(*, events: int, batch: int, repeat: int, folder: Path) -> Figures:
    """Append in ``repeat`` interleaved segments, then replay ``repeat`` interleaved times:
    a burst of load on a shared machine then hits both sides, not one."""
    log_events = make_events(events)
    rows: list[Row] = [
        (
            e.type,
            e.model_dump_json(),
            (e.snapshot.id, e.snapshot.revision)
            if isinstance(e, GoalChange) and e.snapshot
            else None,
        )
        for e in log_events
    ]
    ours_path = folder / "ours.db"
    durable = await measure_appends(
        log_events,
        rows,
        batch=batch,
        repeat=repeat,
        ours_path=ours_path,
        bare_path=folder / "bare.db",
        synchronous="FULL",
    )
    unsynced = await measure_appends(
        log_events,
        rows,
        batch=batch,
        repeat=repeat,
        ours_path=folder / "ours-off.db",
        bare_path=folder / "bare-off.db",
        synchronous="OFF",
    )
    del log_events, rows

    reads: list[tuple[float, float]] = []
    bare_reads: list[float] = []
    parsed_reads: list[float] = []
    for k in range(repeat):
        if k % 2:
            bare_reads.append(bare_replay(ours_path))
            parsed_reads.append(bare_replay_parsed(ours_path))
        reads.append(await ours_replay(ours_path))
        if not k % 2:
            bare_reads.append(bare_replay(ours_path))
            parsed_reads.append(bare_replay_parsed(ours_path))
    pairs = list(zip(reads, bare_reads, strict=True))
    return Figures(
        events=events,
        batch=batch,
        durable=durable,
        unsynced=unsynced,
        read_s=min(r for r, _ in reads),
        fold_s=min(f for _, f in reads),
        bare_read_s=min(bare_reads),
        read_ratio=statistics.median(r / b for (r, _), b in pairs),
        read_fold_ratio=statistics.median((r + f) / b for (r, f), b in pairs),
        parsed_read_s=min(parsed_reads),
        read_parsed_ratio=statistics.median(
            r / p for (r, _), p in zip(reads, parsed_reads, strict=True)
        ),
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=10, help="events per append")
    parser.add_argument(
        "--repeat", type=int, default=5, help="interleaved append segments and replay runs"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="plangate-bench-") as tmp:
        figures = asyncio.run(
            measure(events=args.events, batch=args.batch, repeat=args.repeat, folder=Path(tmp))
        )
    print(figures.report())


if __name__ == "__main__":
    main()
