"""The end-to-end flows with the stores in PostgreSQL instead of SQLite: the same tests as
tests/telegram/test_app_e2e.py (the real engine, PTB on the fake Bot API, the scripted model
over the openai SDK), run with ``on_database`` so the live rig opens a real PostgreSQL
database: a plan reviewed, approved and run to Done in a group, and a restart between review
and approval (the new process finds the session, the card id and the plan in the database)."""

from __future__ import annotations

from pathlib import Path

import asyncpg

from tests.fakebot.server import FakeBotApi
from tests.pg import pg_cluster, pg_dsn
from tests.telegram import test_app_e2e as e2e
from tests.telegram.live import on_database

__all__ = ["pg_cluster", "pg_dsn"]


async def _rows(url: str, query: str) -> int:
    conn = await asyncpg.connect(url)
    try:
        return int(await conn.fetchval(query))
    finally:
        await conn.close()


async def test_plan_review_approve_run_to_done_on_postgresql(
    fake_api: FakeBotApi, tmp_path: Path, pg_dsn: str
) -> None:
    with on_database(pg_dsn):
        await e2e.test_plan_review_approve_run_to_done_in_a_group(fake_api, tmp_path)
    # Everything durable went to PostgreSQL: no SQLite file in the home.
    assert not (tmp_path / "home" / "plangate.db").exists()
    assert await _rows(pg_dsn, "SELECT count(*) FROM events") > 20
    assert await _rows(pg_dsn, "SELECT count(*) FROM chat_bindings") == 1
    assert await _rows(pg_dsn, "SELECT count(*) FROM meta") >= 1


async def test_a_restart_mid_plan_keeps_editing_the_same_card_on_postgresql(
    fake_api: FakeBotApi, tmp_path: Path, pg_dsn: str
) -> None:
    with on_database(pg_dsn):
        await e2e.test_a_restart_mid_plan_keeps_editing_the_same_card(fake_api, tmp_path)
    assert not (tmp_path / "home" / "plangate.db").exists()
    assert await _rows(pg_dsn, "SELECT count(*) FROM sessions") == 1
