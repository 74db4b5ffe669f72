from __future__ import annotations

from tests.fakebot.fixtures import fake_api
from tests.pg import pg_cluster, pg_dsn

__all__ = ["fake_api", "pg_cluster", "pg_dsn"]
