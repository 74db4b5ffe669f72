"""Webhook ingress for several replicas: any replica stores a POSTed update in the inbox and
answers at once; the chat's owner processes it (docs/webhook.md, "Several replicas").

With PostgreSQL and a webhook, ``serve`` runs this instead of PTB's webhook server: the same
secret-token check (403 without it), then the update goes to ``update_inbox`` under its
``update_id`` and its chat's key (a forum topic's group: one owner per group), and only then
the 200. An update Telegram saw acknowledged is therefore in the database whichever replica
dies next. A database error answers 500, so Telegram delivers it again.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import secrets
from dataclasses import dataclass
from typing import Any

from telegram import Bot, Update

from bot.telegram.keys import chat_key
from engine.errors import ConfigError
from engine.keys import ChatKey
from engine.ports import ChatLeases
from storage.postgres.inbox import InboxUpdate, PgUpdateInbox

_log = logging.getLogger("plangate.ingress")

SOURCE = "telegram"
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
# The webhook secret replicas share when PLANGATE_WEBHOOK_SECRET is unset (meta key).
SHARED_SECRET_KEY = "telegram.webhook_secret"
# The key of an update that names no chat: such updates share one owner.
NO_CHAT = chat_key(0)


def inbox_chat(update: Update) -> ChatKey:
    """The chat whose owner processes ``update``: its chat (a forum topic's group)."""
    chat = update.effective_chat
    return chat_key(chat.id) if chat is not None else NO_CHAT


def parse_update(item: InboxUpdate, bot: Bot) -> Update:
    """A stored update, read back for PTB."""
    update = Update.de_json(json.loads(item.payload), bot)
    assert update is not None
    return update


@dataclass(frozen=True, slots=True)
class Replicas:
    """What a replica among several needs besides the application: the shared inbox, the
    chats' leases, its own name and the leases' lifetime (``PLANGATE_LEASE_TTL``)."""

    inbox: PgUpdateInbox
    leases: ChatLeases
    replica: str
    ttl_s: float
    poll_s: float | None = None


class InboxIngress:
    """The HTTP side: ``POST <path>`` with the secret -> ``update_inbox`` -> 200."""

    def __init__(self, inbox: PgUpdateInbox, bot: Bot, *, secret: str, path: str) -> None:
        self.inbox = inbox
        self.bot = bot
        self.secret = secret
        self.path = "/" + path.strip("/")
        self._server: Any = None

    async def receive(self, body: bytes, headers: dict[str, str]) -> int:
        """One POST: the HTTP status to answer."""
        if not headers.get("content-type", "").startswith("application/json"):
            return 403
        token = headers.get(SECRET_HEADER.lower(), "")
        if not token or not hmac.compare_digest(token.encode(), self.secret.encode()):
            return 403
        try:
            data = json.loads(body)
            update = Update.de_json(data, self.bot)
            assert update is not None
            update_id = int(data["update_id"])
        except (ValueError, TypeError, KeyError, AssertionError):
            return 400
        try:
            fresh = await self.inbox.put(
                SOURCE, str(update_id), inbox_chat(update), body.decode(), ord=update_id
            )
        except Exception as exc:  # the database away: Telegram delivers it again
            _log.warning("plangate.ingress.store_failed %s", type(exc).__name__)
            return 500
        if not fresh:
            _log.info("plangate.ingress.repeat update=%s", update_id)
        return 200

    async def start(self, host: str, port: int) -> None:
        """Listen on ``host:port`` (``ConfigError`` naming the setting when it cannot)."""
        import tornado.httpserver
        import tornado.web

        ingress = self

        class Hook(tornado.web.RequestHandler):
            SUPPORTED_METHODS = ("POST",)  # type: ignore[assignment]

            async def post(self) -> None:
                headers = {k.lower(): v for k, v in self.request.headers.items()}
                self.set_status(await ingress.receive(self.request.body, headers))
                self.finish()

        app = tornado.web.Application([(rf"{self.path}/?", Hook)], log_function=lambda _h: None)
        server = tornado.httpserver.HTTPServer(app)
        try:
            server.listen(port, address=host)
        except OSError as err:
            reason = err.strerror or type(err).__name__
            raise ConfigError(
                f"PLANGATE_WEBHOOK_LISTEN: cannot listen on {host}:{port} ({reason})"
            ) from None
        self._server = server

    async def stop(self) -> None:
        """Stop listening and close open connections."""
        server, self._server = self._server, None
        if server is not None:
            server.stop()
            await asyncio.wait_for(server.close_all_connections(), 5)


async def shared_secret(db: Any, configured: str) -> str:
    """The webhook secret every replica uses: the configured one, or one made once and kept
    in the database (a per-process secret would make each replica's start refuse the others)."""
    if configured:
        return configured
    made = secrets.token_urlsafe(32)
    found = await db.set_meta_once(SHARED_SECRET_KEY, made)
    if found == made:
        _log.info("plangate.ingress.webhook_secret generated (PLANGATE_WEBHOOK_SECRET unset)")
    return str(found)


__all__ = [
    "NO_CHAT",
    "SHARED_SECRET_KEY",
    "SOURCE",
    "InboxIngress",
    "Replicas",
    "inbox_chat",
    "parse_update",
    "shared_secret",
]
