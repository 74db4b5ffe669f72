from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.channels.rigs import Channels


@pytest.fixture(params=["telegram", "slack"])
async def channel(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Channels]:
    """The contract suite runs each scenario on every channel."""
    channels = Channels(request.param, tmp_path)
    await channels.start()
    try:
        yield channels
    finally:
        await channels.stop()
