from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.fakeslack.server import FakeSlack


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    server = FakeSlack()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()
