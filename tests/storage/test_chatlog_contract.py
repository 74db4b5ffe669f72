"""One contract for engine.ports.ChatLog, run against the in-memory fake, SQLite and PostgreSQL; the
team a chat log replays into (engine.roles), across a reopened database."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from engine.errors import CorruptState
from engine.ports import ChatLog
from engine.roles.service import RoleService
from engine.roles.types import Person, RoleGranted, RoleRevoked
from engine.testing import InMemoryChatLog
from storage.chatlog import SqliteChatLog
from storage.db import Database
from storage.postgres.chatlog import PgChatLog
from tests.pg import pg_cluster
from tests.storage.helpers import StepClock, pg_store

__all__ = ["pg_cluster"]

GROUP, OTHER = "tg:-100123", "tg:-100456"


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def chat_log(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ChatLog]:
    clock = StepClock()
    if request.param == "memory":
        yield InMemoryChatLog(clock=clock)
        return
    if request.param == "postgres":
        async with pg_store(request) as pg:
            yield PgChatLog(pg, clock=clock)
        return
    db = await Database.open(tmp_path / "plangate.db")
    try:
        yield SqliteChatLog(db, clock=clock)
    finally:
        await db.close()


async def test_append_numbers_densely_per_chat_and_reads_in_order(chat_log: ChatLog) -> None:
    assert await chat_log.read_chat(GROUP) == []
    first = await chat_log.append_chat(
        GROUP,
        [
            RoleGranted(user_id="tg:1", name="Ana", by="tg:9"),
            RoleGranted(user_id="tg:2", by="tg:9"),
        ],
    )
    other = await chat_log.append_chat(OTHER, [RoleGranted(user_id="tg:1", name="Ana")])
    second = await chat_log.append_chat(GROUP, [RoleRevoked(user_id="tg:1", by="tg:9")])
    assert [s.seq for s in first] == [1, 2] and [s.seq for s in second] == [3]
    assert [s.seq for s in other] == [1]
    read = await chat_log.read_chat(GROUP)
    assert [(s.seq, s.event) for s in read] == [(s.seq, s.event) for s in [*first, *second]]
    assert read[0].at <= read[2].at
    assert await chat_log.append_chat(GROUP, []) == []
    assert len(await chat_log.read_chat(GROUP)) == 3


async def test_roles_replay_grant_revoke_and_owner_rules(chat_log: ChatLog) -> None:
    roles = RoleService(chat_log, owner_ids={"tg:9"})
    assert await roles.role_of(GROUP, "tg:9") == "owner"
    assert await roles.role_of(GROUP, "tg:1") == "member"
    assert await roles.role_of(GROUP, None) == "member"
    assert await roles.grant(GROUP, Person("tg:1", "Ana"), "approver", by="tg:9")
    assert not await roles.grant(
        GROUP, Person("tg:1", "Ana"), "approver", by="tg:9"
    )  # held already
    assert await roles.role_of(GROUP, "tg:1") == "approver"
    assert await roles.role_of(OTHER, "tg:1") == "member"  # per chat
    # A fresh service (a restart) reads the same team back.
    again = RoleService(chat_log, owner_ids={"tg:9"})
    assert await again.role_of(GROUP, "tg:1") == "approver"
    held = await again.revoke(GROUP, "tg:1", by="tg:9")
    assert held is not None and held.name == "Ana"
    assert await again.revoke(GROUP, "tg:1", by="tg:9") is None
    assert await RoleService(chat_log, owner_ids={"tg:9"}).role_of(GROUP, "tg:1") == "member"
    # A group that became a supergroup keeps its team, once.
    await again.grant(GROUP, Person("tg:2", "Ben"), "approver", by="tg:9")
    await again.migrate(GROUP, OTHER)
    await again.migrate(GROUP, OTHER)
    assert await again.role_of(OTHER, "tg:2") == "approver"
    assert len(await chat_log.read_chat(OTHER)) == 1


async def test_sqlite_chat_log_survives_reopen_and_a_bad_row_fails_loudly(tmp_path: Path) -> None:
    path = tmp_path / "plangate.db"
    async with await Database.open(path) as db:
        await SqliteChatLog(db).append_chat(GROUP, [RoleGranted(user_id="tg:5", name="Eve")])
    async with await Database.open(path) as db:
        roles = RoleService(SqliteChatLog(db), owner_ids={"tg:9"})
        assert await roles.role_of(GROUP, "tg:5") == "approver"

        async def corrupt(conn: object) -> None:
            await conn.execute(  # type: ignore[attr-defined]
                "INSERT INTO chat_events (chat, seq, type, at, payload) "
                "VALUES (?, 2, 'role/granted', 0, '{\"type\": \"role/granted\"}')",
                (GROUP,),
            )

        await db.write(corrupt)
        with pytest.raises(CorruptState):
            await SqliteChatLog(db).read_chat(GROUP)
