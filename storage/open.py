"""Opening everything durable under one plangate home, for the composition root.

<home>/plangate.db            the event log, sessions, chat bindings, the chat log, meta
                              (or a PostgreSQL database, when a database URL is given)
<home>/projects/<slug>/...    plan files (storage.plan_files)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from engine.errors import ConfigError
from engine.ports import Clock
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

    async def close(self) -> None:
        await self.db.close()


async def open_storage(
    home: Path, *, clock: Clock | None = None, database_url: str | None = None
) -> Storage:
    """Open (creating and migrating) the database and the plan store under ``home``.

    ``database_url`` (``postgresql://...``, the ``PLANGATE_DATABASE_URL`` setting) puts the
    database in PostgreSQL; without it, SQLite in ``<home>/plangate.db``. The plan files stay
    under ``home`` either way. Raises ``ValueError`` for a URL of another kind, and
    ``ConfigError`` (one line naming the setting) when PostgreSQL cannot be reached or refuses,
    or when the home and the database belong to different deployments
    (``storage.deployment``).
    """
    home.mkdir(parents=True, exist_ok=True)
    if database_url:
        if not is_postgres_url(database_url):
            raise ValueError("the database URL must start with postgresql:// or postgres://")
        try:
            from storage.postgres.chatlog import PgChatLog
            from storage.postgres.db import PgDatabase
            from storage.postgres.eventlog import PgEventLog
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
        try:
            # Replicas share this database and the home: both must be the deployment's.
            await claim_deployment(pg.pool, home)
        except BaseException:
            await pg.close()
            raise
        log_pg = PgEventLog(pg) if clock is None else PgEventLog(pg, clock=clock)
        sessions_pg = PgSessionStore(pg) if clock is None else PgSessionStore(pg, clock=clock)
        chat_pg = PgChatLog(pg) if clock is None else PgChatLog(pg, clock=clock)
        return Storage(
            home=home,
            db=pg,
            log=log_pg,
            sessions=sessions_pg,
            plan_store=FilePlanStore.from_sessions(home, sessions_pg),
            chat_log=chat_pg,
        )
    db = await Database.open(database_path(home))
    log = SqliteEventLog(db) if clock is None else SqliteEventLog(db, clock=clock)
    sessions = SqliteSessionStore(db) if clock is None else SqliteSessionStore(db, clock=clock)
    plan_store = FilePlanStore.from_sessions(home, sessions)
    chat_log = SqliteChatLog(db) if clock is None else SqliteChatLog(db, clock=clock)
    return Storage(
        home=home, db=db, log=log, sessions=sessions, plan_store=plan_store, chat_log=chat_log
    )
