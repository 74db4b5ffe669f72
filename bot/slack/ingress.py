"""Slack's HTTP mode among replicas: any replica stores a signed request in the inbox and
answers at once; the conversation's owner dispatches it (docs/webhook.md, "Several replicas").

With PostgreSQL and ``PLANGATE_SLACK_LISTEN``, ``serve_slack`` runs this instead of bolt's own
aiohttp app. A request whose signature (``PLANGATE_SLACK_SIGNING_SECRET``) does not check out
is 401 and stored nowhere; Slack's URL check (``url_verification``) is answered at once. Every
other request (events, button presses, the slash command) goes to ``update_inbox`` under the
conversation's key, deduplicated by the event's ``event_id`` (Slack repeats an event it saw no
quick answer to) or, for presses and commands, which carry none, by a hash of the body; only
then the 200. The owner replays the body through the bolt app (signature already checked, so
not again: a request may wait in the inbox longer than the signature's five minutes).
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any
from urllib.parse import parse_qsl

from aiohttp import web
from slack_sdk.signature import SignatureVerifier

from bot.slack import keys
from engine.keys import ChatKey
from storage.postgres.inbox import InboxUpdate, PgUpdateInbox

_log = logging.getLogger("plangate.slack.ingress")

SOURCE = "slack"
# The key of a request that names no conversation: such requests share one owner.
NO_CHAT = keys.chat_ref(keys.chat_key("0"))


def _conversation(content_type: str, body: bytes) -> tuple[str, str, dict[str, Any]]:
    """(the dedup id, the conversation id or "", the parsed JSON when it is one)."""
    digest = hashlib.sha256(body).hexdigest()
    if content_type == "application/json":
        data = json.loads(body)
        event = data.get("event") or {}
        channel = event.get("channel") or (event.get("item") or {}).get("channel") or ""
        if isinstance(channel, dict):  # channel_* events carry the channel object
            channel = channel.get("id") or ""
        return str(data.get("event_id") or f"b:{digest}"), str(channel), data
    form = dict(parse_qsl(body.decode(), keep_blank_values=True))
    if "payload" in form:  # a press: interactivity
        payload = json.loads(form["payload"])
        channel = (payload.get("container") or {}).get("channel_id") or (
            payload.get("channel") or {}
        ).get("id")
        return f"i:{digest}", str(channel or ""), {}
    return f"c:{digest}", str(form.get("channel_id") or ""), {}


def conversation_key(channel: str) -> ChatKey:
    """The engine's key of a conversation id, the key its lease is on."""
    if not channel:
        return NO_CHAT
    try:
        return keys.chat_ref(keys.chat_key(channel))
    except ValueError:
        return NO_CHAT


class SlackInboxIngress:
    """The HTTP side: a signed ``POST <path>`` -> ``update_inbox`` -> 200."""

    def __init__(self, inbox: PgUpdateInbox, *, signing_secret: str) -> None:
        self.inbox = inbox
        self._verifier = SignatureVerifier(signing_secret)

    async def handle(self, request: web.Request) -> web.Response:
        """One request from Slack."""
        body = await request.read()
        if not self._verifier.is_valid(
            body,
            request.headers.get("X-Slack-Request-Timestamp", ""),
            request.headers.get("X-Slack-Signature", ""),
        ):
            return web.Response(status=401)
        try:
            uid, channel, data = _conversation(request.content_type, body)
        except (ValueError, TypeError, AttributeError):
            return web.Response(status=400)
        if data.get("type") == "url_verification":
            return web.json_response({"challenge": data.get("challenge")})
        stored = json.dumps({"body": body.decode(), "content_type": request.content_type})
        try:
            fresh = await self.inbox.put(SOURCE, uid, conversation_key(channel), stored, ord=None)
        except Exception as exc:  # the database away: Slack retries
            _log.warning("plangate.slack.ingress.store_failed %s", type(exc).__name__)
            return web.Response(status=500)
        if not fresh:
            _log.info("plangate.slack.ingress.repeat id=%s", uid)
        return web.Response(status=200)

    def web_app(self, path: str = "/slack/events") -> web.Application:
        app = web.Application()
        app.router.add_post(path, self.handle)
        return app


def stored_request(item: InboxUpdate) -> tuple[str, str]:
    """(the body, its content type) of a stored request."""
    stored = json.loads(item.payload)
    return str(stored["body"]), str(stored["content_type"])


def is_slack_key(chat: ChatKey) -> bool:
    """Whether a lease key is one of Slack's conversations."""
    return keys.chat_of_ref(chat) is not None


__all__ = [
    "NO_CHAT",
    "SOURCE",
    "SlackInboxIngress",
    "conversation_key",
    "is_slack_key",
    "stored_request",
]
