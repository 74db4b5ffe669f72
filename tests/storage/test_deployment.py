"""A replica starts only on the home and the database its peers use: the deployment id is
written once in both (a file in the home, a row in the database) and compared at every start
(docs/scaling.md, "Shared folders"). Real PostgreSQL, real files."""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import pytest

from engine.errors import ConfigError
from storage.db import Database, database_path
from storage.deployment import META_KEY, claim_deployment, id_path, read_home_id
from storage.open import open_storage
from storage.postgres.db import PgDatabase
from tests.pg import Cluster, pg_cluster, pg_dsn

__all__ = ["pg_cluster", "pg_dsn"]


async def _database_id(url: str) -> str | None:
    conn = await asyncpg.connect(url)
    try:
        value = await conn.fetchval("SELECT value FROM meta WHERE key = $1", META_KEY)
    finally:
        await conn.close()
    return None if value is None else str(value)


async def _start(home: Path, url: str) -> None:
    """What a replica's start does with its stores: open them, then close them."""
    storage = await open_storage(home, database_url=url)
    await storage.close()


async def _other_database(cluster: Cluster, name: str) -> str:
    admin = await asyncpg.connect(cluster.dsn())
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    return cluster.dsn(name)


async def test_the_first_start_writes_one_id_in_both_and_later_starts_keep_it(
    tmp_path: Path, pg_dsn: str
) -> None:
    home = tmp_path / "shared" / "home"
    await _start(home, pg_dsn)
    written = read_home_id(home)
    assert written is not None and len(written) == 32
    assert await _database_id(pg_dsn) == written
    # A restart, or a second replica on the same folder and database: the same deployment.
    await _start(home, pg_dsn)
    await _start(home, pg_dsn)
    assert read_home_id(home) == written
    assert await _database_id(pg_dsn) == written


async def test_a_fresh_folder_in_place_of_the_shared_home_is_refused_naming_both_ids(
    tmp_path: Path, pg_dsn: str
) -> None:
    await _start(tmp_path / "shared", pg_dsn)
    deployment = read_home_id(tmp_path / "shared")
    # The volume was not mounted: the replica sees an empty local folder at the path.
    local = tmp_path / "local"
    with pytest.raises(ConfigError) as refused:
        await _start(local, pg_dsn)
    line = str(refused.value)
    assert "\n" not in line
    assert f"the shared home {local} holds deployment (none)" in line
    assert f"the database (PLANGATE_DATABASE_URL) holds deployment {deployment}" in line
    assert "mount the shared volume the other replicas use at the same path" in line
    # Refusing writes nothing: the folder stays without an id, the database keeps its own.
    assert not id_path(local).exists()
    assert await _database_id(pg_dsn) == deployment


async def test_a_new_database_beside_a_used_home_is_refused_and_left_unmarked(
    tmp_path: Path, pg_dsn: str, pg_cluster: Cluster
) -> None:
    home = tmp_path / "shared"
    await _start(home, pg_dsn)
    deployment = read_home_id(home)
    other = await _other_database(pg_cluster, "deployment_other")
    with pytest.raises(ConfigError) as refused:
        await _start(home, other)
    line = str(refused.value)
    assert f"the shared home {home} holds deployment {deployment}" in line
    assert "the database (PLANGATE_DATABASE_URL) holds deployment (none)" in line
    assert "give every replica the same PLANGATE_DATABASE_URL" in line
    assert await _database_id(other) is None
    assert read_home_id(home) == deployment


async def test_a_home_and_a_database_of_two_deployments_are_refused_both_ways(
    tmp_path: Path, pg_dsn: str, pg_cluster: Cluster
) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    other = await _other_database(pg_cluster, "deployment_b")
    await _start(first, pg_dsn)
    await _start(second, other)
    a, b = read_home_id(first), read_home_id(second)
    assert a and b and a != b
    for home, url, home_id, db_id in ((first, other, a, b), (second, pg_dsn, b, a)):
        with pytest.raises(ConfigError) as refused:
            await _start(home, url)
        line = str(refused.value)
        assert f"holds deployment {home_id} but the database" in line
        assert f"holds deployment {db_id}: this replica" in line
    # Each pair still starts.
    await _start(first, pg_dsn)
    await _start(second, other)


async def test_replicas_starting_at_once_on_a_new_deployment_agree_on_one_id(
    tmp_path: Path, pg_dsn: str
) -> None:
    home = tmp_path / "shared"
    await (await PgDatabase.open(pg_dsn)).close()  # the schema, so only the claim races
    databases = [await PgDatabase.open(pg_dsn, pool_size=2) for _ in range(4)]
    try:
        ids = await asyncio.gather(*(claim_deployment(db.pool, home) for db in databases))
    finally:
        for db in databases:
            await db.close()
    assert len(set(ids)) == 1
    assert read_home_id(home) == ids[0] == await _database_id(pg_dsn)


async def test_a_sqlite_home_gets_no_deployment_id(tmp_path: Path) -> None:
    home = tmp_path / "home"
    await _start_sqlite(home)
    await _start_sqlite(home)
    assert sorted(p.name for p in home.iterdir() if "deployment" in p.name) == []
    async with await Database.open(database_path(home)) as db:
        assert await db.get_meta(META_KEY) is None


async def _start_sqlite(home: Path) -> None:
    storage = await open_storage(home)
    await storage.close()


async def test_plangate_run_on_a_foreign_home_stops_with_one_line_and_exit_code_2(
    tmp_path: Path, pg_dsn: str
) -> None:
    from tests.cli.test_cli import _clean_env, _plangate
    from tests.fakebot.server import FakeBotApi

    await _start(tmp_path / "shared", pg_dsn)
    deployment = read_home_id(tmp_path / "shared")
    local, workspace = tmp_path / "local", tmp_path / "workspace"
    workspace.mkdir()
    api = FakeBotApi()
    await api.start()
    try:
        env = _clean_env(
            PLANGATE_TELEGRAM_TOKEN=api.token,
            PLANGATE_TELEGRAM_API_URL=api.base_url,
            PLANGATE_OWNER_IDS="1",
            PLANGATE_HOME=str(local),
            PLANGATE_WORKSPACE=str(workspace),
            PLANGATE_DATABASE_URL=pg_dsn,
            PLANGATE_MODEL_BASE_URL="http://127.0.0.1:9/v1",
            PLANGATE_SANDBOX="off",
        )
        code, _, err = await _plangate("run", cwd=tmp_path, env=env)
    finally:
        await api.stop()
    assert code == 2
    lines = [line for line in err.splitlines() if line.startswith("plangate: ")]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"plangate: the shared home {local} holds deployment (none)")
    assert f"holds deployment {deployment}: this replica" in lines[0]
    assert not id_path(local).exists()
