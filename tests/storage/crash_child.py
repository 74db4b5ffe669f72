"""The process that test_crash.py kills: it appends and rewrites a file until SIGKILL.

Run as ``python -m tests.storage.crash_child DB SESSION JSON_FILE TAG``. ``WRITERS`` tasks
append concurrently to the one session (tags ``TAG.0``, ``TAG.1``, ...), so their appends share
group commits; the first also rewrites the file. After each append or file write returns it
prints (and flushes) an acknowledgement, so whatever the parent read before the kill was
durable by this process's own account:

    E <first seq> <last seq> <tag>:<i>     an append of iteration i returned
    F <version>                            the file now holds <version>
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from engine.errors import AppendConflict
from engine.events import GoalChange, SessionEvent
from storage.db import Database
from storage.eventlog import SqliteEventLog
from storage.files import atomic_write_text
from tests.storage.helpers import goal, says

SHARED_GOAL = "shared"


def batch_for(tag: str, i: int, revision: int) -> list[SessionEvent]:
    """Iteration i's append: 1-3 messages, and every fourth time a claim of a goal revision."""
    events: list[SessionEvent] = [says(f"{tag}:{i}:{j}") for j in range(1 + i % 3)]
    if i % 4 == 0:
        events.append(goal(revision, goal_id=SHARED_GOAL))
    return events


def file_text(version: int) -> str:
    """Version ``version`` of the file: its size varies (up to ~60 KB), so a torn or mixed
    write cannot pass for a whole one."""
    pad = chr(ord("a") + version % 26) * (1000 + version * 7919 % 60_000)
    return json.dumps({"version": version, "pad": pad})


# Appenders per process: concurrent appends share commits (the database's group commit).
WRITERS = 3


async def appender(
    log: SqliteEventLog, session_id: str, tag: str, revision: int, file: Path | None
) -> None:
    """Append batches forever; the one given ``file`` also rewrites it after each append."""
    version = json.loads(file.read_text())["version"] if file and file.exists() else 0
    i = 0
    while True:
        try:
            stored = await log.append(session_id, batch_for(tag, i, revision + 1))
        except AppendConflict:
            revision += 1  # another writer took it; nothing of this batch committed
        else:
            if i % 4 == 0:
                revision += 1
            print(f"E {stored[0].seq} {stored[-1].seq} {tag}:{i}", flush=True)
        if file is not None:
            version += 1
            atomic_write_text(file, file_text(version))
            print(f"F {version}", flush=True)
        else:
            await asyncio.sleep(0)  # let the others queue behind the commit in flight
        i += 1


async def main(db_path: str, session_id: str, file_path: str, tag: str) -> None:
    db = await Database.open(db_path)
    log = SqliteEventLog(db)
    revision = max(
        (
            e.event.snapshot.revision
            for e in await log.read(session_id)
            if isinstance(e.event, GoalChange) and e.event.snapshot is not None
        ),
        default=0,
    )
    print("ready", flush=True)
    await asyncio.gather(
        *(
            appender(log, session_id, f"{tag}.{k}", revision, Path(file_path) if k == 0 else None)
            for k in range(WRITERS)
        )
    )


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
