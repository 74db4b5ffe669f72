"""The Slack application: slack_bolt's AsyncApp, its listeners, and serving it (docs/slack.md).

Listeners (each acknowledges at once; the work runs after, in the conversation's lane, so one
conversation's envelopes are handled in arrival order and never past Slack's 3 seconds)::

    /plangate <verb> [text]      a command: plan, show-plan, execute, discard, goal, stop, new,
                                 status, usage, setup, team, project, help (other text: words
                                 for the agent)
    app_mention                  ``@plangate <verb> [text]`` as the command; other text: words
    message                      DMs with an owner; in channels: replies in the bot's threads
                                 and the next message of who pressed Keep planning; files
                                 shared (subtype file_share) go to the session inbox
    member_joined_channel        the bot invited: stays when an owner invited it, else leaves
    block_actions ^[pga]:        plan, goal and tool approval buttons -> engine.press
    block_actions ^q:            an ask_user option -> the person's answer

Who may do what is the engine's permission table (engine.roles.policy.may) with the sender's
role (engine.role_of); bots, workflows and people of another workspace (Slack Connect) are
never owners. Events API retries are recognised by ``event_id`` and dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from slack_bolt.app.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot import presses as cb
from bot.flood import AnswerBudget
from bot.routes import ChatRoute, MetaStore, Routes
from bot.slack import keys
from bot.slack.cards import CardKind, SlackCards
from bot.slack.channel import SlackChannel, escape
from bot.slack.outbox import SlackOutbox
from bot.slack.render import markdown_to_mrkdwn
from engine.api import (
    ALERT_TEXTS,
    STALE_TEXT,
    CommandName,
    EngineApi,
    Outcome,
    RestoredGoal,
    clean_name,
    command_action,
    inline_text,
    may,
    press_action,
    refusal_text,
    save_upload,
    words_action,
)
from engine.events import Attachment
from engine.keys import ChatKey, PersonKey
from engine.roles.types import Person, Role
from engine.tasks import BackgroundTasks

_log = logging.getLogger("plangate.slack")

ALLOWED_KEY = "slack.channels"  # channels an owner invited the bot to (JSON list)
SLASH_COMMAND = "/plangate"
# The events the app listens to (deploy/slack-manifest.json subscribes to each; a test checks).
EVENTS = ("app_mention", "message", "member_joined_channel", "file_shared")
VERBS: dict[str, CommandName] = {
    "plan": "plan",
    "show-plan": "show_plan",
    "show_plan": "show_plan",
    "execute": "execute",
    "discard": "discard",
    "goal": "goal",
    "stop": "stop",
    "status": "status",
    "usage": "usage",
    "setup": "setup",
    "help": "help",
    "start": "help",
}
OWN_VERBS = frozenset({"new", "team", "project"})
SEEN_EVENTS = 2048  # event ids remembered against the Events API's retries
MAX_TOAST = 200  # a press's answer up to this long is said to the presser alone
MAX_UPLOAD_BYTES = 20 * 1024 * 1024
_MENTION = re.compile(r"<@([A-Z0-9]+)(?:\|[^>]*)?>")
_IGNORED_SUBTYPES = frozenset(
    {"bot_message", "message_changed", "message_deleted", "channel_join", "channel_leave"}
)


@dataclass(frozen=True, slots=True)
class SlackConfig:
    """What the Slack front end reads from the settings (bot.settings)."""

    bot_token: str
    app_token: str = ""
    signing_secret: str = ""
    api_url: str = "https://slack.com/api/"
    owner_ids: tuple[str, ...] = ()
    allowed_channels: tuple[str, ...] = ()
    interval_s: float = 1.0
    document_chars: int = 6000
    # One replica of several (bot.slack.ingress): the ingress checked each request's
    # signature when it arrived, and the owner replays it later, to completion.
    replayed: bool = False


@dataclass(slots=True)
class Sender:
    """Who sent an envelope: the Slack user, the engine's person id (None: never an owner,
    as bots, workflows and Slack Connect people), and a name to show."""

    user: str
    actor: PersonKey | None
    name: str


@dataclass(slots=True)
class _State:
    allowed: set[str] = field(default_factory=set)
    left: set[str] = field(default_factory=set)
    expect: set[tuple[int, int, int]] = field(default_factory=set)  # feedback awaited
    seen: OrderedDict[str, None] = field(default_factory=OrderedDict)  # event ids


def parse_verb(text: str) -> tuple[str, str]:
    """``"plan add a readme"`` -> ``("plan", "add a readme")`` (the verb lower-cased)."""
    first, _, rest = text.strip().partition(" ")
    return first.lower(), rest.strip()


_SLASHED = re.compile(
    r"(?<![\w/])/(" + "|".join(sorted({*VERBS, *OWN_VERBS}, key=len, reverse=True)) + r")(?![\w/-])"
)


_ON_SLACK = {name: "/plangate " + name.replace("_", "-") for name in {*VERBS, *OWN_VERBS}}


@functools.lru_cache(maxsize=256)
def slack_commands(text: str) -> str:
    """The engine's words name commands as ``/show_plan``; on Slack they are verbs of the one
    slash command: ``/plangate show-plan``. (Cached: /help's text comes again and again.)"""
    if "/" not in text:
        return text
    return _SLASHED.sub(lambda m: _ON_SLACK[m.group(1)], text)


class SlackFrontEnd:
    """The Slack front end for one workspace: the bolt app, the outbox, the cards, the channel."""

    def __init__(
        self,
        engine: EngineApi,
        meta: MetaStore,
        config: SlackConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.engine = engine
        self.config = config
        self.meta = meta
        self.client = AsyncWebClient(token=config.bot_token, base_url=config.api_url)
        self.app = AsyncApp(
            client=self.client,
            signing_secret=config.signing_secret or None,
            request_verification_enabled=bool(config.signing_secret) and not config.replayed,
            ignoring_self_events_enabled=True,
            # Replayed: a listener has run when dispatch returns, so the owner knows the
            # request was handled before it marks it done.
            process_before_response=config.replayed,
        )
        self.outbox = SlackOutbox(self.client, interval_s=config.interval_s, clock=clock)
        self.routes = Routes(meta)
        self.cards = SlackCards(engine, self.outbox, self.routes)
        self.channel = SlackChannel(
            self.outbox, self.cards, self.routes, document_chars=config.document_chars
        )
        self.tasks = BackgroundTasks(_log)
        self.budget = AnswerBudget()
        self.refused = 0
        self._clock = clock
        self._lanes: dict[str, asyncio.Lock] = {}
        self._allowed_lock = asyncio.Lock()
        self._state = _State(allowed=set(config.allowed_channels))
        self._owners = frozenset(config.owner_ids)
        self.bot_user = ""
        self.team_id = ""
        self._register()

    # ---- start and stop ---------------------------------------------------------------

    async def start(self) -> None:
        """Who the bot is (auth.test) and which channels owners invited it to."""
        who = await self.client.auth_test()
        self.bot_user, self.team_id = str(who["user_id"]), str(who.get("team_id") or "")
        await self.reload_allowed()

    async def _stored_allowed(self) -> set[str]:
        stored = await self.meta.get_meta(ALLOWED_KEY)
        if stored:
            with contextlib.suppress(ValueError, TypeError):
                return {str(c) for c in json.loads(stored)}
        return set()

    async def reload_allowed(self) -> None:
        """Read the channels owners invited the bot to again (among replicas another one
        may have recorded one since this process read them)."""
        self._state.allowed |= await self._stored_allowed()

    async def drain(self) -> None:
        """Finish the work already accepted, then the cards and the outbox."""
        await self.tasks.drain()
        await self.cards.flush()
        await self.outbox.flush()

    async def aclose(self) -> None:
        await self.outbox.aclose()

    # ---- plumbing ----------------------------------------------------------------------

    def _spawn(self, lane: str, work: Awaitable[None], name: str) -> None:
        lock = self._lanes.setdefault(lane, asyncio.Lock())

        async def run() -> None:
            async with lock:
                await work

        self.tasks.spawn(run(), name=name)

    def _first_time(self, event_id: str | None) -> bool:
        """False for an event id already handled (the Events API retries what was slow)."""
        if not event_id:
            return True
        seen = self._state.seen
        if event_id in seen:
            return False
        seen[event_id] = None
        while len(seen) > SEEN_EVENTS:
            seen.popitem(last=False)
        return True

    async def _sender(
        self, user: str | None, team: str | None, *, bot: bool = False
    ) -> Sender | None:
        """The sender, or None for the bot itself; a bot, a workflow or someone of another
        workspace is heard as nobody known (never an owner)."""
        if not user or user == self.bot_user:
            return None
        external = bool(team and self.team_id and team != self.team_id)
        if bot or external:
            return Sender(user, None, user)
        try:
            actor = keys.person_key(user)
        except ValueError:
            return Sender(user, None, user)
        return Sender(user, actor, user)

    async def _name(self, user: str) -> str:
        """A person's name as Slack shows it (their id when users.info cannot say)."""
        try:
            info = await self.client.users_info(user=user)
        except SlackApiError:
            return user
        record = info.get("user") or {}
        profile = record.get("profile") or {}
        return str(profile.get("display_name") or record.get("real_name") or user)

    async def _role(self, chat: int, sender: Sender) -> Role:
        return await self.engine.role_of(keys.chat_ref(chat), sender.actor)

    async def _allowed(self, channel: str, chat: int, sender: Sender | None) -> bool:
        """Whether the bot works in this conversation (leaving a channel it may not be in)."""
        if chat > 0:  # a DM: an owner's
            return (
                sender is not None
                and sender.actor is not None
                and (await self._role(chat, sender) == "owner")
            )
        if channel in self._state.allowed:
            return True
        await self._leave(channel)
        return False

    async def _leave(self, channel: str) -> None:
        if channel in self._state.left:
            return
        self._state.left.add(channel)
        _log.info("slack: leaving %s (no owner invited the bot)", channel)
        with contextlib.suppress(SlackApiError):
            await self.outbox.leave(channel)

    async def _session(self, chat: int, thread: int) -> str:
        session_id = await self.engine.session_for_chat(keys.engine_chat(chat, thread))
        await self.routes.remember(session_id, ChatRoute(chat, thread))
        return session_id

    def _thread_of(self, event: dict[str, Any]) -> int:
        """The engine's thread of an event: a thread under one of the bot's own top-level
        messages (a card, a reply) belongs to the channel's session; any other thread the bot
        is called into is a session of its own."""
        thread_ts = event.get("thread_ts")
        if not thread_ts or thread_ts == event.get("ts"):
            return 0
        if event.get("parent_user_id") == self.bot_user or thread_ts in self.outbox.posted_ts:
            return 0
        return keys.ts_key(thread_ts)

    async def _refuse(self, channel: str, chat: int, sender: Sender, text: str) -> None:
        """A refusal said to the sender alone, within the answer budget (bot.flood)."""
        now = self._clock()
        who = sender.actor or 0
        if not self.budget.allows(chat, who, now):
            self.budget.drop()
            return
        self.budget.take(chat, who, now)
        self.refused += 1
        with contextlib.suppress(SlackApiError):
            await self.outbox.ephemeral(channel, sender.user, slack_commands(escape(text)))

    async def _post(self, chat: int, thread: int, mrkdwn: str) -> None:
        channel, thread_ts = keys.channel_of(chat), keys.ts_of(thread)
        try:
            await self.outbox.post(channel, mrkdwn, thread_ts=thread_ts)
        except SlackApiError as err:
            _log.warning("slack: not posted in %s (%s)", channel, err.response.get("error"))

    async def _render(
        self, session_id: str, chat: int, thread: int, outcome: Outcome, sender: Sender
    ) -> None:
        """An outcome: its words in the conversation, then the cards. Awaited in the
        conversation's lane (already past the ack), so replies keep the commands' order."""
        if outcome.await_feedback and sender.actor is not None:
            self._state.expect.add((chat, thread, sender.actor))
        if outcome.reply:
            text = slack_commands(escape(outcome.reply))
            if outcome.await_feedback:
                text = f"<@{sender.user}>, {text}"
            await self._post(chat, thread, text)
        self._cards(session_id, outcome)

    def _cards(self, session_id: str, outcome: Outcome) -> None:
        for kind, action in (("plan", outcome.plan_card), ("goal", outcome.goal_card)):
            if action is not None:
                card: CardKind = "plan" if kind == "plan" else "goal"
                self.cards.refresh(session_id, card, anew=action == "restick")

    # ---- listeners ---------------------------------------------------------------------

    def _register(self) -> None:
        app = self.app

        @app.command(SLASH_COMMAND)
        async def slash(ack: Any, body: dict[str, Any]) -> None:
            await ack()
            channel = str(body.get("channel_id") or "")
            self._spawn(channel, self._slash(body), name="slack:slash")

        @app.event("app_mention")
        async def mention(body: dict[str, Any], event: dict[str, Any]) -> None:
            if self._first_time(body.get("event_id")):
                channel = str(event.get("channel") or "")
                self._spawn(channel, self._mention(event), name="slack:mention")

        @app.event("message")
        async def message(body: dict[str, Any], event: dict[str, Any]) -> None:
            if self._first_time(body.get("event_id")):
                channel = str(event.get("channel") or "")
                self._spawn(channel, self._message(event), name="slack:message")

        @app.event("member_joined_channel")
        async def joined(body: dict[str, Any], event: dict[str, Any]) -> None:
            if self._first_time(body.get("event_id")):
                channel = str(event.get("channel") or "")
                self._spawn(channel, self._joined(event), name="slack:joined")

        @app.event("file_shared")
        async def file_shared() -> None:
            return None  # the file arrives as a message with subtype file_share

        @app.action(re.compile(r"^[pga]:"))
        async def press(ack: Any, body: dict[str, Any]) -> None:
            await ack()
            channel = str((body.get("container") or {}).get("channel_id") or "")
            self._spawn(channel, self._press(body), name="slack:press")

        @app.action(re.compile(r"^q:"))
        async def option(ack: Any, body: dict[str, Any]) -> None:
            await ack()
            channel = str((body.get("container") or {}).get("channel_id") or "")
            self._spawn(channel, self._option(body), name="slack:option")

    async def _slash(self, body: dict[str, Any]) -> None:
        channel = str(body.get("channel_id") or "")
        sender = await self._sender(body.get("user_id"), body.get("team_id"))
        if sender is None or not channel:
            return
        chat = keys.chat_key(channel)
        if not await self._allowed(channel, chat, sender):
            return
        await self._verb_or_words(channel, chat, 0, sender, str(body.get("text") or ""), None)

    async def _mention(self, event: dict[str, Any]) -> None:
        channel = str(event.get("channel") or "")
        sender = await self._sender(
            event.get("user"),
            event.get("team") or event.get("user_team"),
            bot=bool(event.get("bot_id")),
        )
        if sender is None or not channel:
            return
        chat = keys.chat_key(channel)
        if not await self._allowed(channel, chat, sender):
            return
        text = _MENTION.sub("", str(event.get("text") or "")).strip()
        await self._verb_or_words(
            channel, chat, self._thread_of(event), sender, text, str(event.get("ts") or "")
        )

    async def _verb_or_words(
        self, channel: str, chat: int, thread: int, sender: Sender, text: str, ts: str | None
    ) -> None:
        verb, args = parse_verb(text)
        if verb in VERBS or verb in OWN_VERBS:
            await self._command(channel, chat, thread, sender, verb, args)
        elif text:
            await self._words(channel, chat, thread, sender, text, ts, heard=True)

    async def _command(
        self, channel: str, chat: int, thread: int, sender: Sender, verb: str, args: str
    ) -> None:
        name = VERBS.get(verb, verb)
        role = await self._role(chat, sender)
        if not may(role, command_action(name, args)):
            await self._refuse(channel, chat, sender, refusal_text(role))
            return
        if role == "member":  # a member's answers come out of the same budget as refusals
            now = self._clock()
            if not self.budget.allows(chat, sender.actor or 0, now):
                self.budget.drop()
                return
            self.budget.take(chat, sender.actor or 0, now)
        session_id = await self._session(chat, thread)
        if verb == "new":
            outcome = await self.engine.new_session(
                keys.engine_chat(chat, thread), actor=sender.actor or ""
            )
            session_id = await self._session(chat, thread)
        elif verb == "project":
            outcome = await self.engine.project(
                keys.engine_chat(chat, thread), args, actor=sender.actor or ""
            )
            session_id = await self._session(chat, thread)
        elif verb == "team":
            # ``add <@U01ABC> approver``: Slack's mention of a person is the target (their key
            # for the engine, shown by their Slack name); the words keep it as a name.
            found = _MENTION.search(args)
            target = None
            if found is not None:
                target = Person(keys.person_key(found.group(1)), await self._name(found.group(1)))
            args = _MENTION.sub(lambda m: "@" + m.group(1), args)
            outcome = await self.engine.team(
                keys.engine_chat(chat, thread),
                args,
                actor=sender.actor,
                actor_name=sender.name,
                target=target,
            )
        else:
            outcome = await self.engine.command(
                session_id, VERBS[verb], args, actor=sender.actor, actor_name=sender.name
            )
        await self._render(session_id, chat, thread, outcome, sender)

    async def _words(
        self,
        channel: str,
        chat: int,
        thread: int,
        sender: Sender,
        text: str,
        ts: str | None,
        *,
        heard: bool,
        attachments: tuple[Attachment, ...] = (),
    ) -> bool:
        """Words for the agent, when the sender's role allows them here; whether they went."""
        key = (chat, thread, sender.actor or 0)
        feedback = key in self._state.expect
        if not heard and not feedback:
            return False
        role = await self._role(chat, sender)
        if not may(role, words_action(feedback=feedback)):
            await self._refuse(channel, chat, sender, refusal_text(role))
            return False
        self._state.expect.discard(key)
        session_id = await self._session(chat, thread)
        await self.engine.user_message(
            session_id,
            text,
            actor=sender.actor,
            message_id=keys.message_ref(ts),
            feedback=feedback,
            attachments=attachments,
        )
        return True

    async def _message(self, event: dict[str, Any]) -> None:
        subtype = event.get("subtype")
        if subtype in _IGNORED_SUBTYPES or event.get("bot_id"):
            return
        channel = str(event.get("channel") or "")
        sender = await self._sender(event.get("user"), event.get("team") or event.get("user_team"))
        if sender is None or not channel:
            return
        text = str(event.get("text") or "")
        if self.bot_user and f"<@{self.bot_user}" in text and subtype != "file_share":
            return  # app_mention carries it
        chat = keys.chat_key(channel)
        if not await self._allowed(channel, chat, sender):
            return
        thread = self._thread_of(event)
        # Heard: every DM message (an owner's: _allowed), a reply in a thread under the bot's
        # message; in a channel otherwise only the feedback someone was asked for.
        in_bot_thread = bool(event.get("thread_ts")) and (
            event.get("parent_user_id") == self.bot_user
            or event.get("thread_ts") in self.outbox.posted_ts
        )
        heard = chat > 0 or in_bot_thread
        if subtype == "file_share":
            # A file shared where the bot works is for the agent (from whom words may come).
            await self._files(channel, chat, thread, sender, event, heard=True)
            return
        if subtype is not None:
            return
        await self._words(
            channel, chat, thread, sender, text, str(event.get("ts") or ""), heard=heard
        )

    async def _files(
        self,
        channel: str,
        chat: int,
        thread: int,
        sender: Sender,
        event: dict[str, Any],
        *,
        heard: bool,
    ) -> None:
        """Files shared: into the session inbox, only from someone allowed to give words."""
        role = await self._role(chat, sender)
        feedback = (chat, thread, sender.actor or 0) in self._state.expect
        if not may(role, words_action(feedback=feedback)):
            await self._refuse(channel, chat, sender, refusal_text(role))
            return
        session_id = await self._session(chat, thread)
        folder = self.engine.inbox_dir(session_id)
        if folder is None:
            return
        attachments: list[Attachment] = []
        for item in event.get("files") or []:
            url = item.get("url_private_download") or item.get("url_private")
            if not url or int(item.get("size") or 0) > MAX_UPLOAD_BYTES:
                continue
            data = await self._download(str(url))
            name = clean_name(item.get("name"))
            mime = str(item.get("mimetype") or "")
            path = await asyncio.to_thread(save_upload, folder, name, data)
            attachments.append(
                Attachment(
                    kind="image" if mime.startswith("image/") else "file",
                    path=str(path),
                    name=path.name,
                    size=len(data),
                    mime=mime,
                    text=inline_text(data, mime) if not mime.startswith("image/") else None,
                )
            )
        if not attachments:
            return
        text = _MENTION.sub("", str(event.get("text") or "")).strip()
        await self._words(
            channel,
            chat,
            thread,
            sender,
            text,
            str(event.get("ts") or ""),
            heard=heard,
            attachments=tuple(attachments),
        )

    async def _download(self, url: str) -> bytes:
        headers = {"Authorization": f"Bearer {self.config.bot_token}"}
        timeout = aiohttp.ClientTimeout(total=120)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(url, headers=headers) as response,
        ):
            response.raise_for_status()
            return await response.read()

    async def _joined(self, event: dict[str, Any]) -> None:
        if event.get("user") != self.bot_user:
            return
        channel = str(event.get("channel") or "")
        inviter = event.get("inviter")
        owner = inviter is not None and str(inviter) in self._owners
        if owner or channel in self._state.allowed:
            self._state.allowed.add(channel)
            self._state.left.discard(channel)
            # Only this channel is added to the stored list: other replicas write it too, and
            # a whole-set write would undo what they added since this process read it.
            async with self._allowed_lock:
                stored = await self._stored_allowed()
                await self.meta.set_meta(ALLOWED_KEY, json.dumps(sorted(stored | {channel})))
            return
        await self._leave(channel)

    def _press_place(self, body: dict[str, Any]) -> tuple[str, str, int, int] | None:
        container = body.get("container") or {}
        channel = str(container.get("channel_id") or "")
        ts = str(container.get("message_ts") or "")
        if not channel or not ts:
            return None
        message = body.get("message") or {}
        thread_ts = message.get("thread_ts")
        thread = 0
        if thread_ts and thread_ts != ts and thread_ts not in self.outbox.posted_ts:
            thread = keys.ts_key(thread_ts)
        return channel, ts, keys.chat_key(channel), thread

    async def _press(self, body: dict[str, Any]) -> None:
        place = self._press_place(body)
        user = body.get("user") or {}
        sender = await self._sender(user.get("id"), user.get("team_id"))
        actions = body.get("actions") or [{}]
        if place is None or sender is None:
            return
        channel, ts, chat, thread = place
        sender.name = str(user.get("name") or user.get("username") or sender.user)
        if not await self._allowed(channel, chat, sender):
            return
        data = cb.decode(actions[0].get("value") or actions[0].get("action_id"))
        if data is None:
            await self.outbox.ephemeral(channel, sender.user, STALE_TEXT)
            return
        role = await self._role(chat, sender)
        if not may(role, press_action(data.kind, data.action)):
            await self._refuse(channel, chat, sender, ALERT_TEXTS[role])
            return
        session_id = await self._session(chat, thread)
        outcome = await self.engine.press(
            session_id,
            data,
            actor=sender.actor,
            message_id=keys.message_ref(ts),
            actor_name=sender.name,
        )
        if outcome.stale:
            self.cards.refresh(session_id, "plan")
            self.cards.refresh(session_id, "goal")
        reply = outcome.reply
        if reply and len(reply) <= MAX_TOAST and not outcome.await_feedback:
            with contextlib.suppress(SlackApiError):
                await self.outbox.ephemeral(channel, sender.user, slack_commands(escape(reply)))
            outcome = Outcome(
                plan_card=outcome.plan_card,
                goal_card=outcome.goal_card,
                await_feedback=outcome.await_feedback,
            )
        await self._render(session_id, chat, thread, outcome, sender)

    async def _option(self, body: dict[str, Any]) -> None:
        place = self._press_place(body)
        user = body.get("user") or {}
        sender = await self._sender(user.get("id"), user.get("team_id"))
        actions = body.get("actions") or [{}]
        if place is None or sender is None:
            return
        channel, _, chat, _thread = place
        role = await self._role(chat, sender)
        if not may(role, press_action("q", "")):
            await self._refuse(channel, chat, sender, ALERT_TEXTS[role])
            return
        found = self.channel.answer(str(actions[0].get("action_id") or ""))
        if found is None:
            await self.outbox.ephemeral(channel, sender.user, "This question is out of date.")
            return
        question, text = found
        with contextlib.suppress(SlackApiError):
            shown = f"❓ answered: *{escape(text)}*"
            await self.outbox.update(question.channel, question.ts, shown, blocks=[])
        await self.engine.user_message(
            question.session_id,
            text,
            actor=sender.actor,
            message_id=keys.message_ref(question.ts),
            answer=True,
        )

    # ---- serving -------------------------------------------------------------------------

    async def announce(self, session_id: str, text: str) -> None:
        """A line from plangate itself in the session's conversation (restart notes)."""
        await self.channel.say(session_id, markdown_to_mrkdwn(text))


async def serve_socket_mode(front: SlackFrontEnd, stop: asyncio.Event) -> None:
    """Dial Slack's Socket Mode websocket and serve until ``stop`` is set."""
    from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

    handler = AsyncSocketModeHandler(front.app, front.config.app_token)
    await handler.connect_async()  # type: ignore[no-untyped-call]
    try:
        await stop.wait()
    finally:
        await handler.close_async()  # type: ignore[no-untyped-call]


async def serve_http(
    front: SlackFrontEnd, stop: asyncio.Event, *, host: str, port: int, path: str = "/slack/events"
) -> None:
    """Serve the Events API (and interactivity, and the slash command) over HTTP at
    ``path``, every request checked against the signing secret."""
    from aiohttp import web

    web_app = front.app.web_app(path=path)
    runner = web.AppRunner(web_app)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


async def _announce(front: SlackFrontEnd, restored: list[RestoredGoal]) -> None:
    for item in restored:
        if await front.channel.place(item.session_id) is not None:
            front.cards.refresh(item.session_id, "goal", anew=True)


async def serve_replica(
    front: SlackFrontEnd,
    engine: EngineApi,
    replicas: Any,
    stop: asyncio.Event,
    *,
    host: str,
    port: int,
    path: str = "/slack/events",
) -> Any:
    """Among replicas: the ingress on ``host:port`` stores every signed request, and the
    owner loop replays the requests of the conversations this replica holds, until ``stop``.
    Returns the loop, whose leases stay held until its ``close()`` (the engine's shutdown
    still writes for its chats)."""
    from aiohttp import web
    from slack_bolt.request.async_request import AsyncBoltRequest

    from bot.owners import ChatOwners
    from bot.slack.ingress import SOURCE, SlackInboxIngress, is_slack_key, stored_request

    async def process(item: Any) -> None:
        body, content_type = stored_request(item)
        request = AsyncBoltRequest(body=body, headers={"content-type": [content_type]})
        await front.app.async_dispatch(request)
        await front.tasks.drain()  # the conversation's work the listener started

    async def taken(chat: ChatKey) -> None:
        await front.reload_allowed()  # a channel invited on another replica since our start
        await _announce(front, await engine.chat_taken(chat))

    async def lost(chat: ChatKey) -> None:
        await engine.chat_lost(chat)

    owners = ChatOwners(
        replicas.inbox,
        replicas.leases,
        replica=replicas.replica,
        ttl_s=replicas.ttl_s,
        poll_s=replicas.poll_s,
        process=process,
        on_taken=taken,
        on_lost=lost,
        source=SOURCE,
        owns=is_slack_key,
    )
    ingress = SlackInboxIngress(replicas.inbox, signing_secret=front.config.signing_secret)
    runner = web.AppRunner(ingress.web_app(path))
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    owners_stop = asyncio.Event()
    looping = asyncio.ensure_future(owners.run(owners_stop))
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
        owners_stop.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(looping), 10.0)
        looping.cancel()
    return owners


async def serve_slack(
    front: SlackFrontEnd,
    engine: EngineApi,
    *,
    stop: asyncio.Event,
    listen: tuple[str, int] | None = None,
    owns_engine: bool = True,
    replicas: Any = None,
) -> None:
    """Serve Slack until ``stop``: Socket Mode, or the Events API on ``listen``.

    ``owns_engine``: start the engine first and shut it down last (Slack alone); with Telegram
    beside it, Telegram's ``serve`` does that and this only serves. ``replicas``
    (``bot.telegram.ingress.Replicas``; with ``listen``): one replica of several
    (:func:`serve_replica`)."""
    await front.start()
    # A replica among several recovers each chat when it takes the chat's lease.
    recover = replicas is None
    restored = await engine.start(recover=recover) if owns_engine else []
    if replicas is None:
        # Among replicas the replica that takes a conversation announces its paused goals.
        await _announce(front, restored)
    owners: Any = None
    keeper: asyncio.Future[None] | None = None
    try:
        if listen is None:
            await serve_socket_mode(front, stop)
        elif replicas is not None:
            owners = await serve_replica(
                front, engine, replicas, stop, host=listen[0], port=listen[1]
            )
        else:
            await serve_http(front, stop, host=listen[0], port=listen[1])
    finally:
        if owners is not None:
            keeper = asyncio.ensure_future(owners.keep())
        try:
            if owns_engine:
                await engine.shutdown()
        finally:
            if keeper is not None:
                keeper.cancel()
                await owners.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(front.drain(), 10.0)
            await front.aclose()


__all__ = [
    "EVENTS",
    "SLASH_COMMAND",
    "VERBS",
    "SlackConfig",
    "SlackFrontEnd",
    "parse_verb",
    "serve_http",
    "serve_replica",
    "serve_slack",
    "serve_socket_mode",
]
