"""Event log throughput and cold replay against bare sqlite3 (docs/bench.md).

Run: ``python -m bench.eventlog [--events N] [--batch B] [--repeat R] [--only PART]``.

- append: ``SqliteEventLog.append`` of N events in batches of B (one transaction each: seq
  lookup, insert, goal-revision claims, commit) against ``sqlite3`` running the same statements
  on the same rows, already serialised, on a file with the same schema and pragmas. Twice: with
  ``synchronous=FULL`` as shipped (an fsync per commit, so the disk dominates), and with
  ``synchronous=OFF`` on both sides, which leaves plangate's own CPU cost (serialising with
  pydantic, aiosqlite's thread hops, the lock) against sqlite3's.
- replay: a cold whole ``read`` of the N-event session (new connection, every row decoded and
  validated into an event) against a bare ``SELECT`` of the same columns of the same rows with
  ``fetchall``. Reported beside it: the fold of the events into projections, and the same
  SELECT followed by ``json.loads`` of each payload, the floor for any reader that parses what
  it reads.
- realistic: a second N-event session with kilobyte payloads (mostly assistant
  messages, tool calls and tool results; the mix is printed). The cold projection replay
  (``replay_projections``: only the projections' event types, filtered in SQL) against a bare
  ``SELECT`` of ALL the session's rows (the 2x target), and against a bare ``SELECT`` of only
  the rows it decodes; the old whole read + fold against the same bare SELECT; and a model
  step's context at that length, built from the whole log (as before) and incrementally
  (``SessionHistory``).

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
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from engine.agent.context import assemble_messages, build_messages
from engine.agent.history import SessionHistory
from engine.agent.settings import AgentSettings
from engine.events import (
    AssistantMessage,
    CommandRun,
    GoalChange,
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
from engine.goal.types import GoalSnapshot
from engine.projections import PROJECTION_EVENT_TYPES, fold_session, replay_projections
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


_VOCABULARY = (
    "the value config path result error test module import return self async await none "
    "list dict update check parse build open close read write line file line_no name index "
    "session event plan goal todo agent model tool call output status ready done failed"
)
_WORDS = _VOCABULARY.split()


def _code(rng: random.Random, lines: int) -> str:
    """Code-like text: indented lines of words, quotes and brackets (what JSON must escape)."""
    out = []
    for n in range(lines):
        words = " ".join(rng.choices(_WORDS, k=rng.randint(2, 9)))
        indent = "    " * rng.randint(0, 3)
        out.append(f'{indent}{words} = fn("{rng.choice(_WORDS)}", {n}) # {rng.random():.3f}')
    return "\n".join(out)


def _prose(rng: random.Random, chars: int) -> str:
    words: list[str] = []
    size = 0
    while size < chars:
        word = rng.choice(_WORDS)
        words.append(word)
        size += len(word) + 1
    return " ".join(words).capitalize() + "."


def make_realistic_events(count: int, *, seed: int = 11) -> list[SessionEvent]:
    """A long coding session: per turn a user message, then 3-12 model steps, each an
    assistant message (0.2-1.5 KB) with 1-3 tool calls (reads, edits with old and new text,
    commands) and their results (0.3-8 KB, mostly 1-3 KB); now and then a todo write, a goal
    revision or round, a plan command and mode switch. The mix is printed with the figures."""
    rng = random.Random(seed)
    events: list[SessionEvent] = []
    turn = 0
    revision = 0
    while len(events) < count:
        turn += 1
        turn_id = f"turn-{turn}"
        events.append(TurnStart(turn_id=turn_id))
        if revision and turn % 4 == 0:
            source = GoalRoundSource(goal_id="goal-1", revision=revision, round=turn)
            events.append(UserMessage(text=_prose(rng, 300), source=source))
        else:
            events.append(UserMessage(text=_prose(rng, rng.choice((120, 400, 2000)))))
        if turn % 20 == 0:
            events.append(CommandRun(name="plan", actor=42, data={"target": turn % 40 == 0}))
            events.append(PlanMode(active=turn % 40 == 0))
        for step in range(rng.randint(3, 12)):
            events.append(AssistantMessage(text=_prose(rng, rng.randint(200, 1500))))
            calls = []
            for k in range(rng.choice((1, 1, 1, 2, 3))):
                call_id = f"call-{turn}-{step}-{k}"
                kind = rng.random()
                if kind < 0.45:
                    name, args = "read_file", {"path": f"src/pkg/module_{rng.randint(1, 300)}.py"}
                    body = _code(rng, rng.randint(15, 120))
                elif kind < 0.75:
                    name = "edit_file"
                    args = {
                        "path": f"src/pkg/module_{rng.randint(1, 300)}.py",
                        "old": _code(rng, rng.randint(2, 15)),
                        "new": _code(rng, rng.randint(2, 20)),
                    }
                    body = f"edited {args['path']}: 1 replacement"
                else:
                    name, args = "bash", {"command": f"pytest -q tests/test_{turn}.py -x"}
                    body = _code(rng, rng.randint(5, 80))
                calls.append((call_id, name, body))
                events.append(ToolCall(call_id=call_id, name=name, arguments=args))
            for call_id, name, body in calls:
                events.append(ToolResult(call_id=call_id, name=name, content=body))
            if rng.random() < 0.12:
                items = [
                    TodoItem(content=_prose(rng, 60), status=rng.choice(("pending", "completed")))
                    for _ in range(rng.randint(3, 8))
                ]
                events.append(TodoWrite(todos=items))
        if turn % 8 == 0:
            revision += 1
            snapshot = GoalSnapshot(
                id="goal-1",
                revision=revision,
                objective=_prose(rng, 200),
                phase="active",
                max_goal_rounds=50,
            )
            events.append(GoalChange(snapshot=snapshot))
        events.append(AssistantMessage(text=_prose(rng, rng.randint(100, 800))))
        events.append(TurnEnd(turn_id=turn_id, outcome="completed"))
    return events[:count]


def describe_mix(events: Sequence[SessionEvent]) -> str:
    """Each type's share of the rows and of the payload bytes, and the average payload."""
    counts: Counter[str] = Counter()
    sizes: Counter[str] = Counter()
    for event in events:
        counts[event.type] += 1
        sizes[event.type] += len(event.model_dump_json())
    total, total_bytes = sum(counts.values()), sum(sizes.values())
    parts = [
        f"{t} {100 * counts[t] / total:.1f}% ({sizes[t] / counts[t] / 1024:.1f} KB)"
        for t, _ in counts.most_common()
    ]
    wanted = sum(counts[t] for t in PROJECTION_EVENT_TYPES)
    wanted_bytes = sum(sizes[t] for t in PROJECTION_EVENT_TYPES)
    return (
        f"{total:,} events, {total_bytes / 2**20:.0f} MB of JSON, "
        f"{total_bytes / total / 1024:.2f} KB per event on average\n"
        f"        mix: {', '.join(parts)}\n"
        f"        the projections' types: {100 * wanted / total:.1f}% of the rows, "
        f"{100 * wanted_bytes / total_bytes:.1f}% of the bytes"
    )


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
                f"replay  plangate whole read (every payload decoded) {self.read_s * 1e3:6.1f} ms"
                f"   bare SELECT of the same rows {self.bare_read_s * 1e3:6.1f} ms   "
                f"time ratio {self.read_ratio:.2f}x",
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
    synchronous: Literal["FULL", "OFF"],
) -> Appends:
    """Both sides append the same events in ``repeat`` interleaved segments."""
    # The bare file gets the same schema from the same migrations.
    await (await Database.open(bare_path)).close()
    db = await Database.open(ours_path, synchronous=synchronous)
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


# --- cold projection replay and per-step context on a realistic session ----------------------

_TYPES = sorted(PROJECTION_EVENT_TYPES)
SELECT_TYPES = (
    "SELECT seq, at, payload FROM events WHERE session_id = ? AND seq > ? "
    f"AND type IN ({', '.join('?' * len(_TYPES))}) ORDER BY seq"
)


def bare_select(path: Path, query: str, params: Sequence[object], *, parse: bool) -> float:
    """A bare ``sqlite3`` fetch of ``query``, optionally ``json.loads`` of each payload."""
    gc.collect()
    conn = sqlite3.connect(path)
    start = time.perf_counter()
    rows = conn.execute(query, params).fetchall()
    if parse:
        rows = [json.loads(row[2]) for row in rows]
    elapsed = time.perf_counter() - start
    conn.close()
    del rows
    return elapsed


async def fill(path: Path, events: Sequence[SessionEvent]) -> None:
    """Append ``events`` (not timed: ``synchronous=OFF``, one append per 50 events)."""
    db = await Database.open(path, synchronous="OFF")
    log = SqliteEventLog(db)
    for first in range(0, len(events), 50):
        await log.append(SESSION, events[first : first + 50])
    await db.close()


async def ours_projection_replay(path: Path) -> float:
    gc.collect()
    db = await Database.open(path)
    start = time.perf_counter()
    await replay_projections(SqliteEventLog(db), SESSION)
    elapsed = time.perf_counter() - start
    await db.close()
    return elapsed


async def ours_full_replay(path: Path) -> float:
    """The whole read and fold, as before ``replay_projections``."""
    gc.collect()
    db = await Database.open(path)
    start = time.perf_counter()
    stored = await SqliteEventLog(db).read(SESSION)
    fold_session(item.event for item in stored)
    elapsed = time.perf_counter() - start
    await db.close()
    del stored
    return elapsed


@dataclass(frozen=True)
class Replays:
    """Cold replays of the realistic session; ratios are medians over interleaved runs."""

    mix: str
    projection_s: float
    full_s: float
    bare_all_s: float
    bare_types_s: float
    bare_types_parsed_s: float
    projection_vs_all: float
    projection_vs_types: float
    projection_vs_types_parsed: float
    full_vs_all: float


async def measure_replays(path: Path, mix: str, *, repeat: int) -> Replays:
    all_params = (SESSION, 0)
    type_params = (SESSION, 0, *_TYPES)
    runs: list[tuple[float, float, float, float, float]] = []
    for k in range(repeat):
        bare = [
            bare_select(path, SELECT, all_params, parse=False),
            bare_select(path, SELECT_TYPES, type_params, parse=False),
            bare_select(path, SELECT_TYPES, type_params, parse=True),
        ]
        if k % 2:  # alternate who runs first
            projection = await ours_projection_replay(path)
            full = await ours_full_replay(path)
        else:
            full = await ours_full_replay(path)
            projection = await ours_projection_replay(path)
        if k % 2:
            bare = [
                bare_select(path, SELECT, all_params, parse=False),
                bare_select(path, SELECT_TYPES, type_params, parse=False),
                bare_select(path, SELECT_TYPES, type_params, parse=True),
            ]
        runs.append((projection, full, *bare))  # type: ignore[arg-type]

    def med(f: int, g: int) -> float:
        return statistics.median(run[f] / run[g] for run in runs)

    return Replays(
        mix=mix,
        projection_s=min(r[0] for r in runs),
        full_s=min(r[1] for r in runs),
        bare_all_s=min(r[2] for r in runs),
        bare_types_s=min(r[3] for r in runs),
        bare_types_parsed_s=min(r[4] for r in runs),
        projection_vs_all=med(0, 2),
        projection_vs_types=med(0, 3),
        projection_vs_types_parsed=med(0, 4),
        full_vs_all=med(1, 2),
    )


@dataclass(frozen=True)
class Steps:
    """One model step's context on the realistic session: whole log vs incremental."""

    events: int
    whole_s: float
    first_s: float
    incremental_s: float


async def measure_steps(path: Path, *, steps: int) -> Steps:
    """A step's context as ``engine.agent.turn`` built it before (read the whole log, fold,
    convert it all) against now (``SessionHistory``: read and convert the new events only,
    assemble). Between steps one model step's events are appended (not timed)."""
    config = AgentSettings()
    db = await Database.open(path)
    log = SqliteEventLog(db)
    history = SessionHistory()
    rng = random.Random(3)

    async def whole() -> float:
        gc.collect()
        start = time.perf_counter()
        events = [item.event for item in await log.read(SESSION)]
        fold_session(events)
        build_messages(events, system_prompt="SYS", settings=config)
        return time.perf_counter() - start

    async def incremental() -> float:
        gc.collect()
        start = time.perf_counter()
        turns, _ = await history.read(log, SESSION, result_cap=config.tool_result_cap_chars)
        assemble_messages(turns, system_prompt="SYS", settings=config)
        return time.perf_counter() - start

    first = await incremental()  # a cold cache reads and converts the whole log once
    whole_s: list[float] = []
    incremental_s: list[float] = []
    await log.append(SESSION, [TurnStart(turn_id="bench"), UserMessage(text="go on")])
    for step in range(steps):
        call_id = f"bench-{step}"
        await log.append(
            SESSION,
            [
                AssistantMessage(text=_prose(rng, 600)),
                ToolCall(call_id=call_id, name="read_file", arguments={"path": "a.py"}),
                ToolResult(call_id=call_id, name="read_file", content=_code(rng, 60)),
            ],
        )
        if step % 2:
            whole_s.append(await whole())
            incremental_s.append(await incremental())
        else:
            incremental_s.append(await incremental())
            whole_s.append(await whole())
    count = len(await log.read(SESSION))
    await db.close()
    return Steps(
        events=count,
        whole_s=statistics.median(whole_s),
        first_s=first,
        incremental_s=statistics.median(incremental_s),
    )


def report_realistic(r: Replays, steps: Steps) -> str:
    return "\n".join(
        [
            f"realistic session: {r.mix}",
            f"cold projection replay (replay_projections: SQL type filter, decode "
            f"{len(_TYPES)} types, fold) {r.projection_s * 1e3:6.1f} ms",
            f"        vs bare SELECT of ALL the session's rows {r.bare_all_s * 1e3:6.1f} ms: "
            f"time ratio {r.projection_vs_all:.2f}x (target <= 2x)",
            f"        vs bare SELECT of the same filtered rows {r.bare_types_s * 1e3:6.1f} ms: "
            f"{r.projection_vs_types:.2f}x; vs that SELECT + json.loads "
            f"{r.bare_types_parsed_s * 1e3:6.1f} ms: {r.projection_vs_types_parsed:.2f}x",
            f"        whole read + fold of the same session {r.full_s * 1e3:6.1f} ms: "
            f"{r.full_vs_all:.2f}x the bare SELECT of all rows",
            f"model step context at {steps.events:,} events (median of steps): whole log "
            f"(read + fold + convert) {steps.whole_s * 1e3:6.1f} ms   incremental "
            f"{steps.incremental_s * 1e3:6.2f} ms   (first step, cold cache: "
            f"{steps.first_s * 1e3:6.1f} ms)",
        ]
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=10, help="events per append")
    parser.add_argument(
        "--repeat", type=int, default=5, help="interleaved append segments and replay runs"
    )
    parser.add_argument(
        "--only", choices=("all", "appends", "realistic"), default="all", help="which part to run"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="plangate-bench-") as tmp:
        if args.only in ("all", "appends"):
            figures = asyncio.run(
                measure(events=args.events, batch=args.batch, repeat=args.repeat, folder=Path(tmp))
            )
            print(figures.report(), flush=True)
        if args.only in ("all", "realistic"):
            print(asyncio.run(measure_realistic(args.events, args.repeat, Path(tmp))))


async def measure_realistic(count: int, repeat: int, folder: Path) -> str:
    events = make_realistic_events(count)
    mix = describe_mix(events)
    path = folder / "realistic.db"
    await fill(path, events)
    del events
    replays = await measure_replays(path, mix, repeat=repeat)
    steps = await measure_steps(path, steps=repeat * 2)
    return report_realistic(replays, steps)


if __name__ == "__main__":
    main()
