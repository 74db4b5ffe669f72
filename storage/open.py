"""Opening everything durable under one plangate home, for the composition root.

<home>/plangate.db            the event log, sessions, chat bindings, the chat log, meta
<home>/projects/<slug>/...    plan files (storage.plan_files)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.ports import Clock
from storage.chatlog import SqliteChatLog
from storage.db import Database, database_path
from storage.eventlog import SqliteEventLog
from storage.plan_files import FilePlanStore
from storage.sessions import SqliteSessionStore


@dataclass(frozen=True, slots=True)
class Storage:
    """The stores of one home; close the database when done."""

    home: Path
    db: Database
    log: SqliteEventLog
    sessions: SqliteSessionStore
    plan_store: FilePlanStore
    chat_log: SqliteChatLog

    async def close(self) -> None:
        await self.db.close()


async def open_storage(home: Path, *, clock: Clock | None = None) -> Storage:
    """Open (creating and migrating) the database and the plan store under ``home``."""
    home.mkdir(parents=True, exist_ok=True)
    db = await Database.open(database_path(home))
    log = SqliteEventLog(db) if clock is None else SqliteEventLog(db, clock=clock)
    sessions = SqliteSessionStore(db) if clock is None else SqliteSessionStore(db, clock=clock)
    plan_store = FilePlanStore.from_sessions(home, sessions)
    chat_log = SqliteChatLog(db) if clock is None else SqliteChatLog(db, clock=clock)
    return Storage(
        home=home, db=db, log=log, sessions=sessions, plan_store=plan_store, chat_log=chat_log
    )
