"""`plangate doctor`'s database line: SQLite in the home, or PostgreSQL reached and its schema
version read (nothing written); `PLANGATE_DATABASE_URL` is checked as it is loaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.doctor import check_database
from bot.settings import Settings, load_settings
from engine.errors import ConfigError
from storage.postgres.db import PgDatabase
from storage.postgres.migrations import MIGRATIONS
from tests.pg import Cluster, pg_cluster, pg_dsn

__all__ = ["pg_cluster", "pg_dsn"]


def _settings(tmp_path: Path, url: str | None) -> Settings:
    env = {"PLANGATE_HOME": str(tmp_path / "home"), "PLANGATE_WORKSPACE": str(tmp_path)}
    if url is not None:
        env["PLANGATE_DATABASE_URL"] = url
    return load_settings(env, env_file=None)


async def test_without_a_url_the_database_is_sqlite_in_the_home(tmp_path: Path) -> None:
    ok, line = await check_database(_settings(tmp_path, None))
    assert ok and line == f"database: SQLite in {tmp_path / 'home' / 'plangate.db'}"


async def test_postgresql_is_reached_and_its_schema_version_named(
    tmp_path: Path, pg_dsn: str
) -> None:
    settings = _settings(tmp_path, pg_dsn)
    ok, line = await check_database(settings)
    assert ok and line.startswith("database: PostgreSQL ")
    assert line.endswith(f"schema version 0, migrated to {len(MIGRATIONS)} at start")
    await (await PgDatabase.open(pg_dsn)).close()
    ok, line = await check_database(settings)
    assert ok and line.endswith("schema version up to date")


async def test_an_unreachable_database_fails_the_check(tmp_path: Path, pg_cluster: Cluster) -> None:
    ok, line = await check_database(_settings(tmp_path, pg_cluster.dsn("no_such_database")))
    assert not ok
    assert line.startswith("database: PostgreSQL did not answer (InvalidCatalogNameError")


def test_a_url_of_another_database_is_refused_as_settings_load(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="PLANGATE_DATABASE_URL"):
        _settings(tmp_path, "mysql://u:p@host/db")
