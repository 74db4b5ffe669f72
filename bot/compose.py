"""The one composition of plangate: the stores under a home, and the engine built on them.

The bot's runner, the offline demo, the benches and the test rigs all open plangate through
:func:`open_plangate`, so the wiring of ports to services is written once. Starting and
shutting down the engine stay with the caller (``bot.telegram.app.serve`` does both for the bot).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from engine.app import Engine, EngineConfig, build_engine
from engine.inbox import INBOX_FOLDER
from engine.model.types import ModelProvider
from engine.ports import Channel, Clock, EventLog
from engine.tools.host import protected_folders
from storage.open import Storage, open_storage


@dataclass(frozen=True, slots=True)
class Plangate:
    """An opened plangate: its stores and its engine."""

    storage: Storage
    engine: Engine


@asynccontextmanager
async def open_plangate(
    home: Path,
    *,
    model: ModelProvider,
    channel: Channel,
    config: EngineConfig,
    clock: Clock | None = None,
    wrap_log: Callable[[EventLog], EventLog] | None = None,
    database_url: str | None = None,
    replica: str | None = None,
) -> AsyncIterator[Plangate]:
    """Open (creating and migrating) the stores under ``home`` and build the engine.

    ``wrap_log`` wraps the event log port the engine is given (to count, trace or fail
    calls); the stores keep the real one. ``database_url`` (``postgresql://...``) puts the
    database in PostgreSQL instead of SQLite in the home; ``replica`` names this process among
    several on it (its writes are then fenced by the chat leases it holds: docs/storage.md
    "Leases and fencing"). The database is closed on exit;
    shut the engine down before that.
    """
    # The home (database, plan folders, sessions) is never visible to the agent, whichever
    # caller opens plangate and whatever its settings already hide; a worktree or an inbox
    # under it is a root of the boundary and shows through (engine/tools/boundary.py).
    sandbox = config.sandbox
    if home not in sandbox.hidden:
        hidden = (home, *sandbox.hidden)
        config = dataclasses.replace(config, sandbox=dataclasses.replace(sandbox, hidden=hidden))
    if not config.protected:
        # No project may hold plangate's own files or its home (engine/tools/host.py).
        config = dataclasses.replace(config, protected=tuple(protected_folders(home)))
    if config.home is None:
        config = dataclasses.replace(config, home=home)
    if config.worktree_root is None:
        # Approved plans' git worktrees live under the home (docs/projects.md).
        config = dataclasses.replace(config, worktree_root=home / "worktrees")
    if config.environments_root is None:
        # Consent to setup scripts and the projects' package caches (docs/environments.md).
        config = dataclasses.replace(config, environments_root=home / "environments")
    storage = await open_storage(home, clock=clock, database_url=database_url, replica=replica)
    if config.inbox_root is None:
        # Uploads live in plangate's home, beside the database, never in the project.
        config = dataclasses.replace(config, inbox_root=home / INBOX_FOLDER)
    # Of several replicas, one runs the goal schedules (docs/storage.md "One scheduler").
    elected = None
    if database_url and replica:
        from storage.postgres.db import PgDatabase
        from storage.postgres.election import ElectedScheduler

        assert isinstance(storage.db, PgDatabase)
        elected = ElectedScheduler(storage.db, database_url, replica)
    try:
        engine = build_engine(
            log=storage.log if wrap_log is None else wrap_log(storage.log),
            chat_log=storage.chat_log,
            sessions=storage.sessions,
            plan_store=storage.plan_store,
            model=model,
            channel=channel,
            config=config,
            clock=clock or time.time,
            scheduler=elected,
        )
        yield Plangate(storage, engine)
    finally:
        if elected is not None:
            await elected.aclose()
        await storage.close()


__all__ = ["Plangate", "open_plangate"]
