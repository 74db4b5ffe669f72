"""The fake Bot API's webhook side, through the real PTB ``Bot`` and a loopback receiver."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from telegram import Bot
from telegram.error import BadRequest, Conflict

from tests.fakebot.server import SECRET_HEADER, FakeBotApi

HOOK = "https://bot.example.org/in/hook"


@dataclass
class Receiver:
    """A loopback HTTP server standing in for the bot's webhook listener."""

    origin: str = ""
    status: int = 200
    got: list[tuple[str, str | None, dict[str, Any]]] = field(default_factory=list)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    rec = Receiver()

    async def handle(request: web.Request) -> web.Response:
        rec.got.append((request.path, request.headers.get(SECRET_HEADER), await request.json()))
        return web.Response(status=rec.status)

    app = web.Application()
    app.router.add_post("/{path:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    rec.origin = f"http://127.0.0.1:{port}"
    try:
        yield rec
    finally:
        await runner.cleanup()


async def test_set_webhook_is_recorded_and_blocks_get_updates(
    fake_api: FakeBotApi, bot: Bot
) -> None:
    assert await bot.set_webhook(
        HOOK, secret_token="abc_DEF-1", allowed_updates=["message"], max_connections=5
    )
    hook = fake_api.webhook
    assert hook is not None
    assert (hook.url, hook.secret_token, hook.allowed_updates) == (HOOK, "abc_DEF-1", ["message"])
    assert (hook.max_connections, hook.drop_pending_updates) == (5, False)
    info = await bot.get_webhook_info()
    assert info.url == HOOK and info.allowed_updates == ("message",)
    with pytest.raises(Conflict, match="can't use getUpdates method while webhook is active"):
        await bot.get_updates(timeout=0)
    assert await bot.delete_webhook()
    assert fake_api.webhook is None
    assert await bot.get_updates(timeout=0) == ()


async def test_a_digit_only_secret_stays_a_string(fake_api: FakeBotApi, bot: Bot) -> None:
    await bot.set_webhook(HOOK, secret_token="12345")
    assert fake_api.webhook is not None and fake_api.webhook.secret_token == "12345"


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("http://bot.example.org/hook", "https url must be provided"),
        ("https://bot.example.org:8080/hook", "ports 80, 88, 443 or 8443"),
    ],
)
async def test_set_webhook_refuses_what_telegram_refuses(
    fake_api: FakeBotApi, bot: Bot, url: str, error: str
) -> None:
    with pytest.raises(BadRequest) as caught:
        await bot.set_webhook(url)
    assert error in caught.value.message.lower()
    assert fake_api.webhook is None


async def test_set_webhook_with_an_empty_url_removes_it_and_drop_clears_pending(
    fake_api: FakeBotApi, bot: Bot
) -> None:
    fake_api.user_message(1, 1, "queued")
    await bot.set_webhook(HOOK, drop_pending_updates=True)
    assert fake_api.pending() == []
    await bot.set_webhook("")
    assert fake_api.webhook is None


async def test_deliver_posts_with_the_secret_and_acknowledges_on_success(
    fake_api: FakeBotApi, bot: Bot, receiver: Receiver
) -> None:
    await bot.set_webhook(HOOK, secret_token="right")
    first = fake_api.user_message(1, 1, "one")
    fake_api.user_message(1, 1, "two")
    assert await fake_api.deliver_webhook(proxy_to=receiver.origin) == 200
    path, secret, body = receiver.got[0]
    assert (path, secret) == ("/in/hook", "right")
    assert body["message"] == first.raw and body["update_id"] == 1
    assert [u["message"]["text"] for u in fake_api.pending()] == ["two"]
    # Refused or failed: the update stays pending (Telegram would retry it).
    receiver.status = 403
    assert await fake_api.deliver_webhook(proxy_to=receiver.origin, secret_token="wrong") == 403
    assert await fake_api.deliver_webhook(proxy_to=receiver.origin, secret_token=None) == 403
    assert [s for _, s, _ in receiver.got[1:]] == ["wrong", None]
    assert len(fake_api.pending()) == 1


async def test_deliver_needs_a_webhook_and_a_pending_update(fake_api: FakeBotApi, bot: Bot) -> None:
    with pytest.raises(LookupError, match="no webhook"):
        await fake_api.deliver_webhook()
    await bot.set_webhook(HOOK)
    with pytest.raises(LookupError, match="no pending update"):
        await fake_api.deliver_webhook()
