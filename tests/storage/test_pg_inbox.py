"""The update inbox on a real PostgreSQL (storage/postgres/inbox.py): stored once per id from
any replica, read per chat in order, and marked done by the first append of the update's
handlers in that append's own transaction."""

from __future__ import annotations

import asyncio
import json

import pytest

from engine.errors import AppendConflict
from engine.leases import LocalChatLeases
from engine.roles.types import RoleGranted
from storage.postgres.chatlog import PgChatLog
from storage.postgres.db import PgDatabase
from storage.postgres.eventlog import PgEventLog
from storage.postgres.inbox import PgUpdateInbox, UpdateClaim, processing
from storage.postgres.leases import PgChatLeases
from tests.pg import pg_cluster, pg_dsn
from tests.storage.helpers import goal, says

__all__ = ["pg_cluster", "pg_dsn"]


def _payload(update_id: int) -> str:
    return json.dumps({"update_id": update_id, "message": {"text": str(update_id)}})


async def _done(db: PgDatabase, update_id: str) -> str | None:
    value = await db.pool.fetchval(
        "SELECT done_by FROM update_inbox WHERE source = 'telegram' AND update_id = $1",
        update_id,
    )
    return None if value is None else str(value)


async def test_an_update_is_stored_once_whichever_replica_receives_it(pg_dsn: str) -> None:
    async with await PgDatabase.open(pg_dsn) as one, await PgDatabase.open(pg_dsn) as two:
        a, b = PgUpdateInbox(one), PgUpdateInbox(two)
        stored = await asyncio.gather(
            *(inbox.put("telegram", "7", "tg:-1", _payload(7), ord=7) for inbox in (a, b, a, b))
        )
        assert sorted(stored) == [False, False, False, True]
        assert await one.pool.fetchval("SELECT count(*) FROM update_inbox") == 1


async def test_pending_updates_come_per_chat_in_update_id_order(pg_dsn: str) -> None:
    async with await PgDatabase.open(pg_dsn) as db:
        inbox = PgUpdateInbox(db)
        for uid, chat in ((12, "tg:-1"), (10, "tg:-1"), (11, "tg:5"), (13, "tg:-1")):
            assert await inbox.put("telegram", str(uid), chat, _payload(uid), ord=uid)
        assert await inbox.pending_chats() == ["tg:-1", "tg:5"]
        assert [u.ord for u in await inbox.pending("tg:-1")] == [10, 12, 13]
        first = (await inbox.pending("tg:-1"))[0]
        assert json.loads(first.payload)["update_id"] == 10
        assert await inbox.mark_done(UpdateClaim("telegram", "10", "r1"))
        assert not await inbox.mark_done(UpdateClaim("telegram", "10", "r2"))
        assert await _done(db, "10") == "r1"
        assert [u.ord for u in await inbox.pending("tg:-1")] == [12, 13]
        for uid in ("11", "12", "13"):
            await inbox.mark_done(UpdateClaim("telegram", uid, "r1"))
        assert await inbox.pending_chats() == []
        # A re-delivery of a done update is still a repeat until pruned.
        assert not await inbox.put("telegram", "10", "tg:-1", _payload(10), ord=10)
        assert await inbox.prune(older_than_s=-1.0) == 4
        assert await db.pool.fetchval("SELECT count(*) FROM update_inbox") == 0


async def test_the_first_append_of_an_update_marks_it_done_with_its_events(pg_dsn: str) -> None:
    async with await PgDatabase.open(pg_dsn) as db:
        inbox, log, chats = PgUpdateInbox(db), PgEventLog(db), PgChatLog(db)
        for uid in (1, 2, 3):
            await inbox.put("telegram", str(uid), "tg:-1", _payload(uid), ord=uid)

        # An append refused (the goal revision is taken) rolls the mark back with it.
        await log.append("s1", [goal(1)])
        with processing(UpdateClaim("telegram", "1", "r1")) as claim:
            with pytest.raises(AppendConflict):
                await log.append("s1", [goal(1)])
            assert not claim.done
            assert await _done(db, "1") is None
            await log.append("s1", [says("hello")])
            assert claim.done
        assert await _done(db, "1") == "r1"

        # A turn the handlers started appends after they returned: that marks nothing.
        started: list[asyncio.Task[object]] = []
        with processing(UpdateClaim("telegram", "2", "r1")) as claim:
            started.append(asyncio.ensure_future(asyncio.sleep(0)))

            async def later() -> None:
                await started[0]
                await log.append("s1", [says("from the turn")])

            started.append(asyncio.ensure_future(later()))
        await started[1]
        assert not claim.done and await _done(db, "2") is None

        # The chat log's append marks it too (a /team command).
        with processing(UpdateClaim("telegram", "3", "r2")):
            await chats.append_chat("tg:-1", [RoleGranted(user_id="tg:9", role="approver")])
        assert await _done(db, "3") == "r2"
        assert [u.update_id for u in await inbox.pending("tg:-1")] == ["2"]


async def test_an_insert_wakes_a_listener(pg_dsn: str) -> None:
    async with await PgDatabase.open(pg_dsn) as one, await PgDatabase.open(pg_dsn) as two:
        heard: asyncio.Queue[str] = asyncio.Queue()
        async with PgUpdateInbox(one).listening(heard.put_nowait) as listens:
            assert listens
            await PgUpdateInbox(two).put("telegram", "1", "tg:-42", _payload(1), ord=1)
            assert await asyncio.wait_for(heard.get(), 10) == "tg:-42"
            # A repeat notifies nobody (nothing new to do).
            await PgUpdateInbox(two).put("telegram", "1", "tg:-42", _payload(1), ord=1)
            await PgUpdateInbox(two).put("telegram", "2", "tg:-43", _payload(2), ord=2)
            assert await asyncio.wait_for(heard.get(), 10) == "tg:-43"


async def test_lapsed_names_the_chats_their_holder_left_not_the_released_ones(
    pg_dsn: str,
) -> None:
    now = [1000.0]
    memory = LocalChatLeases(clock=lambda: now[0])
    async with await PgDatabase.open(pg_dsn) as db:
        pg = PgChatLeases(db)
        for leases in (memory, pg):
            for chat in ("c1", "c2", "c3"):
                await leases.acquire(chat, "dead", 30)
            await leases.acquire("c4", "me", 30)
            await leases.release("c3", "dead")  # a clean stop: nothing to take over
            assert await leases.lapsed() == []
        now[0] += 31
        await db.pool.execute("UPDATE chat_leases SET expires_at = expires_at - 31")
        for leases in (memory, pg):
            assert await leases.lapsed() == ["c1", "c2", "c4"]
            await leases.acquire("c1", "me", 30)
            await leases.acquire("c4", "me", 30)
            assert await leases.lapsed() == ["c2"]


async def test_the_done_mark_after_the_handlers_holds_only_while_the_lease_does(
    pg_dsn: str,
) -> None:
    async with await PgDatabase.open(pg_dsn) as db:
        inbox, leases = PgUpdateInbox(db, fenced=True), PgChatLeases(db)
        for uid in (1, 2):
            await inbox.put("telegram", str(uid), "tg:-1", _payload(uid), ord=uid)
        mine = await leases.acquire("tg:-1", "r1", 30)
        assert mine is not None
        assert await inbox.mark_done(UpdateClaim("telegram", "1", "r1", lease=mine))
        # r1 stalled past its lease; r2 took the chat. r1's late mark changes nothing, so
        # r2 processes update 2 itself.
        await db.pool.execute("UPDATE chat_leases SET expires_at = 0")
        assert await leases.acquire("tg:-1", "r2", 30) is not None
        late = UpdateClaim("telegram", "2", "r1", lease=mine)
        assert not await inbox.mark_done(late) and not late.done
        assert [u.update_id for u in await inbox.pending("tg:-1")] == ["2"]
