"""Opening everything durable under one plangate home, for the composition root.

<home>/plangate.db            the event log, sessions, chat bindings, the chat log, meta
                              (or a PostgreSQL database, when a database URL is given)
<home>/projects/<slug>/...    plan files (storage.plan_files)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import ConfigError
from engine.leases import LocalChatLeases
from engine.ports import ChatLeases, Clock
from storage.chatlog import SqliteChatLog
from storage.db import Database, database_path
from storage.deployment import claim_deployment
from storage.eventlog import SqliteEventLog
from storage.plan_files import FilePlanStore
from storage.postgres import is_postgres_url
from storage.sessions import SqliteSessionStore

if TYPE_CHECKING:
    # asyncpg is an optional extra: imported only when a database URL asks for it.
    from storage.postgres.chatlog import PgChatLog
    from storage.postgres.db import PgDatabase
    from storage.postgres.eventlog import PgEventLog
    from storage.postgres.leases import LeaseFence
    from storage.postgres.sessions import PgSessionStore


@dataclass(frozen=True, slots=True)
class Storage:
    """The stores of one home; close the database when done."""

    home: Path
    db: Database | PgDatabase
    log: SqliteEventLog | PgEventLog
    sessions: SqliteSessionStore | PgSessionStore
    plan_store: FilePlanStore
    chat_log: SqliteChatLog | PgChatLog
    # Which replica owns which chat (docs/storage.md, "Leases and fencing"): in PostgreSQL,
    # shared by the replicas; in a SQLite home, this one process's, in memory.
    leases: ChatLeases
    # This replica's fence (PostgreSQL with a replica id): the epochs the stores write at.
    fence: LeaseFence | None = None
    # The connection holding this replica's name (storage.postgres.leases.claim_replica).
    name_lock: Any = None

    async def close(self) -> None:
        try:
            await self.db.close()
        finally:
            # The name goes last: it is held until every write of this replica is done.
            if self.name_lock is not None:
                await self.name_lock.close()


async def open_storage(
    home: Path,
    *,
    clock: Clock | None = None,
    database_url: str | None = None,
    replica: str | None = None,
) -> Storage:
    """Open (creating and migrating) the database and the plan store under ``home``.

    ``database_url`` (``postgresql://...``, the ``PLANGATE_DATABASE_URL`` setting) puts the
    database in PostgreSQL; without it, SQLite in ``<home>/plangate.db``. The plan files stay
    under ``home`` either way. Raises ``ValueError`` for a URL of another kind, and
    ``ConfigError`` (one line naming the setting) when PostgreSQL cannot be reached or refuses,
    or when the home and the database belong to different deployments
    (``storage.deployment``).

    ``replica`` (PostgreSQL only): this process's name among several replicas. Its appends and
    plan file writes are then fenced by the chat leases it holds (``storage.postgres.leases``),
    so it writes for a chat only after acquiring the chat's lease through ``Storage.leases``.
    One live process per name: ``ConfigError`` while another holds it.
    """
    home.mkdir(parents=True, exist_ok=True)
    if database_url:
        if not is_postgres_url(database_url):
            raise ValueError("the database URL must start with postgresql:// or postgres://")
        try:
            from storage.postgres.chatlog import PgChatLog
            from storage.postgres.db import PgDatabase
            from storage.postgres.eventlog import PgEventLog
            from storage.postgres.leases import LeaseFence, PgChatLeases, claim_replica
            from storage.postgres.sessions import PgSessionStore
        except ImportError:
            raise ConfigError(
                "PLANGATE_DATABASE_URL: PostgreSQL needs asyncpg; pip install 'plangate[postgres]'"
            ) from None
        try:
            pg = await PgDatabase.open(database_url)
        except OSError as exc:  # ConnectionError and TimeoutError are OSErrors
            raise ConfigError(
                f"PLANGATE_DATABASE_URL: the database did not answer ({type(exc).__name__}: "
                f"{exc}); plangate doctor checks it"
            ) from exc
        except Exception as exc:
            # asyncpg's refusals (a wrong password, no such database) are its own classes.
            if type(exc).__module__.startswith("asyncpg"):
                raise ConfigError(
                    f"PLANGATE_DATABASE_URL: the database refused ({type(exc).__name__}: "
                    f"{exc}); plangate doctor checks it"
                ) from exc
            raise
        name_lock = None
        try:
            # Replicas share this database and the home: both must be the deployment's.
            await claim_deployment(pg.pool, home)
            if replica:
                # One live process per replica name, or the fence could not tell them apart.
                name_lock = await claim_replica(pg, replica)
        except BaseException:
            await pg.close()
            raise
        fence = LeaseFence(pg, replica) if replica else None
        clocked = {} if clock is None else {"clock": clock}
        sessions_pg = PgSessionStore(pg, fence=fence, **clocked)
        return Storage(
            home=home,
            db=pg,
            log=PgEventLog(pg, fence=fence, **clocked),
            sessions=sessions_pg,
            plan_store=FilePlanStore.from_sessions(home, sessions_pg, fence=fence),
            chat_log=PgChatLog(pg, **clocked),
            leases=PgChatLeases(pg, fence=fence),
            fence=fence,
            name_lock=name_lock,
        )
    db = await Database.open(database_path(home))
    log = SqliteEventLog(db) if clock is None else SqliteEventLog(db, clock=clock)
    sessions = SqliteSessionStore(db) if clock is None else SqliteSessionStore(db, clock=clock)
    plan_store = FilePlanStore.from_sessions(home, sessions)
    chat_log = SqliteChatLog(db) if clock is None else SqliteChatLog(db, clock=clock)
    return Storage(
        home=home,
        db=db,
        log=log,
        sessions=sessions,
        plan_store=plan_store,
        chat_log=chat_log,
        leases=LocalChatLeases() if clock is None else LocalChatLeases(clock=clock),
    )
