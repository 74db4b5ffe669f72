"""Replicas share their home (docs/scaling.md), so each keeps its own heartbeat there: one
replica's beat never answers `plangate health` for another, and one stopping leaves the others'
beats alone. Without PostgreSQL nothing changes: ``<home>/heartbeat``."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bot.health import HEARTBEAT_FILE, beat, check, heartbeat, heartbeat_name


def test_one_process_keeps_the_one_heartbeat_file() -> None:
    assert heartbeat_name(replicated=False, host="a") == HEARTBEAT_FILE == "heartbeat"


async def test_each_replica_beats_for_itself_in_the_shared_home(tmp_path: Path) -> None:
    a = heartbeat_name(replicated=True, host="replica-a")
    b = heartbeat_name(replicated=True, host="replica-b")
    assert a == "heartbeats/replica-a" and a != b
    async with heartbeat(tmp_path, name=a):
        for _ in range(500):  # the first beat is written in a thread: wait for it (bounded)
            if (tmp_path / a).exists():
                break
            await asyncio.sleep(0.01)
        assert (tmp_path / a).exists()
        assert check(tmp_path, name=a) is None
        # The other replica (its loop wedged, or never started) is not covered by a's beat.
        assert (check(tmp_path, name=b) or "").startswith("not running")
        beat(tmp_path, name=b)
    # a stopped cleanly: its beat is gone, b's stays.
    assert not (tmp_path / a).exists()
    assert check(tmp_path, name=b) is None
