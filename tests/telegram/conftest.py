from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from telegram import Bot

from tests.fakebot.fixtures import fake_api
from tests.fakebot.server import FakeBotApi

__all__ = ["bot", "fake_api"]


@pytest.fixture
async def bot(fake_api: FakeBotApi) -> AsyncIterator[Bot]:
    """A real PTB Bot talking HTTP to the fake server (no rate limiter: the outbox paces)."""
    async with Bot(
        fake_api.token, base_url=fake_api.base_url, base_file_url=fake_api.base_file_url
    ) as b:
        yield b
