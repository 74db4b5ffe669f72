"""Builders shared by the storage tests."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from engine.events import GoalChange, UserMessage
from engine.goal.types import GoalSnapshot, GoalTombstone
from storage.postgres.db import PgDatabase
from tests.pg import Cluster


class StepClock:
    """A clock that moves one second per reading, so each append has its own time."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def goal(revision: int, *, goal_id: str = "g1", phase: str = "active") -> GoalChange:
    snapshot = GoalSnapshot.model_validate(
        {
            "id": goal_id,
            "revision": revision,
            "objective": "make the suite pass",
            "phase": phase,
            "max_goal_rounds": 20,
        }
    )
    return GoalChange(snapshot=snapshot)


def cleared(revision: int, *, goal_id: str = "g1") -> GoalChange:
    return GoalChange(tombstone=GoalTombstone(id=goal_id, revision=revision))


def says(text: str) -> UserMessage:
    return UserMessage(text=text)


@asynccontextmanager
async def pg_store(request: pytest.FixtureRequest) -> AsyncIterator[PgDatabase]:
    """A migrated PostgreSQL store in a fresh database of the session's cluster (tests/pg.py),
    for a fixture parametrised over the stores: ``pg_dsn`` cannot be asked for by name from an
    async fixture, so this does what it does. Dropped afterwards."""
    import asyncpg

    cluster: Cluster = request.getfixturevalue("pg_cluster")
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(cluster.dsn())
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    try:
        async with await PgDatabase.open(cluster.dsn(name)) as db:
            yield db
    finally:
        admin = await asyncpg.connect(cluster.dsn())
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()
