"""`plangate doctor`'s shared-volume line: with PostgreSQL, the home's deployment id against the
database's, and whether the home can be written; nothing is written by the check. With SQLite
there is no such line."""

from __future__ import annotations

from pathlib import Path

from bot.doctor import check_shared_volume
from bot.settings import Settings, load_settings
from storage.deployment import id_path, read_home_id
from storage.open import open_storage
from tests.pg import pg_cluster, pg_dsn

__all__ = ["pg_cluster", "pg_dsn"]


def _settings(home: Path, workspace: Path, url: str | None) -> Settings:
    env = {"PLANGATE_HOME": str(home), "PLANGATE_WORKSPACE": str(workspace)}
    if url is not None:
        env["PLANGATE_DATABASE_URL"] = url
    return load_settings(env, env_file=None)


async def test_sqlite_homes_have_no_shared_volume_line(tmp_path: Path) -> None:
    assert await check_shared_volume(_settings(tmp_path / "home", tmp_path, None)) == []


async def test_before_the_first_start_the_line_says_so_and_writes_nothing(
    tmp_path: Path, pg_dsn: str
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    [(ok, line)] = await check_shared_volume(_settings(home, tmp_path, pg_dsn))
    assert ok
    assert line == (
        f"shared volume {home}: no deployment id yet; the first start writes one here and in "
        "the database; writable"
    )
    assert not id_path(home).exists()


async def test_after_a_start_the_ids_match_and_a_foreign_home_fails(
    tmp_path: Path, pg_dsn: str
) -> None:
    home = tmp_path / "home"
    await (await open_storage(home, database_url=pg_dsn)).close()
    deployment = read_home_id(home)
    [(ok, line)] = await check_shared_volume(_settings(home, tmp_path, pg_dsn))
    assert ok and line == (
        f"shared volume {home}: deployment {deployment}, the database's too; writable"
    )
    local = tmp_path / "local"
    local.mkdir()
    [(ok, line)] = await check_shared_volume(_settings(local, tmp_path, pg_dsn))
    assert not ok
    assert line.startswith(f"shared volume: the shared home {local} holds deployment (none)")
    assert f"holds deployment {deployment}: this replica" in line


async def test_a_schema_one_release_ahead_passes_and_says_to_upgrade_this_replica(
    tmp_path: Path, pg_dsn: str
) -> None:
    import asyncpg

    from bot.doctor import check_database
    from storage.postgres.migrations import MIGRATIONS

    await (await open_storage(tmp_path / "home", database_url=pg_dsn)).close()
    settings = _settings(tmp_path / "home", tmp_path, pg_dsn)
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute("UPDATE plangate_schema SET version = $1", len(MIGRATIONS) + 1)
        ok, line = await check_database(settings)
        assert ok and line.endswith(
            f"schema version {len(MIGRATIONS) + 1}, one ahead of this plangate "
            f"({len(MIGRATIONS)}): upgrade this replica next"
        )
        await conn.execute("UPDATE plangate_schema SET version = $1", len(MIGRATIONS) + 2)
        ok, line = await check_database(settings)
        assert not ok and line.endswith("upgrade plangate")
    finally:
        await conn.close()


async def test_the_lease_line_counts_live_leases_per_replica_and_the_lapsed(
    tmp_path: Path, pg_dsn: str
) -> None:
    from bot.doctor import check_leases
    from storage.postgres.db import PgDatabase
    from storage.postgres.leases import PgChatLeases

    settings = _settings(tmp_path / "home", tmp_path, pg_dsn)
    assert await check_leases(_settings(tmp_path / "home", tmp_path, None)) == []
    assert await check_leases(settings) == [
        (True, "leases: no lease table yet; the next start creates it")
    ]
    async with await PgDatabase.open(pg_dsn) as db:
        leases = PgChatLeases(db)
        for chat in ("tg:1", "tg:2", "tg:3"):
            assert await leases.acquire(chat, "replica-a", 60) is not None
        assert await leases.acquire("tg:4", "replica-b", 60) is not None
        await leases.release("tg:3", "replica-a")
    assert await check_leases(settings) == [
        (
            True,
            "leases: 3 chats held by 2 replicas (replica-a 2, replica-b 1), 1 lapsed or "
            "released; lease time 30 s (PLANGATE_LEASE_TTL)",
        )
    ]
