"""One deployment's id, written once in the shared home and in the database, compared at every
start (docs/scaling.md, "Shared folders").

Replicas share two things: a PostgreSQL database and a folder (plangate's home, on a volume
every replica mounts). A replica that mounted the wrong folder (or none: an empty local one in
its place) or was given another database would run beside its peers on state they cannot see:
plans written where no one else reads them, events whose plan files are elsewhere. So the first
start of a deployment makes a random id and writes it in both places, in one step under a lock
held in the database; every later start reads both and refuses, in one line naming both ids,
when they differ or one is missing.

Only PostgreSQL deployments have the id: with SQLite the database is a file inside the home, so
the two cannot belong to different deployments, and nothing is written.
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from engine.errors import ConfigError
from storage.files import atomic_write_text, run_durable

if TYPE_CHECKING:
    import asyncpg

# The file in the home and the key of the database's ``meta`` row that hold the id.
ID_FILE = "deployment-id"
META_KEY = "deployment_id"

# The advisory lock the first start holds while it writes both (a bigint of plangate's own:
# "deploy" in ASCII), so replicas starting at once on a new deployment agree on one id.
DEPLOYMENT_LOCK = 0x6465706C6F79


def id_path(home: Path) -> Path:
    """Where the home keeps its deployment id."""
    return home / ID_FILE


def read_home_id(home: Path) -> str | None:
    """The deployment id the home holds, or ``None`` when it has none yet."""
    try:
        text = id_path(home).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    return text or None


@dataclass(frozen=True, slots=True)
class Ids:
    """The two ids a start compares: the home's and the database's (``None``: not there)."""

    home: str | None
    database: str | None

    @property
    def match(self) -> bool:
        """Both written and equal."""
        return self.home is not None and self.home == self.database

    @property
    def new(self) -> bool:
        """Neither written: the deployment's first start."""
        return self.home is None and self.database is None


def mismatch_line(home: Path, ids: Ids) -> str:
    """The one line a replica stops with when the two ids differ (or one is missing)."""
    return (
        f"the shared home {home} holds deployment {ids.home or '(none)'} but the database "
        f"(PLANGATE_DATABASE_URL) holds deployment {ids.database or '(none)'}: this replica "
        "does not see its peers' files or database; mount the shared volume the other "
        "replicas use at the same path and give every replica the same PLANGATE_DATABASE_URL "
        f"(docs/scaling.md, 'Shared folders')"
    )


async def read_database_id(conn: asyncpg.Connection) -> str | None:
    """The deployment id in the database's ``meta`` table, or ``None`` (also before the
    schema exists, so ``plangate doctor`` can ask a database plangate never opened)."""
    if not await conn.fetchval("SELECT to_regclass('meta') IS NOT NULL"):
        return None
    value = await conn.fetchval("SELECT value FROM meta WHERE key = $1", META_KEY)
    return None if value is None else str(value)


async def probe_database_id(url: str, *, timeout_s: float = 5.0) -> str | None:
    """Connect to ``url``, read its deployment id and disconnect; nothing is written
    (``plangate doctor``)."""
    import asyncpg

    conn = await asyncpg.connect(url, timeout=timeout_s)
    try:
        return await read_database_id(conn)
    finally:
        await conn.close()


async def claim_deployment(pool: asyncpg.Pool, home: Path) -> str:
    """Compare the home's deployment id with the database's; on the first start of both, write
    a new one in each. Returns the id; raises :class:`ConfigError` (one line) when they differ
    or only one of them has one.

    The first start writes the file (atomically, fsync'd) and then commits the database row, in
    one transaction holding :data:`DEPLOYMENT_LOCK`; a peer starting at the same time waits for
    the lock and then finds both. Should the commit fail, the file is removed again, so a later
    start does not find a home that names a deployment the database never heard of.
    """
    written: str | None = None
    try:
        async with pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", DEPLOYMENT_LOCK)
            ids = Ids(await run_durable(read_home_id, home), await read_database_id(conn))
            if ids.match:
                assert ids.home is not None
                return ids.home
            if not ids.new:
                raise ConfigError(mismatch_line(home, ids))
            written = uuid.uuid4().hex
            await run_durable(atomic_write_text, id_path(home), written + "\n")
            await conn.execute("INSERT INTO meta (key, value) VALUES ($1, $2)", META_KEY, written)
    except BaseException:
        if written is not None:  # the row did not commit: neither may the file stay
            with contextlib.suppress(OSError):
                id_path(home).unlink()
        raise
    assert written is not None
    return written


__all__ = [
    "DEPLOYMENT_LOCK",
    "ID_FILE",
    "META_KEY",
    "Ids",
    "claim_deployment",
    "id_path",
    "mismatch_line",
    "probe_database_id",
    "read_database_id",
    "read_home_id",
]
