"""Crash test (docs/storage.md): SIGKILL writers at random moments, then check on restart that
nothing acknowledged is lost and nothing is half-written.

Each round starts two child processes (tests/storage/crash_child.py) on one database and one
session, each with its own JSON file and three concurrent appenders whose appends share group
commits, and kills both at random moments. After every round:
the session's seq runs 1..n with no gap or duplicate, every acknowledged append is there at the
seq it was given, the shared goal's revisions are each claimed once, and each file is valid
JSON holding exactly the last acknowledged version or the one being written, never a mix.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from engine.events import GoalChange, StoredEvent, UserMessage
from storage.db import Database
from storage.eventlog import SqliteEventLog
from tests.storage.crash_child import SHARED_GOAL, WRITERS, batch_for, file_text

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 26  # two kills per round
SESSION = "c" * 32


@dataclass
class Writer:
    name: str
    file: Path
    acked_version: int = 0
    proc: subprocess.Popen[str] | None = None


@dataclass
class Acks:
    # seq range -> (tag, iteration) of every append ever acknowledged
    appends: dict[tuple[int, int], tuple[str, int]] = field(default_factory=dict)


def start(writer: Writer, db: Path, round_no: int) -> None:
    writer.proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.storage.crash_child",
            str(db),
            SESSION,
            str(writer.file),
            f"{writer.name}{round_no}",
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )


def wait_ready(writer: Writer) -> None:
    assert writer.proc is not None and writer.proc.stdout is not None
    assert writer.proc.stdout.readline() == "ready\n"


def kill_and_collect(writer: Writer, acks: Acks) -> int:
    """SIGKILL the child and record what it acknowledged; returns the number of acks."""
    assert writer.proc is not None
    assert writer.proc.stdout is not None
    os.kill(writer.proc.pid, signal.SIGKILL)
    # read(), not communicate(): communicate reads the pipe's file descriptor directly and
    # would miss what wait_ready's readline() already pulled into the text buffer.
    out = writer.proc.stdout.read()
    writer.proc.wait(timeout=30)
    assert writer.proc.returncode == -signal.SIGKILL
    count = 0
    for line in out.splitlines(keepends=True):
        if not line.endswith("\n"):
            continue  # cut by the kill mid-line: not an acknowledgement
        kind, *rest = line.split()
        assert kind in ("E", "F") and len(rest) == (3 if kind == "E" else 1), repr(line)
        if kind == "E":
            tag, i = rest[2].rsplit(":", 1)
            acks.appends[(int(rest[0]), int(rest[1]))] = (tag, int(i))
        else:
            writer.acked_version = int(rest[0])
        count += 1
    return count


async def read_log(db: Path) -> list[StoredEvent]:
    async with await Database.open(db) as database:
        return await SqliteEventLog(database).read(SESSION)


def check_log(events: list[StoredEvent], acks: Acks) -> None:
    assert [e.seq for e in events] == list(range(1, len(events) + 1)), "seq not dense"
    for (first, last), (tag, i) in acks.appends.items():
        got = [e.event for e in events[first - 1 : last]]
        # The revision an iteration claimed is checked below; compare everything else.
        want = batch_for(tag, i, revision=0)
        assert len(got) == len(want), f"acknowledged append {tag}:{i} lost or cut"
        for have, expected in zip(got, want, strict=True):
            if isinstance(expected, UserMessage):
                assert have == expected, f"seq range {first}-{last} holds {have!r}"
            else:
                assert isinstance(have, GoalChange) and have.snapshot is not None
                assert have.snapshot.id == SHARED_GOAL
    revisions = [
        e.event.snapshot.revision
        for e in events
        if isinstance(e.event, GoalChange) and e.event.snapshot is not None
    ]
    assert revisions == sorted(set(revisions)), "a goal revision was claimed twice"


def check_file(writer: Writer) -> None:
    if not writer.file.exists():
        # Killed before its first write finished: fine only if none was acknowledged.
        assert writer.acked_version == 0, f"{writer.file.name} acknowledged but missing"
        return
    data = json.loads(writer.file.read_text())
    version = data["version"]
    assert version in (writer.acked_version, writer.acked_version + 1), (
        f"{writer.file.name} holds version {version}, acknowledged {writer.acked_version}"
    )
    assert writer.file.read_text() == file_text(version)
    writer.acked_version = version


def test_sigkill_loses_nothing_acknowledged_and_tears_nothing(tmp_path: Path) -> None:
    rng = random.Random(20261130)
    db = tmp_path / "plangate.db"
    writers = [Writer("a", tmp_path / "a.json"), Writer("b", tmp_path / "b.json")]
    acks = Acks()
    kills = acknowledged = 0
    for round_no in range(ROUNDS):
        for writer in writers:
            start(writer, db, round_no)
        for writer in writers:  # both start together: the first round migrates a new file
            wait_ready(writer)
        # Two independent random kill moments, 0 to 150 ms after both are running.
        moments = sorted((rng.uniform(0, 0.15), w) for w in writers)
        began = time.monotonic()
        for at, writer in moments:
            time.sleep(max(0.0, at - (time.monotonic() - began)))
            acknowledged += kill_and_collect(writer, acks)
            kills += 1
        check_log(asyncio.run(read_log(db)), acks)
        for writer in writers:
            check_file(writer)
    assert kills == 2 * ROUNDS
    # Work really happened between the kills (a per-kill quota would depend on machine speed).
    assert acknowledged > 0
    assert acks.appends
    # Every appender of a process got appends through, so commits really were shared.
    tags = {tag.rsplit(".", 1)[1] for tag, _ in acks.appends.values()}
    assert tags == {str(k) for k in range(WRITERS)}
