"""The cost of usage accounting, as ratios measured in one run (docs/goals.md, docs/bench.md).

Run: ``python -m bench.usage [--events N] [--sessions S] [--repeat R]``.

- start-up: the usage meter's load (today's ``model/usage`` records of every session, read
  across sessions by ``(type, at)``) over a log of S sessions of N/S realistic events each
  (every record "today": the worst case), against a bare ``sqlite3`` SELECT of the same rows
  followed by ``json.loads`` of each payload (the floor for any reader that parses what it
  reads) on the indexed file. Without and with the index on ``events(type, at)``, to decide
  whether it pays; also against the cold projection replay of one session, for scale.
- append: ``SqliteEventLog.append`` of the same events with and without that index
  (``synchronous=OFF``, so the fsync per commit hides nothing).
- per call: the budget check before a model call (``request_chars`` of the request plus
  ``UsageMeter.check``) against building that call's context incrementally (what every step
  does anyway), at the end of the long session.
- the daily cap (``--caps N``, 0 skips it): ``UsageMeter.load`` over a log of N ``command/run``
  events (10 sessions, the owner's one ``/usage cap`` the oldest of them: the worst case for a
  scan from the newest) against the same load over an empty log; beside it the same ratio for
  reading every ``command/run`` and keeping the last cap, as the load once did.

Ratios are medians over interleaved runs; absolute times are printed for orientation only.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from bench.eventlog import make_realistic_events
from engine.agent.context import assemble_messages
from engine.agent.history import SessionHistory
from engine.agent.settings import AgentSettings
from engine.events import CommandRun, HumanSource, ModelUsageRecord, SessionEvent, TurnStart
from engine.projections import replay_projections
from engine.usage.ledger import request_chars
from engine.usage.meter import CAP_COMMAND, Reservation, UsageConfig, UsageMeter
from storage.db import Database
from storage.eventlog import SqliteEventLog

# Migration 2 creates the index; the plain file drops it again.
DROP = "DROP INDEX IF EXISTS events_type_at"


def with_usage(events: list[SessionEvent]) -> list[SessionEvent]:
    """The events with a ``model/usage`` record after each assistant message."""
    out: list[SessionEvent] = []
    turn = "t0"
    for event in events:
        out.append(event)
        if isinstance(event, TurnStart):
            turn = event.turn_id
        if event.type == "assistant/message":
            out.append(
                ModelUsageRecord(
                    turn_id=turn, prompt_tokens=900, completion_tokens=80, request_chars=3600
                )
            )
    return out


async def fill(
    path: Path, sessions: list[str], events: list[SessionEvent], *, index: bool
) -> float:
    if not index:
        # The schema from the migrations, then the index dropped on a plain connection (the
        # Database's read connection is query_only).
        await (await Database.open(path)).close()
        with sqlite3.connect(path) as raw:
            raw.execute(DROP)
    # synchronous=OFF: the fsync per commit would hide what one more index insert costs.
    db = await Database.open(path, synchronous="OFF")
    log = SqliteEventLog(db)
    start = time.perf_counter()
    for session in sessions:
        for first in range(0, len(events), 50):
            await log.append(session, events[first : first + 50])
    elapsed = time.perf_counter() - start
    await db.close()
    return elapsed


async def timed_load(path: Path) -> float:
    gc.collect()
    db = await Database.open(path)
    meter = UsageMeter(SqliteEventLog(db), config=UsageConfig(daily_tokens=10**9))
    start = time.perf_counter()
    await meter.load()
    elapsed = time.perf_counter() - start
    await db.close()
    return elapsed


def bare_load(path: Path) -> float:
    gc.collect()
    conn = sqlite3.connect(path)
    start = time.perf_counter()
    rows = conn.execute(
        "SELECT session_id, seq, at, payload FROM events WHERE type IN (?) AND at >= ? ORDER BY at",
        ("model/usage", 0.0),
    ).fetchall()
    parsed = [json.loads(row[3]) for row in rows]
    elapsed = time.perf_counter() - start
    conn.close()
    del parsed
    return elapsed


async def timed_replay(path: Path, session: str) -> float:
    gc.collect()
    db = await Database.open(path)
    start = time.perf_counter()
    await replay_projections(SqliteEventLog(db), session)
    elapsed = time.perf_counter() - start
    await db.close()
    return elapsed


async def per_call(path: Path, session: str, repeat: int) -> tuple[float, float, float]:
    db = await Database.open(path)
    log = SqliteEventLog(db)
    meter = UsageMeter(log, config=UsageConfig(daily_tokens=10**9))
    history = SessionHistory()
    settings = AgentSettings()
    await history.read(log, session, result_cap=settings.tool_result_cap_chars)
    await meter.session(session)
    tools = [
        {"type": "function", "function": {"name": f"t{i}", "parameters": {}}} for i in range(9)
    ]
    builds, checks = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        turns, _ = await history.read(log, session, result_cap=settings.tool_result_cap_chars)
        messages = assemble_messages(turns, system_prompt="system", settings=settings)
        builds.append(time.perf_counter() - start)
        start = time.perf_counter()
        chars = request_chars(messages, tools)
        held = await meter.reserve(session, HumanSource(), chars=chars)
        assert isinstance(held, Reservation)  # no cap set: never refused
        meter.release(held)
        checks.append(time.perf_counter() - start)
    await db.close()
    ratio = statistics.median(c / b for c, b in zip(checks, builds, strict=True))
    return statistics.median(checks), statistics.median(builds), ratio


async def fill_commands(path: Path, count: int) -> None:
    """``count`` ``command/run`` events over 10 sessions; the first is the owner's cap."""
    db = await Database.open(path)
    log = SqliteEventLog(db)
    names = ("status", "help", "show-plan", "usage", "goal", "plan", "approve")
    events: list[SessionEvent] = [
        CommandRun(name=names[i % len(names)], args="some words of arguments", actor=7)
        for i in range(count)
    ]
    if events:
        events[0] = CommandRun(name=CAP_COMMAND, args="cap 2m", actor=7, data={"cap": 2_000_000})
    for first in range(0, count, 500):
        await log.append(
            f"cap{(first // 500) % 10:02d}".ljust(32, "0"), events[first : first + 500]
        )
    await db.close()


async def timed_cap_load(path: Path, *, full_read: bool) -> tuple[float, int | None]:
    """One start-up's load, or (``full_read``) every ``command/run`` read and the last cap kept."""
    gc.collect()
    db = await Database.open(path)
    log = SqliteEventLog(db)
    meter = UsageMeter(log, config=UsageConfig(daily_tokens=10**9))
    start = time.perf_counter()
    if not full_read:
        await meter.load()
    cap: int | None = meter.daily_cap
    if full_read:
        for stored in await log.read_types_since({"command/run"}, since_at=0.0):
            event = stored.event
            if isinstance(event, CommandRun) and event.name == CAP_COMMAND:
                cap = event.data["cap"]
    elapsed = time.perf_counter() - start
    await db.close()
    return elapsed, cap


async def cap_startup(count: int, repeat: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        empty, full = Path(folder) / "empty.db", Path(folder) / "full.db"
        await fill_commands(empty, 0)
        await fill_commands(full, count)
        runs: dict[tuple[str, bool], list[float]] = {}
        for _ in range(repeat):
            for full_read in (False, True):
                for name, path in (("empty", empty), ("full", full)):
                    elapsed, cap = await timed_cap_load(path, full_read=full_read)
                    expected = 10**9 if name == "empty" else 2_000_000
                    assert cap == expected, (name, full_read, cap)
                    runs.setdefault((name, full_read), []).append(elapsed)
    med = statistics.median
    for full_read, what in ((False, "UsageMeter.load"), (True, "every command/run read")):
        ours, base = runs[("full", full_read)], runs[("empty", full_read)]
        ratio = med(o / b for o, b in zip(ours, base, strict=True))
        print(
            f"daily cap at start-up, {what}: {count:,} command/run {med(ours) * 1000:.2f} ms, "
            f"none {med(base) * 1000:.2f} ms: {ratio:.2f}x"
        )


async def main(events: int, sessions: int, repeat: int) -> None:
    per_session = with_usage(make_realistic_events(events // sessions))
    names = [f"bench{i:04d}".ljust(32, "0") for i in range(sessions)]
    total = len(per_session) * sessions
    usage_rows = sum(e.type == "model/usage" for e in per_session) * sessions
    with tempfile.TemporaryDirectory() as folder:
        plain, indexed = Path(folder) / "plain.db", Path(folder) / "indexed.db"
        fill_plain = await fill(plain, names, per_session, index=False)
        fill_indexed = await fill(indexed, names, per_session, index=True)
        loads_plain, loads_indexed, replays, bares = [], [], [], []
        for _ in range(repeat):
            loads_plain.append(await timed_load(plain))
            loads_indexed.append(await timed_load(indexed))
            replays.append(await timed_replay(plain, names[0]))
            bares.append(bare_load(indexed))
        check_s, build_s, call_ratio = await per_call(plain, names[0], repeat * 4)
    med = statistics.median
    print(f"log: {total:,} events in {sessions} sessions, {usage_rows:,} model/usage records")

    def ratio(ours: list[float], base: list[float]) -> float:
        return med(o / b for o, b in zip(ours, base, strict=True))

    print(
        f"start-up load, no index:   {med(loads_plain) * 1000:7.1f} ms   "
        f"{ratio(loads_plain, bares):.2f}x the bare SELECT + json.loads, "
        f"{ratio(loads_plain, replays):.2f}x one session's projection replay"
    )
    print(
        f"start-up load, (type, at): {med(loads_indexed) * 1000:7.1f} ms   "
        f"{ratio(loads_indexed, bares):.2f}x the bare SELECT + json.loads, "
        f"{ratio(loads_indexed, replays):.2f}x one session's projection replay"
    )
    print(f"append with the index / without: {fill_indexed / fill_plain:.2f}x")
    print(
        f"budget check before a call: {check_s * 1e6:,.0f} us, "
        f"context build {build_s * 1e6:,.0f} us, ratio {call_ratio:.2f}x"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--caps", type=int, default=50_000)
    parser.add_argument("--only", choices=("all", "cap"), default="all")
    args = parser.parse_args()
    if args.caps:
        asyncio.run(cap_startup(args.caps, args.repeat))
    if args.only == "all":
        asyncio.run(main(args.events, args.sessions, args.repeat))
