"""Telegram's overall limit among replicas (bot/telegram/shared_rate.py): a replica sends at
its share of about 30 calls a second, the share following how many replicas hold chats; the
real PTB bot on the fake Bot API goes through it. A manual clock: nothing here waits."""

from __future__ import annotations

import asyncio
import json

import pytest
from telegram.ext import ExtBot

from bot.owners import ChatOwners
from bot.telegram.shared_rate import SharedRateLimiter
from engine.leases import LocalChatLeases
from storage.postgres.db import PgDatabase
from storage.postgres.inbox import InboxUpdate, PgUpdateInbox
from tests.fakebot.server import FakeBotApi


class Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


async def test_a_replica_sends_at_its_share_of_the_overall_limit() -> None:
    clock = Clock()
    limiter = SharedRateLimiter(30, clock=clock, sleep=clock.sleep)
    for _ in range(30):
        await limiter.take()
    assert clock.slept == []  # a second's burst
    await limiter.take()
    assert clock.slept == [pytest.approx(1 / 30)]
    # A second replica now holds chats: each sends at half the rate.
    limiter.share(2)
    clock.now += 60
    clock.slept.clear()
    for _ in range(15):
        await limiter.take()
    assert clock.slept == []
    await limiter.take()
    assert clock.slept == [pytest.approx(1 / 15)]


async def test_the_real_bot_sends_through_it(fake_api: FakeBotApi) -> None:
    clock = Clock()
    limiter = SharedRateLimiter(4, clock=clock, sleep=clock.sleep)
    fake_api.chat(-100777, title="team")
    async with ExtBot(
        fake_api.token,
        base_url=fake_api.base_url,
        base_file_url=fake_api.base_file_url,
        rate_limiter=limiter,
    ) as bot:
        for i in range(5):
            await bot.send_message(chat_id=-100777, text=f"m{i}")
        await bot.get_me()  # no chat: not counted
    assert clock.slept == [pytest.approx(1 / 4)]
    assert fake_api.count("sendMessage") == 5


async def test_the_owner_loop_tells_each_round_how_many_replicas_hold_chats(
    pg_dsn: str,
) -> None:
    leases = LocalChatLeases()
    shares: list[int] = []

    async def process(item: InboxUpdate) -> None:
        return None

    async def hook(chat: str) -> None:
        return None

    async with await PgDatabase.open(pg_dsn) as db:
        inbox = PgUpdateInbox(db)
        owners = ChatOwners(
            inbox,
            leases,
            replica="a",
            ttl_s=30,
            process=process,
            on_taken=hook,
            on_lost=hook,
            on_share=shares.append,
        )
        await owners.round()
        await leases.acquire("tg:-5", "b", 30)
        await inbox.put("telegram", "1", "tg:-1", json.dumps({"update_id": 1}), ord=1)
        await owners.round()
        await asyncio.wait_for(owners.idle(), 10)
    assert shares == [1, 2]
