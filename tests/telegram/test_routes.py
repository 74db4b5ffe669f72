"""Routes: where a session lives, remembered in memory and in the meta table."""

from __future__ import annotations

from pathlib import Path

from bot.routes import ChatRoute, Routes, route_key
from storage.db import Database


async def test_a_restart_reads_a_stored_route_instead_of_rewriting_it(tmp_path: Path) -> None:
    async with await Database.open(tmp_path / "p.db") as db:
        await Routes(db).remember("s1", ChatRoute(-100, 7))
        assert await db.get_meta(route_key("s1")) == ChatRoute(-100, 7).encode()
        commits = db.commits
        routes = Routes(db)  # a new process
        await routes.remember("s1", ChatRoute(-100, 7))
        assert db.commits == commits
        assert await routes.lookup("s1") == ChatRoute(-100, 7)
        await routes.remember("s1", ChatRoute(-100, 8))  # moved: written
        assert db.commits == commits + 1
        assert await Routes(db).lookup("s1") == ChatRoute(-100, 8)
