"""Pytest fixtures and helpers around the fake Bot API.

Use from a conftest: ``from tests.fakebot.fixtures import fake_api  # noqa: F401``.
``running_app`` starts the real PTB ``Application`` polling the fake and stops it cleanly.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest
from telegram.ext import Application, ApplicationBuilder

from tests.fakebot.server import FakeBotApi


@pytest.fixture
async def fake_api() -> AsyncIterator[FakeBotApi]:
    """A started fake Bot API server on 127.0.0.1, stopped after the test."""
    server = FakeBotApi()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def app_builder(server: FakeBotApi) -> ApplicationBuilder:  # type: ignore[type-arg]
    """An ApplicationBuilder pointed at the fake (token, base_url, base_file_url set)."""
    return (
        Application.builder()
        .token(server.token)
        .base_url(server.base_url)
        .base_file_url(server.base_file_url)
    )


@asynccontextmanager
async def running_app(
    application: Application,  # type: ignore[type-arg]
    *,
    setup: Callable[[Application], None] | None = None,  # type: ignore[type-arg]
) -> AsyncIterator[Application]:  # type: ignore[type-arg]
    """Initialize, start polling (1 s long polls) and start ``application``; stop on exit."""
    if setup is not None:
        setup(application)
    async with application:
        assert application.updater is not None
        await application.updater.start_polling(poll_interval=0.0, timeout=1)
        await application.start()
        try:
            yield application
        finally:
            await asyncio.wait_for(application.updater.stop(), 10)
            await asyncio.wait_for(application.stop(), 10)
