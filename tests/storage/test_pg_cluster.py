"""The tests' PostgreSQL is real and isolated: a database per test, on a unix socket."""

from __future__ import annotations

import asyncpg

from tests.pg import Cluster, pg_cluster, pg_dsn

__all__ = ["pg_cluster", "pg_dsn"]


async def test_each_test_gets_an_empty_database_of_its_own(
    pg_dsn: str, pg_cluster: Cluster
) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        assert (
            await conn.fetchval("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'") == 0
        )
        await conn.execute("CREATE TABLE t (seq int PRIMARY KEY)")
        await conn.execute("INSERT INTO t VALUES (1)")
        with_dup = None
        try:
            await conn.execute("INSERT INTO t VALUES (1)")
        except asyncpg.UniqueViolationError as exc:
            with_dup = exc
        assert with_dup is not None
        assert str(pg_cluster.socket_dir) in pg_dsn
        assert int(await conn.fetchval("SHOW server_version_num")) >= 130000
    finally:
        await conn.close()
