"""Durable writes have their own threads: a default pool tied up by stuck work cannot stop a
plan save."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

from engine.plan.types import PlanSidecar
from storage.plan_files import FilePlanStore, SessionLocation


async def test_a_plan_save_completes_while_the_default_pool_is_stuck(tmp_path: Path) -> None:
    async def locate(session_id: str) -> SessionLocation:
        return SessionLocation(workspace=str(tmp_path / "ws"))

    store = FilePlanStore(tmp_path / "home", locate)
    sidecar = PlanSidecar(
        id="p" * 32, session_id="s1", title="T", status="Editing", pre_init_editing=True
    )
    loop = asyncio.get_running_loop()
    release = threading.Event()
    # More stuck jobs than the default pool has threads (min(32, cores + 4)).
    stuck = [
        loop.run_in_executor(None, release.wait) for _ in range(min(32, (os.cpu_count() or 1) + 4))
    ]
    try:
        await asyncio.wait_for(store.save("s1", sidecar, md="# T\n"), 10)
    finally:
        release.set()
        await asyncio.gather(*stuck)
    assert (await store.md_path("s1")).read_text(encoding="utf-8") == "# T\n"
    assert (await store.json_path("s1")).is_file()
