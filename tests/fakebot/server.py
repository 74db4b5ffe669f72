"""A fake Telegram Bot API server for the real python-telegram-bot on loopback.

PTB talks to it with ``Application.builder().token(server.token).base_url(server.base_url)
.base_file_url(server.base_file_url)``. It keeps chats, messages (ids per chat), edits,
pins, keyboards, documents and the bot's commands; validates what it receives as Telegram
would and answers with Telegram's own error descriptions. Tests drive it through plain
methods: ``user_message``, ``press``, ``bot_added``, ``fail_next``, ``fail_status``, ``storm``,
and read it back through ``messages``, ``message``, ``calls``, ``count``.

Webhooks as Telegram runs them: ``setWebhook`` records a :class:`Webhook` (``webhook``),
``deleteWebhook`` removes it, and ``getUpdates`` answers 409 Conflict while one is set.
Injected updates then wait until the test hands them over with ``deliver_webhook`` (an HTTP
POST with the ``X-Telegram-Bot-Api-Secret-Token`` header, as Telegram sends it).

Parameters arrive the way PTB sends them: form fields (multipart when a file is attached)
whose non-string values are JSON text; a JSON body is accepted too.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import re
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from types import EllipsisType
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
from aiohttp import web

from tests.fakebot.tg_html import HtmlParseError, parse_html, utf16_len

MAX_TEXT_UTF16 = 4096
MAX_DOWNLOAD_BYTES = 20 * 1024 * 1024  # getFile: "up to 20MB in size"
MAX_CALLBACK_BYTES = 64
NOT_MODIFIED = (
    "Bad Request: message is not modified: specified new message content and reply markup "
    "are exactly the same as a current content and reply markup of the message"
)
ANONYMOUS_ADMIN_ID = 1087968824  # GroupAnonymousBot, the sender Telegram shows for anon admins
_COMMAND = re.compile(r"/[A-Za-z0-9_]{1,32}(?:@[A-Za-z0-9_]{3,32})?")
_MENTION = re.compile(r"(?<![A-Za-z0-9_])@[A-Za-z0-9_]{3,32}")
_COMMAND_NAME = re.compile(r"[a-z0-9_]{1,32}")
# Fields PTB sends JSON-encoded (everything that is not a plain string).
_STRING_FIELDS = frozenset(
    {
        "text",
        "parse_mode",
        "callback_query_id",
        "action",
        "caption",
        "url",
        "file_id",
        "business_connection_id",
        "language_code",
        "secret_token",
        "ip_address",
    }
)
# The calls Telegram's group limit ("no more than 20 messages per minute in the same group")
# counts here: the two that post a message, and the two that change one. Edits are not named
# in Telegram's FAQ, but bots that edit a group's message fast get 429s just the same, so
# a fake that let them through would hide exactly the flood the card coalescing must avoid.
# Not counted: pins, deletes, chat actions and callback answers, which post no message of
# the bot's own (a pin's service message is Telegram's) and which Telegram limits apart.
GROUP_LIMITED_METHODS = frozenset(
    {"sendMessage", "sendDocument", "editMessageText", "editMessageReplyMarkup"}
)
GROUP_WINDOW_S = 60.0
WEBHOOK_PORTS = frozenset({80, 88, 443, 8443})  # "Ports currently supported for webhooks"
WEBHOOK_ACTIVE = (
    "Conflict: can't use getUpdates method while webhook is active; "
    "use deleteWebhook to delete the webhook first"
)
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
_SECRET_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,256}")


class ApiError(Exception):
    """An error answer: HTTP status, Telegram's description, optional parameters."""

    def __init__(self, code: int, description: str, parameters: dict[str, Any] | None = None):
        super().__init__(description)
        self.code = code
        self.description = description
        self.parameters = parameters


def bad_request(description: str) -> ApiError:
    return ApiError(400, f"Bad Request: {description}")


@dataclass
class FakeMessage:
    """One message as the server keeps it; ``text`` is the visible text after parsing."""

    chat_id: int
    message_id: int
    from_bot: bool
    user_id: int
    date: int
    text: str = ""
    html: str = ""
    entities: list[dict[str, Any]] = field(default_factory=list)
    reply_markup: dict[str, Any] | None = None
    thread_id: int | None = None
    is_topic_message: bool = False
    reply_to: int | None = None
    document: dict[str, Any] | None = None
    # A user's photo, voice note or audio: the message field as Telegram sends it.
    media: dict[str, Any] = field(default_factory=dict)
    edits: list[str] = field(default_factory=list)  # previous visible texts, oldest first
    deleted: bool = False
    sender_chat_id: int | None = None
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def buttons(self) -> list[list[tuple[str, str]]]:
        """The inline keyboard as rows of (label, callback data or url)."""
        if not self.reply_markup:
            return []
        return [
            [(b["text"], b.get("callback_data") or b.get("url") or "") for b in row]
            for row in self.reply_markup.get("inline_keyboard", [])
        ]


@dataclass
class FakeChat:
    id: int
    type: str  # private | group | supergroup
    title: str | None = None
    first_name: str | None = None
    is_forum: bool = False
    next_message_id: int = 1
    messages: dict[int, FakeMessage] = field(default_factory=dict)
    pinned: list[int] = field(default_factory=list)
    bot_is_member: bool = True
    bot_can_pin: bool = True
    chat_actions: list[str] = field(default_factory=list)
    drafts: list[tuple[int, str, float]] = field(default_factory=list)  # sendMessageDraft
    migrated_to: int | None = None  # a basic group upgraded to this supergroup

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"id": self.id, "type": self.type}
        if self.type == "private":
            d["first_name"] = self.first_name or f"user{self.id}"
        else:
            d["title"] = self.title or f"group{self.id}"
            if self.is_forum:
                d["is_forum"] = True
        return d


@dataclass(frozen=True)
class Call:
    method: str
    params: dict[str, Any]
    at: float = 0.0  # the server's ``clock`` when the call arrived


@dataclass(frozen=True)
class Webhook:
    """The webhook as ``setWebhook`` registered it (``secret_token`` None when not given)."""

    url: str
    secret_token: str | None = None
    allowed_updates: list[str] | None = None
    drop_pending_updates: bool = False
    max_connections: int = 40


@dataclass
class _Fault:
    method: str | None  # None: any method (a storm)
    remaining: int
    retry_after: int
    code: int = 429  # 5xx: a gateway error with no retry_after (``fail_status``)


class FakeBotApi:
    """The fake server. ``await start()`` binds 127.0.0.1 on a free port; ``await stop()``."""

    def __init__(
        self,
        *,
        token: str = "123456:TEST-token",
        bot_id: int = 123456,
        username: str = "plangate_test_bot",
        group_limit_per_minute: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``group_limit_per_minute``: enforce Telegram's group limit (off by default): the
        call over it in any rolling 60 s of ``clock`` answers 429 with ``retry_after``."""
        self.token = token
        self.bot_id = bot_id
        self.username = username
        # A user's first name as Telegram sends it (default ``User<id>``).
        self.first_names: dict[int, str] = {}
        self.chats: dict[int, FakeChat] = {}
        self.calls: list[Call] = []
        self.commands: list[dict[str, str]] = []
        self.callback_answers: dict[str, dict[str, Any]] = {}
        self.files: dict[str, bytes] = {}
        self._file_paths: dict[str, str] = {}  # file_id -> path under /file/bot<token>/
        self._updates: list[dict[str, Any]] = []
        self.last_update_id = 0
        self._poll_generation = 0
        self.webhook: Webhook | None = None
        self._update_ids = itertools.count(1)
        # Added to the dates of injected messages: lets a test say "a week later".
        self.date_offset_s = 0
        self._query_ids = itertools.count(1)
        self._file_ids = itertools.count(1)
        self._open_queries: dict[str, tuple[int, int]] = {}
        self._faults: list[_Fault] = []
        self._changed = asyncio.Condition()
        self._closing = False
        self._runner: web.AppRunner | None = None
        self.port = 0
        # Stamps calls and runs the group limit's window; a test may swap in a manual clock.
        self.clock: Callable[[], float] = clock
        self.group_limit_per_minute = group_limit_per_minute
        self._group_sent: dict[int, deque[float]] = {}
        self.group_429s = 0  # 429s the group limit answered (``fail_next``/``storm`` apart)

    # ---- lifecycle -------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/bot"

    @property
    def base_file_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/file/bot"

    async def start(self) -> None:
        app = web.Application(client_max_size=60 * 1024 * 1024)
        app.router.add_route("*", "/bot{token}/{method}", self._handle)
        app.router.add_get("/file/bot{token}/{path:.*}", self._handle_file)
        self._runner = web.AppRunner(app, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        self._closing = True
        async with self._changed:
            self._changed.notify_all()
        if self._runner is not None:
            await self._runner.cleanup()

    # ---- test-side API: chats and injected updates ----------------------------------

    def chat(
        self,
        chat_id: int,
        *,
        type: str | None = None,
        title: str | None = None,
        is_forum: bool = False,
    ) -> FakeChat:
        """The chat with this id, created on first use (negative ids are supergroups)."""
        chat = self.chats.get(chat_id)
        if chat is None:
            kind = type or ("private" if chat_id > 0 else "supergroup")
            chat = FakeChat(id=chat_id, type=kind, title=title, is_forum=is_forum)
            self.chats[chat_id] = chat
        return chat

    def _user(self, user_id: int, *, username: str | None = None) -> dict[str, Any]:
        return {
            "id": user_id,
            "is_bot": False,
            "first_name": self.first_names.get(user_id, f"User{user_id}"),
            "username": username or f"user{user_id}",
        }

    def _bot_user(self) -> dict[str, Any]:
        return {
            "id": self.bot_id,
            "is_bot": True,
            "first_name": "Plangate",
            "username": self.username,
        }

    def renumber_updates(self, start: int) -> None:
        """Number the next updates from ``start``, as Telegram may after a week without any
        (its getUpdates docs): ids can go backwards."""
        self._update_ids = itertools.count(start)

    def redeliver(self, update_id: int, message: dict[str, Any]) -> None:
        """Queue ``message`` again under its old ``update_id``, as Telegram redelivers an update
        whose fetch the bot never acknowledged (its offset was not confirmed)."""
        self._push({"update_id": update_id, "message": message}, renumber=False)

    def _push(self, update: dict[str, Any], *, renumber: bool = True) -> dict[str, Any]:
        if renumber:
            update["update_id"] = self.last_update_id = next(self._update_ids)
        self._updates.append(update)
        asyncio.get_running_loop().create_task(self._notify())
        return update

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    def user_message(
        self,
        chat_id: int,
        user_id: int,
        text: str,
        *,
        thread_id: int | None = None,
        reply_to: int | None = None,
        sender_chat_id: int | None = None,
        anonymous_admin: bool = False,
        chat_type: str | None = None,
        is_forum: bool = False,
    ) -> FakeMessage:
        """Inject a message from a user; a ``thread_id`` makes it a forum topic message.

        Commands and @mentions get Telegram's entities; ``anonymous_admin`` sends it as the
        group itself (GroupAnonymousBot with ``sender_chat``), as Telegram does.
        """
        chat = self.chat(chat_id, type=chat_type, is_forum=is_forum or thread_id is not None)
        if thread_id is not None:
            chat.is_forum = True
        msg = FakeMessage(
            chat_id=chat_id,
            message_id=chat.next_message_id,
            from_bot=False,
            user_id=user_id,
            date=int(time.time()) + self.date_offset_s,
            text=text,
            html=text,
            thread_id=thread_id,
            is_topic_message=thread_id is not None,
            reply_to=reply_to,
        )
        chat.next_message_id += 1
        entities: list[dict[str, Any]] = []
        m = _COMMAND.match(text)
        if m:
            entities.append({"type": "bot_command", "offset": 0, "length": utf16_len(m.group(0))})
        for mm in _MENTION.finditer(text):
            entities.append(
                {
                    "type": "mention",
                    "offset": utf16_len(text[: mm.start()]),
                    "length": utf16_len(mm.group(0)),
                }
            )
        msg.entities = entities
        sender = self._user(user_id)
        if anonymous_admin:
            sender = {
                "id": ANONYMOUS_ADMIN_ID,
                "is_bot": True,
                "first_name": "Group",
                "username": "GroupAnonymousBot",
            }
            sender_chat_id = chat_id
        msg.sender_chat_id = sender_chat_id
        if reply_to is not None and reply_to not in chat.messages:
            raise ValueError(f"no message {reply_to} in chat {chat_id} to reply to")
        chat.messages[msg.message_id] = msg
        payload = self._message_dict(msg, sender=sender)
        msg.raw = payload
        self._push({"message": payload})
        return msg

    def add_file(self, data: bytes, *, folder: str = "documents") -> tuple[str, str]:
        """Keep ``data`` as a file the bot may fetch; returns (file_id, file_unique_id)."""
        file_id = f"in{next(self._file_ids)}"
        self.files[f"{folder}/{file_id}"] = data
        self._file_paths[file_id] = f"{folder}/{file_id}"
        return file_id, f"u{file_id}"

    def _user_media(
        self,
        chat_id: int,
        user_id: int,
        media: dict[str, Any],
        *,
        caption: str | None,
        reply_to: int | None,
        thread_id: int | None,
        chat_type: str | None,
    ) -> FakeMessage:
        chat = self.chat(chat_id, type=chat_type, is_forum=thread_id is not None)
        if reply_to is not None and reply_to not in chat.messages:
            raise ValueError(f"no message {reply_to} in chat {chat_id} to reply to")
        msg = FakeMessage(
            chat_id=chat_id,
            message_id=chat.next_message_id,
            from_bot=False,
            user_id=user_id,
            date=int(time.time()) + self.date_offset_s,
            text=caption or "",
            html=caption or "",
            thread_id=thread_id,
            is_topic_message=thread_id is not None,
            reply_to=reply_to,
            media=media,
        )
        chat.next_message_id += 1
        msg.entities = [
            {
                "type": "mention",
                "offset": utf16_len(msg.text[: mm.start()]),
                "length": utf16_len(mm.group(0)),
            }
            for mm in _MENTION.finditer(msg.text)
        ]
        chat.messages[msg.message_id] = msg
        payload = self._message_dict(msg, sender=self._user(user_id))
        msg.raw = payload
        self._push({"message": payload})
        return msg

    def user_document(
        self,
        chat_id: int,
        user_id: int,
        data: bytes,
        *,
        file_name: str | None,
        mime_type: str | None = "text/plain",
        caption: str | None = None,
        reply_to: int | None = None,
        thread_id: int | None = None,
        chat_type: str | None = None,
        declared_size: int | None = None,
    ) -> FakeMessage:
        """Inject a document (a file sent as a file) from a user, ``caption`` under it.

        ``declared_size`` overrides the ``file_size`` Telegram reports (default: the bytes').
        """
        file_id, unique = self.add_file(data)
        document: dict[str, Any] = {
            "file_id": file_id,
            "file_unique_id": unique,
            "file_size": len(data) if declared_size is None else declared_size,
        }
        if file_name is not None:
            document["file_name"] = file_name
        if mime_type is not None:
            document["mime_type"] = mime_type
        return self._user_media(
            chat_id,
            user_id,
            {"document": document},
            caption=caption,
            reply_to=reply_to,
            thread_id=thread_id,
            chat_type=chat_type,
        )

    def user_photo(
        self,
        chat_id: int,
        user_id: int,
        sizes: list[tuple[int, int, bytes]],
        *,
        caption: str | None = None,
        reply_to: int | None = None,
        thread_id: int | None = None,
        chat_type: str | None = None,
    ) -> FakeMessage:
        """Inject a photo: ``sizes`` are (width, height, JPEG bytes), smallest first, as
        Telegram lists the sizes it made of one picture."""
        photo = []
        for width, height, data in sizes:
            file_id, unique = self.add_file(data, folder="photos")
            photo.append(
                {
                    "file_id": file_id,
                    "file_unique_id": unique,
                    "width": width,
                    "height": height,
                    "file_size": len(data),
                }
            )
        return self._user_media(
            chat_id,
            user_id,
            {"photo": photo},
            caption=caption,
            reply_to=reply_to,
            thread_id=thread_id,
            chat_type=chat_type,
        )

    def user_voice(
        self,
        chat_id: int,
        user_id: int,
        data: bytes,
        *,
        duration_s: int = 3,
        reply_to: int | None = None,
        thread_id: int | None = None,
        chat_type: str | None = None,
    ) -> FakeMessage:
        """Inject a voice note (OGG/Opus, as Telegram's apps record it)."""
        file_id, unique = self.add_file(data, folder="voice")
        voice = {
            "file_id": file_id,
            "file_unique_id": unique,
            "duration": duration_s,
            "mime_type": "audio/ogg",
            "file_size": len(data),
        }
        return self._user_media(
            chat_id,
            user_id,
            {"voice": voice},
            caption=None,
            reply_to=reply_to,
            thread_id=thread_id,
            chat_type=chat_type,
        )

    def press(self, chat_id: int, message_id: int, data: str, *, user_id: int) -> str:
        """Inject a press of the button with ``data`` on a bot message; returns the query id.

        Refuses (ValueError) when the message has no such button: a user cannot press what
        is not on screen.
        """
        msg = self.message(chat_id, message_id)
        if not any(d == data for row in msg.buttons for _, d in row):
            raise ValueError(f"message {message_id} has no button with data {data!r}")
        return self.press_raw(chat_id, message_id, data, user_id=user_id)

    def press_raw(self, chat_id: int, message_id: int, data: str, *, user_id: int) -> str:
        """Inject a callback query with any data (a forged or stale press)."""
        msg = self.message(chat_id, message_id)
        qid = str(next(self._query_ids))
        self._open_queries[qid] = (chat_id, user_id)
        self._push(
            {
                "callback_query": {
                    "id": qid,
                    "from": self._user(user_id),
                    "chat_instance": f"ci{chat_id}",
                    "message": self._message_dict(msg),
                    "data": data,
                }
            }
        )
        return qid

    def bot_added(
        self,
        chat_id: int,
        *,
        by_user_id: int,
        new_status: str = "member",
        old_status: str = "left",
        title: str | None = None,
    ) -> None:
        """Inject ``my_chat_member``: the bot's status in a group changed by a user."""
        chat = self.chat(chat_id, title=title)
        chat.bot_is_member = new_status in ("member", "administrator", "creator")
        self._push(
            {
                "my_chat_member": {
                    "chat": chat.as_dict(),
                    "from": self._user(by_user_id),
                    "date": int(time.time()),
                    "old_chat_member": {"status": old_status, "user": self._bot_user()},
                    "new_chat_member": self._member(new_status),
                }
            }
        )

    def migrate_group(
        self, old_id: int, new_id: int, *, by_user_id: int, announce: bool = True
    ) -> FakeChat:
        """Upgrade basic group ``old_id`` to supergroup ``new_id`` as Telegram does: the new
        chat (the bot a member), a ``migrate_to_chat_id`` service message in the old group
        and a ``migrate_from_chat_id`` one in the new (``announce=False``: not yet
        delivered); sends to the old id then answer 400 with ``migrate_to_chat_id``."""
        old = self.chat(old_id, type="group")
        new = self.chat(new_id, type="supergroup", title=old.title)
        old.migrated_to = new_id
        if not announce:
            return new
        for chat, field_name, value in (
            (old, "migrate_to_chat_id", new_id),
            (new, "migrate_from_chat_id", old_id),
        ):
            msg = FakeMessage(
                chat_id=chat.id,
                message_id=chat.next_message_id,
                from_bot=False,
                user_id=by_user_id,
                date=int(time.time()),
            )
            chat.next_message_id += 1
            chat.messages[msg.message_id] = msg
            msg.raw = self._message_dict(msg) | {field_name: value}
            self._push({"message": msg.raw})
        return new

    def _member(self, status: str) -> dict[str, Any]:
        d: dict[str, Any] = {"status": status, "user": self._bot_user()}
        if status == "administrator":
            d.update(
                {
                    "can_be_edited": False,
                    "is_anonymous": False,
                    "can_manage_chat": True,
                    "can_delete_messages": True,
                    "can_manage_video_chats": False,
                    "can_restrict_members": False,
                    "can_promote_members": False,
                    "can_change_info": False,
                    "can_invite_users": True,
                    "can_post_stories": False,
                    "can_edit_stories": False,
                    "can_delete_stories": False,
                    "can_pin_messages": True,
                }
            )
        if status == "kicked":
            d["until_date"] = 0
        return d

    # ---- test-side API: faults ----------------------------------------------------------

    def fail_next(self, method: str, count: int = 1, *, retry_after: int = 1) -> None:
        """The next ``count`` calls of ``method`` answer 429 with ``retry_after``."""
        self._faults.append(_Fault(method=method, remaining=count, retry_after=retry_after))

    def fail_status(self, method: str, count: int = 1, *, code: int = 502) -> None:
        """The next ``count`` calls of ``method`` answer HTTP ``code`` (502 Bad Gateway by
        default), as Telegram's front does when the Bot API behind it is unreachable."""
        self._faults.append(_Fault(method=method, remaining=count, retry_after=0, code=code))

    def storm(self, count: int, *, retry_after: int = 1) -> None:
        """The next ``count`` calls of any method except getUpdates answer 429."""
        self._faults.append(_Fault(method=None, remaining=count, retry_after=retry_after))

    # ---- test-side API: reading back ------------------------------------------------------

    def message(self, chat_id: int, message_id: int) -> FakeMessage:
        return self.chats[chat_id].messages[message_id]

    def messages(self, chat_id: int, *, include_deleted: bool = False) -> list[FakeMessage]:
        """The chat's transcript in order (both sides), deleted messages left out by default."""
        chat = self.chats.get(chat_id)
        if chat is None:
            return []
        return [m for m in chat.messages.values() if include_deleted or not m.deleted]

    def bot_messages(self, chat_id: int) -> list[FakeMessage]:
        return [m for m in self.messages(chat_id) if m.from_bot]

    def count(self, method: str) -> int:
        """How many calls of ``method`` arrived (errors included)."""
        return sum(1 for c in self.calls if c.method == method)

    def counts(self) -> Counter[str]:
        return Counter(c.method for c in self.calls)

    def calls_of(self, method: str) -> list[Call]:
        return [c for c in self.calls if c.method == method]

    async def drain(self, *, timeout_s: float = 5.0) -> None:
        """Wait (bounded) until the client has fetched every injected update and asked for
        more, i.e. it has processed them (PTB handles one batch before the next poll)."""
        target = self.last_update_id

        def asked_past() -> bool:
            return any(
                c.method == "getUpdates" and int(c.params.get("offset") or 0) > target
                for c in reversed(self.calls)
            )

        await self.wait_for(asked_past, timeout_s=timeout_s)

    def pending(self) -> list[dict[str, Any]]:
        """The updates not yet fetched by getUpdates nor delivered to the webhook, oldest first."""
        return list(self._updates)

    async def deliver_webhook(
        self,
        update: dict[str, Any] | None = None,
        *,
        proxy_to: str | None = None,
        secret_token: str | EllipsisType | None = ...,
        timeout_s: float = 5.0,
    ) -> int:
        """POST one update to the registered webhook as Telegram does; returns the HTTP status.

        ``update``: default the oldest pending one; a 2xx answer acknowledges it (it leaves
        ``pending()``), any other keeps it pending, as Telegram would retry it.
        ``proxy_to``: ``scheme://host:port`` to send to instead of the URL's own origin (the
        reverse proxy in front of the bot). ``secret_token``: default the registered one;
        ``None`` sends no header, a string sends that one. Raises ``LookupError`` when no
        webhook is set or nothing is pending.
        """
        hook = self.webhook
        if hook is None:
            raise LookupError("no webhook is set")
        if update is None:
            if not self._updates:
                raise LookupError("no pending update to deliver")
            update = self._updates[0]
        url = hook.url
        if proxy_to is not None:
            target, parts = urlsplit(proxy_to), urlsplit(url)
            url = urlunsplit((target.scheme, target.netloc, parts.path, parts.query, ""))
        secret = hook.secret_token if secret_token is ... else secret_token
        headers = {SECRET_HEADER: secret} if secret is not None else {}
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.post(url, json=update, headers=headers) as response,
        ):
            await response.read()
            status = response.status
        if 200 <= status < 300:
            self._updates = [u for u in self._updates if u is not update]
        return status

    async def wait_for(self, predicate: Any, *, timeout_s: float = 5.0) -> None:
        """Wait (bounded) until ``predicate()`` holds; it is rechecked on every API call."""

        async def loop() -> None:
            async with self._changed:
                await self._changed.wait_for(predicate)

        await asyncio.wait_for(loop(), timeout_s)

    # ---- HTTP -----------------------------------------------------------------------------

    async def _params(self, request: web.Request) -> dict[str, Any]:
        params: dict[str, Any] = dict(request.query)
        ctype = request.content_type
        if ctype == "application/json":
            body = await request.read()
            if body:
                params.update(json.loads(body))
            return params
        if ctype in ("application/x-www-form-urlencoded", "multipart/form-data"):
            post = await request.post()
            for key, value in post.items():
                if isinstance(value, web.FileField):
                    params[key] = {"filename": value.filename, "content": value.file.read()}
                else:
                    params[key] = value
        for key, value in list(params.items()):
            if isinstance(value, str) and key not in _STRING_FIELDS:
                with contextlib.suppress(ValueError):
                    params[key] = json.loads(value)
        return params

    async def _handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        if request.match_info["token"] != self.token:
            return web.json_response(
                {"ok": False, "error_code": 401, "description": "Unauthorized"}, status=401
            )
        params = await self._params(request)
        self.calls.append(Call(method=method, params=params, at=self.clock()))
        await self._notify()  # a test may be waiting for this call to arrive
        try:
            result = await self._dispatch(method, params)
        except ApiError as err:
            body: dict[str, Any] = {
                "ok": False,
                "error_code": err.code,
                "description": err.description,
            }
            if err.parameters:
                body["parameters"] = err.parameters
            return web.json_response(body, status=err.code)
        finally:
            await self._notify()
        return web.json_response({"ok": True, "result": result})

    async def _handle_file(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return web.Response(status=401)
        data = self.files.get(request.match_info["path"])
        if data is None:
            return web.Response(status=404)
        return web.Response(body=data)

    def _check_fault(self, method: str) -> None:
        for fault in self._faults:
            if fault.remaining > 0 and fault.method in (None, method):
                fault.remaining -= 1
                if fault.code != 429:
                    raise ApiError(fault.code, HTTPStatus(fault.code).phrase)
                raise ApiError(
                    429,
                    f"Too Many Requests: retry after {fault.retry_after}",
                    {"retry_after": fault.retry_after},
                )

    def _check_group_limit(self, method: str, p: dict[str, Any]) -> None:
        """Telegram's group limit, when enabled: a rolling window of counted calls per group.

        A call refused with 429 does not count; an accepted one counts even if it then fails
        validation (the stricter reading: a client must not rely on failed calls being free).
        """
        limit = self.group_limit_per_minute
        if limit is None or method not in GROUP_LIMITED_METHODS:
            return
        chat_id = p.get("chat_id")
        chat = self.chats.get(chat_id) if isinstance(chat_id, int) else None
        if chat is None or chat.type == "private":
            return
        now = self.clock()
        sent = self._group_sent.setdefault(chat.id, deque())
        while sent and sent[0] <= now - GROUP_WINDOW_S:
            sent.popleft()
        if len(sent) >= limit:
            self.group_429s += 1
            retry_after = max(1, math.ceil(sent[0] + GROUP_WINDOW_S - now))
            raise ApiError(
                429, f"Too Many Requests: retry after {retry_after}", {"retry_after": retry_after}
            )
        sent.append(now)

    async def _dispatch(self, method: str, p: dict[str, Any]) -> Any:
        if method != "getUpdates":
            self._check_fault(method)
            self._check_group_limit(method, p)
        handler = getattr(self, f"_api_{method}", None)
        if handler is None:
            raise ApiError(404, "Not Found")
        return await handler(p)

    # ---- validation helpers -------------------------------------------------------------

    def _chat_for_send(self, p: dict[str, Any]) -> FakeChat:
        if "chat_id" not in p:
            raise bad_request("chat_id is empty")
        chat_id = p["chat_id"]
        if not isinstance(chat_id, int) or chat_id not in self.chats:
            raise bad_request("chat not found")
        chat = self.chats[chat_id]
        if chat.migrated_to is not None:
            raise ApiError(
                400,
                "Bad Request: group chat was upgraded to a supergroup chat",
                {"migrate_to_chat_id": chat.migrated_to},
            )
        if not chat.bot_is_member:
            if chat.type == "private":
                raise ApiError(403, "Forbidden: bot was blocked by the user")
            raise ApiError(403, "Forbidden: bot is not a member of the supergroup chat")
        return chat

    def _parse_text(self, p: dict[str, Any], key: str = "text") -> tuple[str, list[dict[str, Any]]]:
        raw = p.get(key)
        if not isinstance(raw, str) or not raw.strip():
            raise bad_request("message text is empty")
        mode = p.get("parse_mode")
        if mode is None:
            text, entities = raw, []
        elif str(mode).lower() == "html":
            try:
                parsed = parse_html(raw)
            except HtmlParseError as err:
                raise bad_request(f"can't parse entities: {err}") from None
            text, entities = parsed.text, parsed.entities
        else:
            raise bad_request(f"unsupported parse_mode {mode!r} in this fake")
        if not text.strip():
            raise bad_request("message text is empty")
        if utf16_len(text) > MAX_TEXT_UTF16:
            raise bad_request("message is too long")
        return text, entities

    def _check_markup(self, p: dict[str, Any]) -> dict[str, Any] | None:
        markup = p.get("reply_markup")
        if markup is None:
            return None
        if not isinstance(markup, dict):
            raise bad_request("can't parse reply keyboard markup JSON object")
        if "inline_keyboard" not in markup:
            return markup  # ForceReply and friends: kept as sent
        rows = markup["inline_keyboard"]
        if not isinstance(rows, list):
            raise bad_request(
                'can\'t parse inline keyboard button: field "inline_keyboard" must be an Array'
            )
        for row in rows:
            for button in row:
                if not isinstance(button.get("text"), str) or not button["text"]:
                    raise bad_request("BUTTON_TEXT_INVALID")
                data = button.get("callback_data")
                if data is not None and (
                    not isinstance(data, str)
                    or not data
                    or len(data.encode("utf-8")) > MAX_CALLBACK_BYTES
                ):
                    raise bad_request("BUTTON_DATA_INVALID")
                kinds = [k for k in button if k != "text"]
                if len(kinds) != 1:
                    raise bad_request(
                        "can't parse inline keyboard button: "
                        "Text buttons are unallowed in the inline keyboard"
                    )
        return {"inline_keyboard": [row for row in rows if row]} if any(rows) else None

    def _thread(self, chat: FakeChat, p: dict[str, Any]) -> int | None:
        thread_id = p.get("message_thread_id")
        if thread_id is None:
            return None
        if not chat.is_forum:
            raise bad_request("message thread not found")
        return int(thread_id)

    def _reply_to(self, chat: FakeChat, p: dict[str, Any]) -> int | None:
        params = p.get("reply_parameters")
        reply_to = p.get("reply_to_message_id")
        allow_missing = bool(p.get("allow_sending_without_reply"))
        if isinstance(params, dict):
            reply_to = params.get("message_id")
            allow_missing = bool(params.get("allow_sending_without_reply", allow_missing))
        if reply_to is None:
            return None
        target = chat.messages.get(int(reply_to))
        if target is None or target.deleted:
            if allow_missing:
                return None
            raise bad_request("message to be replied not found")
        return int(reply_to)

    def _new_bot_message(self, chat: FakeChat, p: dict[str, Any]) -> FakeMessage:
        thread_id = self._thread(chat, p)
        reply_to = self._reply_to(chat, p)
        if thread_id is None and reply_to is not None:
            thread_id = chat.messages[reply_to].thread_id  # a reply stays in its topic
        msg = FakeMessage(
            chat_id=chat.id,
            message_id=chat.next_message_id,
            from_bot=True,
            user_id=self.bot_id,
            date=int(time.time()),
            thread_id=thread_id,
            is_topic_message=thread_id is not None,
            reply_to=reply_to,
        )
        chat.next_message_id += 1
        return msg

    def _message_dict(
        self, msg: FakeMessage, *, sender: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        chat = self.chats[msg.chat_id]
        d: dict[str, Any] = {
            "message_id": msg.message_id,
            "date": msg.date,
            "chat": chat.as_dict(),
            "from": self._bot_user() if msg.from_bot else (sender or self._user(msg.user_id)),
        }
        if msg.sender_chat_id is not None:
            d["sender_chat"] = (
                self.chats[msg.sender_chat_id].as_dict()
                if msg.sender_chat_id in self.chats
                else {"id": msg.sender_chat_id, "type": "channel", "title": "channel"}
            )
        captioned = msg.document is not None or bool(msg.media)
        if msg.document is not None:
            d["document"] = msg.document
        d.update(msg.media)
        if captioned and msg.text:
            d["caption"] = msg.text
        elif msg.text:
            d["text"] = msg.text
        if msg.entities:
            d["caption_entities" if captioned else "entities"] = msg.entities
        if msg.reply_markup and "inline_keyboard" in msg.reply_markup:
            d["reply_markup"] = msg.reply_markup
        if msg.thread_id is not None:
            d["message_thread_id"] = msg.thread_id
            d["is_topic_message"] = True
        if msg.reply_to is not None:
            target = chat.messages[msg.reply_to]
            d["reply_to_message"] = self._message_dict(target) | (
                {"from": target.raw.get("from")} if target.raw.get("from") else {}
            )
        elif msg.thread_id is not None:
            # Telegram marks topic messages as replies to the topic's creation message; keep
            # only the thread id, which is what a client keys on.
            pass
        return d

    def _editable(self, p: dict[str, Any]) -> tuple[FakeChat, FakeMessage]:
        if "inline_message_id" in p:
            raise bad_request("inline messages are not supported by this fake")
        chat = self._chat_for_send(p)
        msg = chat.messages.get(int(p.get("message_id", 0)))
        if msg is None or msg.deleted:
            raise bad_request("message to edit not found")
        if not msg.from_bot:
            raise bad_request("message can't be edited")
        return chat, msg

    # ---- methods ----------------------------------------------------------------------------

    async def _api_getMe(self, p: dict[str, Any]) -> Any:
        return self._bot_user() | {
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
        }

    async def _api_deleteWebhook(self, p: dict[str, Any]) -> Any:
        if p.get("drop_pending_updates"):
            self._updates.clear()
        self.webhook = None
        return True

    async def _api_setWebhook(self, p: dict[str, Any]) -> Any:
        url = str(p.get("url") or "")
        if p.get("drop_pending_updates"):
            self._updates.clear()
        if not url:  # an empty url removes the webhook
            self.webhook = None
            return True
        parts = urlsplit(url)
        if parts.scheme != "https" or not parts.hostname:
            raise bad_request("bad webhook: An HTTPS URL must be provided for webhook")
        if (parts.port or 443) not in WEBHOOK_PORTS:
            raise bad_request(
                "bad webhook: Webhook can be set up only on ports 80, 88, 443 or 8443"
            )
        secret = p.get("secret_token")
        if secret is not None and not _SECRET_TOKEN.fullmatch(str(secret)):
            raise bad_request("secret token contains unallowed characters")
        allowed = p.get("allowed_updates")
        max_connections = int(p.get("max_connections") or 40)
        if not 1 <= max_connections <= 100:
            raise bad_request("bad webhook: max_connections must be between 1 and 100")
        self.webhook = Webhook(
            url=url,
            secret_token=None if secret is None else str(secret),
            allowed_updates=list(allowed) if isinstance(allowed, list) else None,
            drop_pending_updates=bool(p.get("drop_pending_updates")),
            max_connections=max_connections,
        )
        return True

    async def _api_getWebhookInfo(self, p: dict[str, Any]) -> Any:
        hook = self.webhook
        if hook is None:
            return {"url": "", "has_custom_certificate": False, "pending_update_count": 0}
        info: dict[str, Any] = {
            "url": hook.url,
            "has_custom_certificate": False,
            "pending_update_count": len(self._updates),
            "max_connections": hook.max_connections,
        }
        if hook.allowed_updates is not None:
            info["allowed_updates"] = hook.allowed_updates
        return info

    async def _api_getUpdates(self, p: dict[str, Any]) -> Any:
        if self.webhook is not None:
            raise ApiError(409, WEBHOOK_ACTIVE)
        offset = int(p.get("offset") or 0)
        timeout_s = float(p.get("timeout") or 0)
        limit = int(p.get("limit") or 100)
        allowed = p.get("allowed_updates")
        if offset:
            # Telegram forgets every update below the offset: that is the acknowledgement.
            self._updates = [u for u in self._updates if u["update_id"] >= offset]

        def ready() -> list[dict[str, Any]]:
            out = [u for u in self._updates if u["update_id"] >= offset]
            if allowed:
                out = [u for u in out if any(k in u for k in allowed)]
            return out[:limit]

        # Telegram lets one long poll live: a newer getUpdates terminates the older one.
        self._poll_generation += 1
        mine = self._poll_generation
        deadline = asyncio.get_running_loop().time() + timeout_s
        async with self._changed:
            while not ready() and not self._closing:
                if self._poll_generation != mine:
                    raise ApiError(
                        409,
                        "Conflict: terminated by other getUpdates request; "
                        "make sure that only one bot instance is running",
                    )
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0:
                    break
                try:
                    await asyncio.wait_for(self._changed.wait(), left)
                except TimeoutError:
                    break
        return ready()

    async def _api_sendMessage(self, p: dict[str, Any]) -> Any:
        chat = self._chat_for_send(p)
        text, entities = self._parse_text(p)
        markup = self._check_markup(p)
        msg = self._new_bot_message(chat, p)
        msg.text, msg.html, msg.entities, msg.reply_markup = text, p["text"], entities, markup
        chat.messages[msg.message_id] = msg
        return self._message_dict(msg)

    async def _api_sendMessageDraft(self, p: dict[str, Any]) -> Any:
        """A streamed reply's draft: private chats only, a non-zero ``draft_id``; kept in
        ``chat.drafts`` as (draft_id, text, clock) and shown nowhere else."""
        chat = self._chat_for_send(p)
        if chat.type != "private":
            raise bad_request("the method is available only for private chats")
        draft_id = p.get("draft_id")
        if not isinstance(draft_id, int) or draft_id == 0:
            raise bad_request("invalid draft_id")
        text = p.get("text") or ""
        if not isinstance(text, str) or utf16_len(text) > MAX_TEXT_UTF16:
            raise bad_request("message is too long")
        self._thread(chat, p)
        chat.drafts.append((draft_id, text, self.clock()))
        return True

    async def _api_editMessageText(self, p: dict[str, Any]) -> Any:
        _, msg = self._editable(p)
        text, entities = self._parse_text(p)
        markup = self._check_markup(p)
        if msg.document is not None:
            raise bad_request("there is no text in the message to edit")
        if text == msg.text and entities == msg.entities and markup == msg.reply_markup:
            raise ApiError(400, NOT_MODIFIED)
        if text != msg.text or entities != msg.entities:
            msg.edits.append(msg.text)
        # Without reply_markup Telegram removes the inline keyboard.
        msg.text, msg.html, msg.entities, msg.reply_markup = text, p["text"], entities, markup
        return self._message_dict(msg)

    async def _api_editMessageReplyMarkup(self, p: dict[str, Any]) -> Any:
        _, msg = self._editable(p)
        markup = self._check_markup(p)
        if markup == msg.reply_markup:
            raise ApiError(400, NOT_MODIFIED)
        msg.reply_markup = markup
        return self._message_dict(msg)

    async def _api_deleteMessage(self, p: dict[str, Any]) -> Any:
        chat = self._chat_for_send(p)
        msg = chat.messages.get(int(p.get("message_id", 0)))
        if msg is None or msg.deleted:
            raise bad_request("message to delete not found")
        if not msg.from_bot and chat.type == "private":
            raise bad_request("message can't be deleted for everyone")
        msg.deleted = True
        if msg.message_id in chat.pinned:
            chat.pinned.remove(msg.message_id)
        return True

    async def _api_answerCallbackQuery(self, p: dict[str, Any]) -> Any:
        qid = str(p.get("callback_query_id", ""))
        if qid not in self._open_queries or qid in self.callback_answers:
            raise bad_request(
                "query is too old and response timeout expired or query ID is invalid"
            )
        text = p.get("text")
        if text is not None and len(text) > 200:
            raise bad_request("MESSAGE_TOO_LONG")
        self.callback_answers[qid] = {"text": text, "show_alert": bool(p.get("show_alert"))}
        return True

    async def _api_sendDocument(self, p: dict[str, Any]) -> Any:
        chat = self._chat_for_send(p)
        doc = p.get("document")
        if not isinstance(doc, dict) or "content" not in doc:
            raise bad_request("there is no document in the request")
        caption, entities = ("", [])
        if p.get("caption"):
            caption, entities = self._parse_text(
                {"text": p["caption"], "parse_mode": p.get("parse_mode")}
            )
            if utf16_len(caption) > 1024:
                raise bad_request("message caption is too long")
        markup = self._check_markup(p)
        msg = self._new_bot_message(chat, p)
        file_id = f"doc{next(self._file_ids)}"
        self.files[f"documents/{file_id}"] = doc["content"]
        msg.document = {
            "file_id": file_id,
            "file_unique_id": f"u{file_id}",
            "file_name": doc.get("filename") or "file",
            "file_size": len(doc["content"]),
        }
        msg.text, msg.entities, msg.reply_markup = caption, entities, markup
        chat.messages[msg.message_id] = msg
        return self._message_dict(msg)

    async def _api_getFile(self, p: dict[str, Any]) -> Any:
        file_id = str(p.get("file_id", ""))
        path = self._file_paths.get(file_id, f"documents/{file_id}")
        if path not in self.files:
            raise bad_request("invalid file_id")
        if len(self.files[path]) > MAX_DOWNLOAD_BYTES:
            raise bad_request("file is too big")  # bots may fetch at most 20 MB
        return {
            "file_id": file_id,
            "file_unique_id": f"u{file_id}",
            "file_size": len(self.files[path]),
            "file_path": path,
        }

    async def _api_sendChatAction(self, p: dict[str, Any]) -> Any:
        chat = self._chat_for_send(p)
        action = p.get("action")
        if action not in ("typing", "upload_document"):
            raise bad_request("wrong parameter action in request")
        self._thread(chat, p)
        chat.chat_actions.append(str(action))
        return True

    async def _api_setMyCommands(self, p: dict[str, Any]) -> Any:
        commands = p.get("commands")
        if not isinstance(commands, list) or len(commands) > 100:
            raise bad_request("commands must be a list of at most 100 commands")
        for c in commands:
            if not _COMMAND_NAME.fullmatch(str(c.get("command", ""))):
                raise bad_request("BOT_COMMAND_INVALID")
            if not 1 <= len(str(c.get("description", ""))) <= 256:
                raise bad_request("BOT_COMMAND_DESCRIPTION_INVALID")
        self.commands = [
            {"command": c["command"], "description": c["description"]} for c in commands
        ]
        return True

    async def _api_getMyCommands(self, p: dict[str, Any]) -> Any:
        return self.commands

    async def _api_pinChatMessage(self, p: dict[str, Any]) -> Any:
        chat = self._chat_for_send(p)
        msg = chat.messages.get(int(p.get("message_id", 0)))
        if msg is None or msg.deleted:
            raise bad_request("message to pin not found")
        if chat.type != "private" and not chat.bot_can_pin:
            raise bad_request("not enough rights to manage pinned messages in the chat")
        if msg.message_id in chat.pinned:
            chat.pinned.remove(msg.message_id)
        chat.pinned.append(msg.message_id)
        return True

    async def _api_unpinChatMessage(self, p: dict[str, Any]) -> Any:
        chat = self._chat_for_send(p)
        mid = p.get("message_id")
        if mid is None and chat.pinned:
            mid = chat.pinned[-1]
        if mid in chat.pinned:
            chat.pinned.remove(mid)
        return True

    async def _api_leaveChat(self, p: dict[str, Any]) -> Any:
        chat = self._chat_for_send(p)
        if chat.type == "private":
            raise bad_request("chat member status can't be changed in private chats")
        chat.bot_is_member = False
        return True

    async def _api_getChat(self, p: dict[str, Any]) -> Any:
        chat_id = p.get("chat_id")
        if chat_id not in self.chats:
            raise bad_request("chat not found")
        return self.chats[chat_id].as_dict() | {
            "accent_color_id": 0,
            "max_reaction_count": 11,
            "accepted_gift_types": {
                "unlimited_gifts": False,
                "limited_gifts": False,
                "unique_gifts": False,
                "premium_subscription": False,
                "gifts_from_channels": False,
            },
        }

    async def _api_getChatMember(self, p: dict[str, Any]) -> Any:
        chat = self._chat_for_send(p)
        user_id = int(p.get("user_id", 0))
        if user_id == self.bot_id:
            return self._member("administrator" if chat.bot_can_pin else "member")
        return {"status": "member", "user": self._user(user_id)}
