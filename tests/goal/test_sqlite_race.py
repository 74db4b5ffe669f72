"""The goal compare-and-set across services and processes on one real SQLite file."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from engine.events import GoalChange
from engine.goal.fold import GoalRefusal
from engine.goal.service import GoalService
from engine.goal.types import GoalRef, GoalSnapshot, GoalTombstone
from storage.db import Database
from storage.eventlog import SqliteEventLog

SID = "race-session"

CHILD = """
import asyncio, json, sys
from engine.goal.fold import GoalRefusal
from engine.goal.service import GoalService
from engine.goal.types import GoalRef
from storage.db import Database
from storage.eventlog import SqliteEventLog

async def main(path, goal_id, revision, tag):
    db = await Database.open(path)
    try:
        goals = GoalService(SqliteEventLog(db))
        ref = GoalRef(id=goal_id, revision=revision)
        results = await asyncio.gather(
            *(goals.edit(sys.argv[5], ref, objective=f"{tag} {i}") for i in range(50))
        )
        print(json.dumps(sum(not isinstance(r, GoalRefusal) for r in results)))
    finally:
        await db.close()

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]))
"""


async def test_hundred_mutations_two_services_one_sqlite_file(tmp_path: Path) -> None:
    path = tmp_path / "plangate.db"
    db_a = await Database.open(path)
    db_b = await Database.open(path)
    try:
        a = GoalService(SqliteEventLog(db_a))
        b = GoalService(SqliteEventLog(db_b))
        goal = await a.create(SID, "race me")
        assert isinstance(goal, GoalSnapshot)
        ref = goal.ref

        async def mutate(i: int) -> GoalSnapshot | GoalTombstone | GoalRefusal:
            svc = a if i % 2 else b
            match i % 3:
                case 0:
                    return await svc.edit(SID, ref, objective=f"edit {i}")
                case 1:
                    return await svc.pause(SID, ref)
                case _:
                    return await svc.clear(SID, ref)

        results = await asyncio.gather(*(mutate(i) for i in range(100)))
        winners = [r for r in results if not isinstance(r, GoalRefusal)]
        assert len(winners) == 1
        assert {r.code for r in results if isinstance(r, GoalRefusal)} == {"stale-revision"}
        stored = [e.event for e in await SqliteEventLog(db_a).read(SID)]
        changes = [e for e in stored if isinstance(e, GoalChange)]
        assert len(changes) == 2
        # Both services fold the same single winner.
        assert await a.get(SID) == await b.get(SID)
    finally:
        await db_a.close()
        await db_b.close()


async def test_two_processes_one_sqlite_file(tmp_path: Path) -> None:
    path = tmp_path / "plangate.db"
    db = await Database.open(path)
    try:
        goals = GoalService(SqliteEventLog(db))
        goal = await goals.create(SID, "shared")
        assert isinstance(goal, GoalSnapshot)
    finally:
        await db.close()
    root = Path(__file__).resolve().parents[2]
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            CHILD,
            str(path),
            goal.id,
            str(goal.revision),
            tag,
            SID,
            cwd=root,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for tag in ("p1", "p2")
    ]
    outputs = [await p.communicate() for p in procs]
    for (_, err), proc in zip(outputs, procs, strict=True):
        assert proc.returncode == 0, err.decode()
    wins = sum(json.loads(out) for out, _ in outputs)
    assert wins == 1
    db = await Database.open(path)
    try:
        final = await GoalService(SqliteEventLog(db)).get(SID)
        assert final is not None and final.revision == 2
        stale = await GoalService(SqliteEventLog(db)).edit(SID, GoalRef(id=goal.id, revision=1))
        assert isinstance(stale, GoalRefusal) and stale.code == "stale-revision"
    finally:
        await db.close()
