"""Webhook mode: the real ``serve()`` runs PTB's tornado server on 127.0.0.1, registers the
webhook on the fake Bot API, and the fake delivers updates by HTTP POST as Telegram does.

The webhook URL is a public https one (Telegram accepts no other); the fake posts to the
loopback listener instead, as the reverse proxy in front of the bot would (``proxy_to``).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from bot.telegram.app import ALLOWED_UPDATES, parse_listen, serve
from bot.telegram.routes import LAST_UPDATE_KEY
from engine.errors import ConfigError
from storage.db import Database
from tests.fakebot.server import FakeBotApi
from tests.telegram.app_support import (
    OWNER,
    RecordingEngine,
    Settings,
    eventually,
    open_db,
    settings_for,
)

HOOK_URL = "https://bot.example.org/tg/hook-7"
SECRET = "s3cret-Token_42"


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def listening(host: str, port: int, *, timeout_s: float = 10.0) -> None:
    """Wait (bounded) until a TCP connection to host:port is accepted."""

    async def loop() -> None:
        while True:
            try:
                _, writer = await asyncio.open_connection(host, port)
            except OSError:
                await asyncio.sleep(0.02)
                continue
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            return

    await asyncio.wait_for(loop(), timeout_s)


async def refused(host: str, port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection(host, port)
    except OSError:
        return True
    writer.close()
    return False


def webhook_settings(api: FakeBotApi, port: int, **kw: Any) -> Settings:
    values: dict[str, Any] = {
        "webhook_url": HOOK_URL,
        "webhook_secret": SECRET,
        "webhook_listen": f"127.0.0.1:{port}",
    }
    return settings_for(api, **(values | kw))


@asynccontextmanager
async def serving(
    api: FakeBotApi, engine: RecordingEngine, db: Database, settings: Settings
) -> AsyncIterator[asyncio.Task[None]]:
    """``serve()`` in a task, yielded once the webhook is set and the port accepts; on exit
    it is stopped through its ``stop`` event and must end cleanly (bounded)."""
    stop = asyncio.Event()
    task = asyncio.create_task(serve(settings, engine, db, stop=stop))
    host, port = parse_listen(settings.webhook_listen)
    try:
        await eventually(lambda: api.webhook is not None or task.done())
        if task.done():
            task.result()  # raises what serve() raised
        await listening(host, port)
        yield task
    finally:
        stop.set()
        await asyncio.wait_for(task, 15)


async def test_serve_registers_the_webhook_with_the_secret(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    port = free_port()
    async with (
        open_db(tmp_path / "p.db") as db,
        serving(fake_api, engine, db, webhook_settings(fake_api, port)),
    ):
        hook = fake_api.webhook
        assert hook is not None
        assert hook.url == HOOK_URL
        assert hook.secret_token == SECRET
        assert hook.allowed_updates == list(ALLOWED_UPDATES)
        assert hook.drop_pending_updates is False
        assert fake_api.count("getUpdates") == 0
        assert [c.name for c in engine.calls] == ["start"]


async def test_an_update_with_the_right_secret_reaches_the_handlers(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    port = free_port()
    proxy = f"http://127.0.0.1:{port}"
    async with open_db(tmp_path / "p.db") as db:
        async with serving(fake_api, engine, db, webhook_settings(fake_api, port)):
            fake_api.user_message(OWNER, OWNER, "/help")
            assert await fake_api.deliver_webhook(proxy_to=proxy) == 200
            await eventually(lambda: len(fake_api.bot_messages(OWNER)) == 1)
            fake_api.user_message(OWNER, OWNER, "hello there")
            assert await fake_api.deliver_webhook(proxy_to=proxy) == 200
            await eventually(lambda: len(engine.named("user_message")) == 1)
        assert fake_api.pending() == []
    assert [c.args[1] for c in engine.named("command")] == ["help"]
    assert fake_api.bot_messages(OWNER)[0].text == "ok help"
    assert engine.named("user_message")[0].args[1] == "hello there"


@pytest.mark.parametrize("secret", ["not-the-secret", None], ids=["wrong", "missing"])
async def test_an_update_without_the_right_secret_is_refused_and_changes_nothing(
    fake_api: FakeBotApi, tmp_path: Path, secret: str | None
) -> None:
    engine = RecordingEngine()
    port = free_port()
    proxy = f"http://127.0.0.1:{port}"
    async with (
        open_db(tmp_path / "p.db") as db,
        serving(fake_api, engine, db, webhook_settings(fake_api, port)),
    ):
        fake_api.user_message(OWNER, OWNER, "/help")
        assert await fake_api.deliver_webhook(proxy_to=proxy, secret_token=secret) == 403
        # The same update with the secret goes through: whatever the refused POST
        # could have changed would show up before this one's reply.
        assert len(fake_api.pending()) == 1
        assert await db.get_meta(LAST_UPDATE_KEY) is None
        assert await fake_api.deliver_webhook(proxy_to=proxy) == 200
        await eventually(lambda: len(fake_api.bot_messages(OWNER)) == 1)
    assert [c.name for c in engine.calls if c.name == "command"] == ["command"]
    assert [m.text for m in fake_api.bot_messages(OWNER)] == ["ok help"]


async def test_without_a_configured_secret_a_random_one_is_required(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    port = free_port()
    proxy = f"http://127.0.0.1:{port}"
    settings = webhook_settings(fake_api, port, webhook_secret=None)
    async with open_db(tmp_path / "p.db") as db, serving(fake_api, engine, db, settings):
        hook = fake_api.webhook
        assert hook is not None and hook.secret_token is not None
        assert len(hook.secret_token) >= 32
        fake_api.user_message(OWNER, OWNER, "/help")
        assert await fake_api.deliver_webhook(proxy_to=proxy, secret_token=None) == 403
        assert engine.named("command") == []
        assert await fake_api.deliver_webhook(proxy_to=proxy) == 200
        await eventually(lambda: len(fake_api.bot_messages(OWNER)) == 1)


async def test_shutdown_is_clean_and_keeps_the_webhook_for_the_next_start(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    port = free_port()
    proxy = f"http://127.0.0.1:{port}"
    settings = webhook_settings(fake_api, port)
    async with open_db(tmp_path / "p.db") as db:
        async with serving(fake_api, engine, db, settings) as task:
            pass
        assert task.exception() is None
        assert await refused("127.0.0.1", port)
        assert [c.name for c in engine.calls] == ["start", "shutdown"]
        # Telegram keeps the webhook and holds what arrives while the bot is down ...
        assert fake_api.webhook is not None
        fake_api.user_message(OWNER, OWNER, "/help")
        # ... and delivers it to the next start.
        async with serving(fake_api, engine, db, settings):
            assert await fake_api.deliver_webhook(proxy_to=proxy) == 200
            await eventually(lambda: len(fake_api.bot_messages(OWNER)) == 1)
    assert [c.name for c in engine.calls if c.name in ("start", "shutdown")] == [
        "start",
        "shutdown",
        "start",
        "shutdown",
    ]


async def test_a_webhook_url_telegram_refuses_is_one_line_and_the_engine_is_shut_down(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    port = free_port()
    settings = webhook_settings(fake_api, port, webhook_url="http://bot.example.org/hook")
    async with open_db(tmp_path / "p.db") as db:
        with pytest.raises(ConfigError) as caught:
            await asyncio.wait_for(serve(settings, engine, db, stop=asyncio.Event()), 15)
    line = str(caught.value)
    assert line.startswith("PLANGATE_WEBHOOK_URL: Telegram refused the webhook")
    assert "https url must be provided" in line.lower() and "\n" not in line
    assert [c.name for c in engine.calls] == ["start", "shutdown"]


async def test_a_taken_listen_address_is_one_line_and_the_engine_is_shut_down(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        async with open_db(tmp_path / "p.db") as db:
            with pytest.raises(ConfigError) as caught:
                await asyncio.wait_for(
                    serve(webhook_settings(fake_api, port), engine, db, stop=asyncio.Event()),
                    15,
                )
    assert str(caught.value).startswith(
        f"PLANGATE_WEBHOOK_LISTEN: cannot listen on 127.0.0.1:{port}"
    )
    assert [c.name for c in engine.calls] == ["start", "shutdown"]


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


def test_parse_listen_unbrackets_ipv6_and_names_a_malformed_value() -> None:
    assert parse_listen("[::]:8443") == ("::", 8443)
    assert parse_listen("[::1]:80") == ("::1", 80)
    assert parse_listen(" 10.0.0.2:88 ") == ("10.0.0.2", 88)
    with pytest.raises(ConfigError, match=r"^PLANGATE_WEBHOOK_LISTEN: expected host:port"):
        parse_listen("localhost:http")


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback here")
async def test_serve_listens_on_a_bracketed_ipv6_address(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    with socket.socket(socket.AF_INET6) as s:
        s.bind(("::1", 0))
        port = s.getsockname()[1]
    settings = webhook_settings(fake_api, port, webhook_listen=f"[::1]:{port}")
    async with open_db(tmp_path / "p.db") as db, serving(fake_api, engine, db, settings):
        fake_api.user_message(OWNER, OWNER, "/help")
        assert await fake_api.deliver_webhook(proxy_to=f"http://[::1]:{port}") == 200
        await eventually(lambda: len(fake_api.bot_messages(OWNER)) == 1)


async def test_plangate_run_with_a_malformed_listen_names_it(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PLANGATE_", "TELEGRAM_"))}
    env |= {
        "PLANGATE_TELEGRAM_TOKEN": "1:x",
        "PLANGATE_OWNER_IDS": "1",
        "PLANGATE_WEBHOOK_URL": HOOK_URL,
        "PLANGATE_WEBHOOK_LISTEN": "localhost",
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot.cli",
        "run",
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 2
    assert out == b""
    lines = err.decode().strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("plangate: PLANGATE_WEBHOOK_LISTEN: expected host:port")
    assert "'localhost'" in lines[0]


async def test_a_webhook_without_the_webhooks_extra_stops_with_one_line(
    fake_api: FakeBotApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_find_spec = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> Any:
        return None if name == "tornado" else real_find_spec(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    engine = RecordingEngine()
    async with open_db(tmp_path / "p.db") as db:
        with pytest.raises(ConfigError, match=r"^PLANGATE_WEBHOOK_URL .*plangate\[webhooks\]"):
            await serve(webhook_settings(fake_api, free_port()), engine, db)
    assert engine.calls == []
    assert fake_api.webhook is None


async def test_the_same_update_delivered_twice_is_handled_once(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    port = free_port()
    proxy = f"http://127.0.0.1:{port}"
    async with (
        open_db(tmp_path / "p.db") as db,
        serving(fake_api, engine, db, webhook_settings(fake_api, port)),
    ):
        fake_api.user_message(OWNER, OWNER, "once")
        update = fake_api.pending()[0]
        assert await fake_api.deliver_webhook(proxy_to=proxy) == 200
        await eventually(lambda: len(engine.named("user_message")) == 1)
        # Telegram retries a delivery it saw no answer to; the retry is a repeat.
        assert await fake_api.deliver_webhook(update, proxy_to=proxy) == 200
        fake_api.user_message(OWNER, OWNER, "after")
        assert await fake_api.deliver_webhook(proxy_to=proxy) == 200
        await eventually(lambda: len(engine.named("user_message")) == 2)
    assert [c.args[1] for c in engine.named("user_message")] == ["once", "after"]


async def test_update_ids_that_restart_lower_after_a_restart_are_handled(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = RecordingEngine()
    port = free_port()
    proxy = f"http://127.0.0.1:{port}"
    settings = webhook_settings(fake_api, port)
    fake_api.renumber_updates(5000)
    async with open_db(tmp_path / "p.db") as db:
        async with serving(fake_api, engine, db, settings):
            fake_api.user_message(OWNER, OWNER, "before")
            old = fake_api.pending()[0]
            assert await fake_api.deliver_webhook(proxy_to=proxy) == 200
            await eventually(lambda: len(engine.named("user_message")) == 1)
        assert await db.get_meta(LAST_UPDATE_KEY) == "5000"
        # A week without updates: Telegram numbers anew, far below the stored watermark.
        fake_api.date_offset_s = 7 * 86400
        fake_api.renumber_updates(77)
        async with serving(fake_api, engine, db, settings):
            fake_api.user_message(OWNER, OWNER, "a week later")
            update = fake_api.pending()[0]
            assert update["update_id"] == 77
            assert await fake_api.deliver_webhook(proxy_to=proxy) == 200
            await eventually(lambda: len(engine.named("user_message")) == 2)
            # Re-deliveries of handled updates, new numbering and old, are still dropped.
            assert await fake_api.deliver_webhook(update, proxy_to=proxy) == 200
            assert await fake_api.deliver_webhook(old, proxy_to=proxy) == 200
            fake_api.user_message(OWNER, OWNER, "next")
            assert await fake_api.deliver_webhook(proxy_to=proxy) == 200
            await eventually(lambda: len(engine.named("user_message")) == 3)
    assert [c.args[1] for c in engine.named("user_message")] == ["before", "a week later", "next"]
