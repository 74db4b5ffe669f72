"""A fake Slack (Web API + Socket Mode + Events API over HTTP) for the real slack_sdk/slack_bolt
on loopback.

slack_sdk talks to it with ``AsyncWebClient(token=server.bot_token, base_url=server.api_url)``;
Socket Mode dials the websocket that ``apps.connections.open`` names (``ws://127.0.0.1:<port>
/link``), exactly as it dials Slack's. The fake keeps channels, messages (``ts`` per channel),
edits, ephemeral messages, uploaded files and every call; it validates what it receives as Slack
does (tokens, ``channel_not_found``, ``message_not_found``, ``msg_too_long``, ``invalid_blocks``)
and can answer 429 with ``Retry-After``.

Tests drive it through plain methods that put what Slack would send on the socket (or POST it,
signed, to an Events API URL): ``user_message``, ``mention``, ``slash``, ``press``,
``member_joined``, ``file_shared``; and read it back through ``messages``, ``calls``, ``count``,
``acks``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import itertools
import json
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

import aiohttp
from aiohttp import web

MAX_TEXT = 40_000  # chat.postMessage: longer text is msg_too_long
MAX_BLOCKS = 50
MAX_SECTION_TEXT = 3_000
MAX_BUTTON_TEXT = 75
MAX_ACTION_VALUE = 2_000
ACK_DEADLINE_S = 3.0  # Slack's: an envelope not acknowledged in 3 s counts as failed


class SlackError(Exception):
    """An ``ok: false`` answer (HTTP 200 unless ``status`` says otherwise)."""

    def __init__(self, error: str, status: int = 200, headers: dict[str, str] | None = None):
        super().__init__(error)
        self.error, self.status, self.headers = error, status, headers or {}


@dataclass
class Call:
    method: str
    params: dict[str, Any]
    token: str | None
    at: float


@dataclass
class Message:
    channel: str
    ts: str
    user: str  # the bot's user id for its own messages
    text: str
    blocks: list[dict[str, Any]] = field(default_factory=list)
    thread_ts: str | None = None
    edits: int = 0
    deleted: bool = False
    files: list[str] = field(default_factory=list)

    @property
    def from_bot(self) -> bool:
        return self.user.startswith("U0BOT")

    def buttons(self) -> list[tuple[str, str, str]]:
        """``(label, action_id, value)`` of every button in the blocks."""
        out = []
        for block in self.blocks:
            for element in block.get("elements", []) if block.get("type") == "actions" else []:
                if element.get("type") == "button":
                    out.append(
                        (element["text"]["text"], element["action_id"], element.get("value", ""))
                    )
        return out


@dataclass
class Channel:
    id: str
    name: str
    is_im: bool = False
    is_private: bool = False
    members: set[str] = field(default_factory=set)
    messages: list[Message] = field(default_factory=list)
    ephemeral: list[tuple[str, str]] = field(default_factory=list)  # (user, text)


@dataclass
class Ack:
    envelope_id: str
    kind: str
    after_s: float
    payload: dict[str, Any] | None


class FakeSlack:
    """The fake. ``await start()`` binds 127.0.0.1 on a free port; ``await stop()``."""

    def __init__(
        self,
        *,
        team: str = "T01",
        bot_token: str = "xoxb-test-token",
        app_token: str = "xapp-test-token",
        signing_secret: str = "test-signing-secret",
        bot_user: str = "U0BOT",
        channel_limit_per_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``channel_limit_per_s``: enforce about one message a second per channel (off by
        default): a postMessage sooner than that after the last one answers 429."""
        self.team, self.bot_token, self.app_token = team, bot_token, app_token
        self.signing_secret, self.bot_user = signing_secret, bot_user
        self.channels: dict[str, Channel] = {}
        self.users: dict[str, dict[str, Any]] = {}
        self.files: dict[str, tuple[str, bytes]] = {}  # file id -> (name, bytes)
        self.calls: list[Call] = []
        # Called with each Web API call once it is answered (a bench waits on it, not polling).
        self.on_answered: Callable[[Call], None] | None = None
        self.acks: list[Ack] = []
        self.events_url: str | None = None  # Events API over HTTP: where events are POSTed
        self.http_deliveries: list[tuple[str, int]] = []  # (event_id, status)
        self.channel_limit_per_s = channel_limit_per_s
        self.clock = clock
        self._posted_at: dict[str, deque[float]] = {}
        self._ts = itertools.count(1)
        self._ids = itertools.count(1)
        self._sockets: list[web.WebSocketResponse] = []
        self._pending: dict[str, tuple[str, float, asyncio.Future[Ack]]] = {}
        self._fail_next: list[tuple[str, SlackError]] = []
        self._uploads: dict[str, tuple[str, int]] = {}  # file id -> (name, length) announced
        self._runner: web.AppRunner | None = None
        self._connected = asyncio.Event()
        self.port = 0

    # ---- lifecycle -------------------------------------------------------------------

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/"

    async def start(self) -> None:
        app = web.Application(client_max_size=60 * 1024 * 1024)
        app.router.add_post("/api/{method}", self._handle)
        # slack_sdk sends some methods as GET (users.info, conversations.info), as Slack takes.
        app.router.add_get("/api/{method}", self._handle)
        app.router.add_get("/link", self._socket)
        app.router.add_post("/upload/{file_id}", self._upload)
        app.router.add_get("/files/{file_id}/{name}", self._download)
        self._runner = web.AppRunner(app, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        for ws in list(self._sockets):
            with contextlib.suppress(Exception):
                await ws.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def connected(self, timeout_s: float = 30.0) -> None:
        """Wait until a Socket Mode client has connected and been greeted."""
        await asyncio.wait_for(self._connected.wait(), timeout_s)

    # ---- the workspace ------------------------------------------------------------------

    def channel(self, channel_id: str, *, name: str | None = None, im: bool = False) -> Channel:
        if channel_id not in self.channels:
            self.channels[channel_id] = Channel(
                channel_id, name or channel_id.lower(), is_im=im or channel_id.startswith("D")
            )
        return self.channels[channel_id]

    def user(
        self,
        user_id: str,
        name: str | None = None,
        *,
        is_bot: bool = False,
        external: bool = False,
        restricted: bool = False,
    ) -> dict[str, Any]:
        """A person (or bot) of the workspace; ``external`` is a Slack Connect user from
        another organisation (their ``team_id`` differs)."""
        record = self.users.setdefault(
            user_id,
            {
                "id": user_id,
                "team_id": "T99" if external else self.team,
                "name": (name or user_id).lower(),
                "real_name": name or user_id,
                "profile": {"display_name": name or user_id, "real_name": name or user_id},
                "is_bot": is_bot,
                "is_restricted": restricted,
                "is_stranger": external,
            },
        )
        return record

    def messages(self, channel_id: str) -> list[Message]:
        return [m for m in self.channel(channel_id).messages if not m.deleted]

    def bot_messages(self, channel_id: str) -> list[Message]:
        return [m for m in self.messages(channel_id) if m.from_bot]

    def message(self, channel_id: str, ts: str) -> Message:
        for m in self.channel(channel_id).messages:
            if m.ts == ts:
                return m
        raise KeyError(ts)

    def count(self, method: str) -> int:
        return sum(1 for c in self.calls if c.method == method)

    def counts(self) -> Counter[str]:
        return Counter(c.method for c in self.calls)

    def fail_next(self, method: str, error: str, *, status: int = 200, retry_after: int = 0):
        """The next call of ``method`` fails with ``error`` (429 carries ``Retry-After``)."""
        headers = {"Retry-After": str(retry_after)} if status == 429 else {}
        self._fail_next.append((method, SlackError(error, status, headers)))

    # ---- what people do (each returns the envelope's ack) ---------------------------------

    def _new_ts(self) -> str:
        return f"{1_700_000_000 + next(self._ts)}.{next(self._ids):06d}"

    async def user_message(
        self, channel_id: str, user_id: str, text: str, *, thread_ts: str | None = None
    ) -> Ack:
        """A person posts ``text`` (a ``message`` event; in a DM ``channel_type`` is im)."""
        channel = self.channel(channel_id)
        self.user(user_id)
        msg = Message(channel_id, self._new_ts(), user_id, text, thread_ts=thread_ts)
        channel.messages.append(msg)
        event = {
            "type": "message",
            "channel": channel_id,
            "user": user_id,
            "text": text,
            "ts": msg.ts,
            "team": self.users[user_id]["team_id"],
            "channel_type": "im" if channel.is_im else "channel",
            "event_ts": msg.ts,
        }
        if thread_ts:
            event["thread_ts"] = thread_ts
        return await self.event(event)

    async def mention(
        self, channel_id: str, user_id: str, text: str, *, thread_ts: str | None = None
    ) -> Ack:
        """``@plangate text`` in a channel: Slack sends ``app_mention`` (and a ``message``,
        which a bot subscribed to both sees too; this fake sends only the mention)."""
        channel = self.channel(channel_id)
        self.user(user_id)
        full = f"<@{self.bot_user}> {text}"
        msg = Message(channel_id, self._new_ts(), user_id, full, thread_ts=thread_ts)
        channel.messages.append(msg)
        event = {
            "type": "app_mention",
            "channel": channel_id,
            "user": user_id,
            "text": full,
            "ts": msg.ts,
            "team": self.users[user_id]["team_id"],
            "event_ts": msg.ts,
        }
        if thread_ts:
            event["thread_ts"] = thread_ts
        return await self.event(event)

    async def member_joined(self, channel_id: str, user_id: str, *, inviter: str | None) -> Ack:
        """``user_id`` (the bot, usually) joined ``channel_id``, invited by ``inviter``."""
        self.channel(channel_id).members.add(user_id)
        event: dict[str, Any] = {
            "type": "member_joined_channel",
            "user": user_id,
            "channel": channel_id,
            "channel_type": "C",
            "team": self.team,
            "event_ts": self._new_ts(),
        }
        if inviter is not None:
            event["inviter"] = inviter
        return await self.event(event)

    async def file_shared(
        self, channel_id: str, user_id: str, name: str, data: bytes, *, text: str = ""
    ) -> Ack:
        """A person shares a file in a channel (a ``message`` with subtype ``file_share``)."""
        file_id = f"F{next(self._ids):08d}"
        self.files[file_id] = (name, data)
        channel = self.channel(channel_id)
        self.user(user_id)
        msg = Message(channel_id, self._new_ts(), user_id, text, files=[file_id])
        channel.messages.append(msg)
        event = {
            "type": "message",
            "subtype": "file_share",
            "channel": channel_id,
            "user": user_id,
            "text": text,
            "ts": msg.ts,
            "channel_type": "im" if channel.is_im else "channel",
            "files": [self._file_object(file_id)],
            "event_ts": msg.ts,
        }
        return await self.event(event)

    def _file_object(self, file_id: str) -> dict[str, Any]:
        name, data = self.files[file_id]
        return {
            "id": file_id,
            "name": name,
            "size": len(data),
            "mimetype": "application/octet-stream",
            "url_private_download": f"http://127.0.0.1:{self.port}/files/{file_id}/{name}",
        }

    async def slash(self, channel_id: str, user_id: str, text: str) -> Ack:
        """``/plangate text`` typed in ``channel_id``."""
        self.user(user_id)
        payload = {
            "token": "verification",
            "team_id": self.users[user_id]["team_id"],
            "team_domain": "test",
            "channel_id": channel_id,
            "channel_name": self.channel(channel_id).name,
            "user_id": user_id,
            "user_name": self.users[user_id]["name"],
            "command": "/plangate",
            "text": text,
            "api_app_id": "A01",
            "response_url": f"http://127.0.0.1:{self.port}/api/response",
            "trigger_id": f"trigger-{next(self._ids)}",
        }
        return await self._envelope("slash_commands", payload, accepts_response=True)

    async def press(self, channel_id: str, ts: str, user_id: str, label: str) -> Ack:
        """``user_id`` taps the button labelled ``label`` on the bot's message ``ts``."""
        msg = self.message(channel_id, ts)
        found = [(a, v) for text, a, v in msg.buttons() if text == label]
        if not found:
            raise AssertionError(f"no button {label!r} on {ts}: {msg.buttons()}")
        action_id, value = found[0]
        self.user(user_id)
        payload = {
            "type": "block_actions",
            "user": {"id": user_id, "username": self.users[user_id]["name"], "team_id": self.team},
            "api_app_id": "A01",
            "token": "verification",
            "container": {"type": "message", "message_ts": ts, "channel_id": channel_id},
            "trigger_id": f"trigger-{next(self._ids)}",
            "team": {"id": self.team, "domain": "test"},
            "channel": {"id": channel_id, "name": self.channel(channel_id).name},
            "message": {"type": "message", "ts": ts, "text": msg.text, "blocks": msg.blocks},
            "response_url": f"http://127.0.0.1:{self.port}/api/response",
            "actions": [
                {
                    "action_id": action_id,
                    "block_id": "b",
                    "text": {"type": "plain_text", "text": label},
                    "value": value,
                    "type": "button",
                    "action_ts": self._new_ts(),
                }
            ],
        }
        return await self._envelope("interactive", payload)

    async def event(self, event: dict[str, Any], *, event_id: str | None = None) -> Ack:
        """Send one Events API event, over Socket Mode or (with ``events_url``) HTTP."""
        payload = {
            "token": "verification",
            "team_id": self.team,
            "api_app_id": "A01",
            "event": event,
            "type": "event_callback",
            "event_id": event_id or f"Ev{next(self._ids):08d}",
            "event_time": int(time.time()),
        }
        if self.events_url is not None:
            return await self.post_event(payload)
        return await self._envelope("events_api", payload)

    # ---- Socket Mode ---------------------------------------------------------------------

    async def _envelope(
        self, kind: str, payload: dict[str, Any], *, accepts_response: bool = False
    ) -> Ack:
        if not self._sockets:
            raise AssertionError("no Socket Mode client is connected")
        envelope_id = f"env-{next(self._ids)}"
        future: asyncio.Future[Ack] = asyncio.get_running_loop().create_future()
        self._pending[envelope_id] = (kind, self.clock(), future)
        await self._sockets[-1].send_json(
            {
                "envelope_id": envelope_id,
                "type": kind,
                "accepts_response_payload": accepts_response,
                "payload": payload,
                "retry_attempt": 0,
                "retry_reason": "",
            }
        )
        return await asyncio.wait_for(future, 30)

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        self._sockets.append(ws)
        await ws.send_json(
            {
                "type": "hello",
                "num_connections": len(self._sockets),
                "connection_info": {"app_id": "A01"},
            }
        )
        self._connected.set()
        try:
            async for frame in ws:
                if frame.type != aiohttp.WSMsgType.TEXT:
                    continue
                data = json.loads(frame.data)
                pending = self._pending.pop(data.get("envelope_id", ""), None)
                if pending is None:
                    continue
                kind, sent_at, future = pending
                ack = Ack(data["envelope_id"], kind, self.clock() - sent_at, data.get("payload"))
                self.acks.append(ack)
                if not future.done():
                    future.set_result(ack)
        finally:
            self._sockets.remove(ws)
            if not self._sockets:
                self._connected.clear()
        return ws

    # ---- Events API over HTTP ------------------------------------------------------------

    def sign(self, body: bytes, timestamp: int) -> str:
        base = b"v0:" + str(timestamp).encode() + b":" + body
        return "v0=" + hmac.new(self.signing_secret.encode(), base, hashlib.sha256).hexdigest()

    async def post_event(self, payload: dict[str, Any], *, retry_num: int = 0) -> Ack:
        """POST ``payload`` to ``events_url``, signed as Slack signs; Slack retries (up to 3
        times, with ``X-Slack-Retry-Num``) what is not answered 200 within 3 seconds."""
        assert self.events_url is not None
        body = json.dumps(payload).encode()
        stamp = int(time.time())
        headers = {
            "Content-Type": "application/json",
            "X-Slack-Request-Timestamp": str(stamp),
            "X-Slack-Signature": self.sign(body, stamp),
        }
        if retry_num:
            headers |= {"X-Slack-Retry-Num": str(retry_num), "X-Slack-Retry-Reason": "timeout"}
        started = self.clock()
        timeout = aiohttp.ClientTimeout(total=ACK_DEADLINE_S)
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout) as session,
                session.post(self.events_url, data=body, headers=headers) as response,
            ):
                status = response.status
        except TimeoutError:
            status = 0
        self.http_deliveries.append((payload["event_id"], status))
        ack = Ack(payload["event_id"], "events_api", self.clock() - started, None)
        self.acks.append(ack)
        return ack

    # ---- Web API -------------------------------------------------------------------------

    async def _params(self, request: web.Request) -> dict[str, Any]:
        """Query string, then a form or JSON body (slack_sdk sends each method its own way)."""
        params: dict[str, Any] = dict(request.query)
        body = await request.read()
        if request.content_type == "application/json":
            params |= dict(json.loads(body or b"{}"))
        elif request.content_type == "multipart/form-data":
            pass  # not used by the methods this fake serves
        else:
            params |= dict(parse_qsl(body.decode(), keep_blank_values=True))
        return params

    async def _handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        params = await self._params(request)
        auth = request.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else params.get("token")
        call = Call(method, params, token, self.clock())
        self.calls.append(call)
        try:
            for i, (name, error) in enumerate(self._fail_next):
                if name == method:
                    del self._fail_next[i]
                    raise error
            if method == "apps.connections.open":
                if token != self.app_token:
                    raise SlackError("invalid_auth")
                return web.json_response({"ok": True, "url": f"ws://127.0.0.1:{self.port}/link"})
            if token != self.bot_token:
                raise SlackError("invalid_auth" if token else "not_authed")
            handler = getattr(self, "_api_" + method.replace(".", "_"), None)
            if handler is None:
                raise SlackError("unknown_method", 404)
            result = await handler(params)
            if self.on_answered is not None:
                self.on_answered(call)
            return web.json_response({"ok": True, **result})
        except SlackError as exc:
            return web.json_response(
                {"ok": False, "error": exc.error}, status=exc.status, headers=exc.headers
            )

    async def _api_auth_test(self, p: dict[str, Any]) -> dict[str, Any]:
        return {
            "url": "https://test.slack.com/",
            "team": "Test",
            "user": "plangate",
            "team_id": self.team,
            "user_id": self.bot_user,
            "bot_id": "B01",
        }

    def _known(self, channel_id: str) -> Channel:
        channel = self.channels.get(channel_id)
        if channel is None:
            raise SlackError("channel_not_found")
        return channel

    def _blocks(self, raw: Any) -> list[dict[str, Any]]:
        blocks = json.loads(raw) if isinstance(raw, str) else (raw or [])
        if len(blocks) > MAX_BLOCKS:
            raise SlackError("invalid_blocks")
        for block in blocks:
            text = block.get("text", {}).get("text", "")
            if block.get("type") == "section" and len(text) > MAX_SECTION_TEXT:
                raise SlackError("invalid_blocks")
            for element in block.get("elements", []):
                if element.get("type") != "button":
                    continue
                if len(element["text"]["text"]) > MAX_BUTTON_TEXT:
                    raise SlackError("invalid_blocks")
                if len(element.get("value", "")) > MAX_ACTION_VALUE:
                    raise SlackError("invalid_blocks")
        return list(blocks)

    def _paced(self, channel_id: str) -> None:
        if self.channel_limit_per_s is None:
            return
        sent = self._posted_at.setdefault(channel_id, deque(maxlen=1))
        now = self.clock()
        if sent and now - sent[-1] < 1.0 / self.channel_limit_per_s:
            raise SlackError("ratelimited", 429, {"Retry-After": "1"})
        sent.append(now)

    async def _api_chat_postMessage(self, p: dict[str, Any]) -> dict[str, Any]:
        channel = self._known(p["channel"])
        text = p.get("text") or ""
        if len(text) > MAX_TEXT:
            raise SlackError("msg_too_long")
        blocks = self._blocks(p.get("blocks"))
        if not text and not blocks:
            raise SlackError("no_text")
        self._paced(channel.id)
        msg = Message(channel.id, self._new_ts(), self.bot_user, text, blocks, p.get("thread_ts"))
        channel.messages.append(msg)
        return {"channel": channel.id, "ts": msg.ts, "message": {"text": text, "ts": msg.ts}}

    async def _api_chat_update(self, p: dict[str, Any]) -> dict[str, Any]:
        channel = self._known(p["channel"])
        try:
            msg = self.message(channel.id, p["ts"])
        except KeyError:
            raise SlackError("message_not_found") from None
        if msg.deleted:
            raise SlackError("message_not_found")
        if not msg.from_bot:
            raise SlackError("cant_update_message")
        text = p.get("text") or ""
        if len(text) > MAX_TEXT:
            raise SlackError("msg_too_long")
        msg.text, msg.blocks = text, self._blocks(p.get("blocks"))
        msg.edits += 1
        return {"channel": channel.id, "ts": msg.ts, "text": text}

    async def _api_chat_delete(self, p: dict[str, Any]) -> dict[str, Any]:
        channel = self._known(p["channel"])
        try:
            self.message(channel.id, p["ts"]).deleted = True
        except KeyError:
            raise SlackError("message_not_found") from None
        return {"channel": channel.id, "ts": p["ts"]}

    async def _api_chat_postEphemeral(self, p: dict[str, Any]) -> dict[str, Any]:
        channel = self._known(p["channel"])
        channel.ephemeral.append((p["user"], p.get("text") or ""))
        return {"message_ts": self._new_ts()}

    async def _api_conversations_info(self, p: dict[str, Any]) -> dict[str, Any]:
        channel = self._known(p["channel"])
        return {
            "channel": {
                "id": channel.id,
                "name": channel.name,
                "is_im": channel.is_im,
                "is_private": channel.is_private,
                "is_channel": not channel.is_im,
            }
        }

    async def _api_conversations_leave(self, p: dict[str, Any]) -> dict[str, Any]:
        self._known(p["channel"]).members.discard(self.bot_user)
        return {}

    async def _api_users_info(self, p: dict[str, Any]) -> dict[str, Any]:
        user = self.users.get(p["user"])
        if user is None:
            raise SlackError("user_not_found")
        return {"user": user}

    async def _api_files_getUploadURLExternal(self, p: dict[str, Any]) -> dict[str, Any]:
        file_id = f"F{next(self._ids):08d}"
        self._uploads[file_id] = (p["filename"], int(p["length"]))
        return {"upload_url": f"http://127.0.0.1:{self.port}/upload/{file_id}", "file_id": file_id}

    async def _upload(self, request: web.Request) -> web.Response:
        file_id = request.match_info["file_id"]
        if file_id not in self._uploads:
            return web.Response(status=404)
        name, length = self._uploads[file_id]
        reader = (
            await request.multipart() if request.content_type.startswith("multipart/") else None
        )
        if reader is not None:
            part = await reader.next()
            assert isinstance(part, aiohttp.BodyPartReader)
            data = await part.read()
        else:
            data = await request.read()
        if len(data) != length:
            return web.Response(status=400, text="length mismatch")
        self.files[file_id] = (name, bytes(data))
        return web.Response(text="OK - uploaded")

    async def _api_files_completeUploadExternal(self, p: dict[str, Any]) -> dict[str, Any]:
        files = json.loads(p["files"]) if isinstance(p["files"], str) else p["files"]
        channel_id = p.get("channel_id")
        shared = []
        for item in files:
            if item["id"] not in self.files:
                raise SlackError("file_not_found")
            shared.append({"id": item["id"], "title": item.get("title", "")})
        if channel_id:
            channel = self._known(channel_id)
            msg = Message(
                channel.id,
                self._new_ts(),
                self.bot_user,
                p.get("initial_comment") or "",
                thread_ts=p.get("thread_ts"),
                files=[f["id"] for f in shared],
            )
            channel.messages.append(msg)
        return {"files": shared}

    async def _download(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {self.bot_token}":
            return web.Response(status=403)
        found = self.files.get(request.match_info["file_id"])
        if found is None:
            return web.Response(status=404)
        return web.Response(body=found[1])


__all__ = ["Ack", "Call", "Channel", "FakeSlack", "Message", "SlackError"]
