"""`plangate migrate --from sqlite:...`: a home written by the SQLite store, copied into
PostgreSQL; every table counted, and the PostgreSQL stores then read what SQLite held and go
on from there (seqs, goal claims, start-up marks, roles, meta)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from bot.migrate import run_migrate
from engine.errors import AppendConflict, ConfigError
from engine.events import CommandRun, TurnStart
from engine.roles.types import RoleGranted
from storage.open import open_storage
from storage.postgres.chatlog import PgChatLog
from storage.postgres.db import PgDatabase
from storage.postgres.eventlog import PgEventLog
from storage.postgres.sessions import PgSessionStore
from tests.keys import chat
from tests.pg import pg_cluster, pg_dsn
from tests.storage.helpers import goal, says

__all__ = ["pg_cluster", "pg_dsn"]


async def test_a_sqlite_home_is_copied_and_the_postgresql_store_goes_on_from_it(
    tmp_path: Path, pg_dsn: str
) -> None:
    home = tmp_path / "home"
    sqlite = await open_storage(home)
    try:
        one = await sqlite.sessions.create_session(workspace="/w/a", profile="work")
        two = await sqlite.sessions.create_session(workspace="/w/b")
        child_parent = await sqlite.sessions.create_session(workspace="/w/c")
        await sqlite.sessions.bind_chat(chat(-100), one.id)
        await sqlite.sessions.bind_chat(chat(-100, 7), two.id)
        await sqlite.sessions.bind_chat(chat(5), child_parent.id)
        await sqlite.log.append(one.id, [says("a"), goal(1), says("b")])
        await sqlite.log.append(one.id, [TurnStart(turn_id="t1"), says("open turn")])
        await sqlite.log.append(two.id, [CommandRun(name="plan", data={"target": True})])
        await sqlite.log.append(child_parent.id, [says("x") for _ in range(300)])
        await sqlite.chat_log.append_chat("tg:-100", [RoleGranted(user_id="tg:1", name="Ana")])
        await sqlite.db.set_meta("last_update_id", "812")
        sqlite_events = {s: await sqlite.log.read(s) for s in (one.id, two.id, child_parent.id)}
        attention = await sqlite.log.needs_attention()
        bindings = await sqlite.sessions.chat_bindings()
    finally:
        await sqlite.close()

    out = io.StringIO()
    assert await run_migrate(f"sqlite:{home / 'plangate.db'}", pg_dsn, out) == 0
    lines = out.getvalue().splitlines()
    assert "events: 306 rows, the same on both sides" in lines
    assert "sessions: 3 rows, the same on both sides" in lines
    assert "session_heads: 3 rows, the same on both sides" in lines

    async with await PgDatabase.open(pg_dsn) as db:
        log, sessions = PgEventLog(db), PgSessionStore(db)
        for session_id, events in sqlite_events.items():
            assert await log.read(session_id) == events
        assert await log.needs_attention() == attention
        assert await sessions.chat_bindings() == bindings
        assert await sessions.get_session(one.id) == one
        assert [s.event for s in await PgChatLog(db).read_chat("tg:-100")] == [
            RoleGranted(user_id="tg:1", name="Ana")
        ]
        assert await db.get_meta("last_update_id") == "812"
        # The log goes on densely, and the copied goal claim still holds.
        more = await log.append(one.id, [says("c")])
        assert more[0].seq == 6
        with pytest.raises(AppendConflict):
            await log.append(one.id, [goal(1)])

    # A second copy into the same database is refused, and copies nothing.
    again = io.StringIO()
    assert await run_migrate(f"sqlite:{home / 'plangate.db'}", pg_dsn, again) == 1
    assert "already holds sessions" in again.getvalue()


async def test_a_source_that_is_not_sqlite_or_missing_is_refused(
    tmp_path: Path, pg_dsn: str
) -> None:
    with pytest.raises(ConfigError, match="sqlite:PATH"):
        await run_migrate(str(tmp_path / "plangate.db"), pg_dsn)
    out = io.StringIO()
    assert await run_migrate(f"sqlite:{tmp_path / 'none.db'}", pg_dsn, out) == 1
    assert "no such database file" in out.getvalue()
