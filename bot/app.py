"""The Telegram application: every handler registered in one function, and ``serve``.

Handler map (groups run in order; a group's first matching handler runs)::

    group -2  TypeHandler(Update)        drop repeats: update_id <= the last one processed
    group -1  AccessGate (bot.access)     who may do what; leaves groups; refusals, alerts
    group  0  CommandHandler plan execute discard goal stop new status help start(=help)
              MessageHandler /show-plan, /show_plan, /show-plan@bot (one regex)
              CallbackQueryHandler ^[pg]:  plan and goal card buttons -> engine.press
              CallbackQueryHandler ^q:     ask_user option buttons -> the owner's message
              MessageHandler text          to the agent (engine.user_message)
    errors    one handler: logs the error type, token redacted

Handlers are thin: parse -> call the engine -> render the Outcome. They never await an agent
turn, and the rendering (replies, cards) runs in background tasks through the outbox, so a
429 in one chat never holds up the updates of another.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import logging
import re
import signal
import traceback
from collections.abc import Awaitable, Callable, Collection, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

from telegram import BotCommand, ForceReply, Message, Update
from telegram.error import TelegramError
from telegram.ext import (
    AIORateLimiter,
    Application,
    ApplicationHandlerStop,
    BaseRateLimiter,
    CallbackQueryHandler,
    CommandHandler,
    ContextTypes,
    MessageHandler,
    TypeHandler,
    filters,
)

from bot import callback as cb
from bot.access import AccessGate
from bot.channel import QUESTION_PATTERN, LateChannel, TelegramChannel
from bot.keys import SessionKey, message_key, update_key
from bot.outbox import Outbox
from bot.presenter import CardPresenter
from bot.render import escape
from bot.routes import GROUPS_KEY, LAST_UPDATE_KEY, ChatRoute, MetaStore, Routes
from engine.api import CommandName, EngineApi, Outcome, RestoredGoal
from engine.errors import ConfigError

_log = logging.getLogger("telegram.app")

STALE_TEXT = "This card is out of date."
RESTART_NOTE = "⏸ Paused by the restart. Press ▶️ Resume to go on."
ALLOWED_UPDATES: tuple[str, ...] = ("message", "callback_query", "my_chat_member")
MAX_TOAST = 200
SHUTDOWN_FLUSH_S = 10.0

# The menu: Telegram allows only a-z, 0-9 and _ in command names (so show_plan).
MENU: tuple[tuple[str, str], ...] = (
    ("plan", "Start planning, or revise the plan"),
    ("show_plan", "Show the plan card at the bottom"),
    ("execute", "Approve the plan, or continue it"),
    ("discard", "Discard the plan"),
    ("goal", "Set or steer the goal: pause, resume, clear, rounds N, every 30m"),
    ("stop", "Stop the running turn"),
    ("new", "Start a fresh session"),
    ("status", "What the agent is doing"),
    ("help", "How to use plangate"),
)
# CommandHandler names -> engine command names (/start behaves as /help).
COMMANDS: tuple[tuple[str, CommandName], ...] = (
    ("plan", "plan"),
    ("execute", "execute"),
    ("discard", "discard"),
    ("goal", "goal"),
    ("stop", "stop"),
    ("status", "status"),
    ("help", "help"),
    ("start", "help"),
)
SHOW_PLAN_PATTERN = re.compile(r"^/show[-_]plan(?:@([A-Za-z0-9_]{3,32}))?(?:\s|$)", re.IGNORECASE)


class BotSettings(Protocol):
    """The settings the Telegram front end reads (``bot.settings.Settings``; read-only here).

    Also read when present: ``telegram_token`` (str or ``SecretStr``).
    """

    @property
    def telegram_api_url(self) -> str: ...
    @property
    def owner_ids(self) -> Collection[int]: ...
    @property
    def allowed_chat_ids(self) -> Collection[int]: ...
    @property
    def flow_edit_interval(self) -> float: ...
    @property
    def webhook_url(self) -> str | None: ...
    @property
    def webhook_secret(self) -> Any: ...
    @property
    def webhook_listen(self) -> str | None: ...


def secret_value(value: Any) -> str:
    """The plain text of a setting that may be a pydantic ``SecretStr``."""
    if value is None:
        return ""
    getter = getattr(value, "get_secret_value", None)
    return str(getter() if callable(getter) else value)


def file_url(api_url: str) -> str:
    """The file download base for a Bot API base (``.../bot`` -> ``.../file/bot``)."""
    base = api_url.rstrip("/")
    if base.endswith("/bot"):
        return base[: -len("/bot")] + "/file/bot"
    return base + "/file/bot"


@dataclass
class BotParts:
    """What ``build_application`` wires together (kept in ``bot_data["plangate"]``)."""

    engine: EngineApi
    meta: MetaStore
    outbox: Outbox
    routes: Routes
    presenter: CardPresenter
    channel: TelegramChannel
    gate: AccessGate
    token: str
    last_update_id: int | None = None
    loaded: bool = False
    load_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)


def parts(application: Application[Any, Any, Any, Any, Any, Any]) -> BotParts:
    """The wired parts of an application made by :func:`build_application`."""
    found = application.bot_data["plangate"]
    assert isinstance(found, BotParts)
    return found


def build_application(
    settings: BotSettings,
    engine: EngineApi,
    *,
    db_meta: MetaStore,
    channel_slot: LateChannel | None = None,
    rate_limiter: BaseRateLimiter[Any] | None = None,
    chat_interval_s: float = 1.0,
    group_per_minute: int = 20,
) -> Application[Any, Any, Any, Any, Any, Any]:
    """Build the PTB application with every handler registered (see the module docstring).

    ``channel_slot``: bound to the :class:`TelegramChannel` so an engine built earlier talks
    to this chat. The caller still runs the application (``serve`` does it all).
    """
    token = secret_value(getattr(settings, "telegram_token", None))
    api_url = settings.telegram_api_url or "https://api.telegram.org/bot"
    application = (
        Application.builder()
        .token(token)
        .base_url(api_url)
        .base_file_url(file_url(api_url))
        .rate_limiter(rate_limiter if rate_limiter is not None else AIORateLimiter())
        .job_queue(None)  # the engine owns the one scheduler (DESIGN.md §13)
        .build()
    )
    outbox = Outbox(
        application.bot, chat_interval_s=chat_interval_s, group_per_minute=group_per_minute
    )
    routes = Routes(db_meta)
    presenter = CardPresenter(
        engine,
        outbox,
        routes,
        db_meta,
        edit_interval_s=float(getattr(settings, "flow_edit_interval", 1.5)),
        bot=application.bot,
    )
    channel = TelegramChannel(engine, outbox, presenter, routes)
    if channel_slot is not None:
        channel_slot.bind(channel)

    async def refuse(update: Update, text: str) -> None:
        msg = update.message
        if msg is not None:
            await outbox.send_text(
                msg.chat.id,
                escape(text),
                thread_id=message_key(msg)[1] or None,
                reply_to=msg.message_id,
            )

    holder: list[AccessGate] = []

    async def save_groups(chat_id: int) -> None:
        # The gate already updated its set; persist all of it (a handful of ids).
        _log.info("telegram.app.groups_changed chat=%s", chat_id)
        await db_meta.set_meta(GROUPS_KEY, json.dumps(sorted(holder[0].added_groups)))

    gate = AccessGate(
        owner_ids=settings.owner_ids,
        allowed_chat_ids=settings.allowed_chat_ids or (),
        refuse=refuse,
        on_group_added=save_groups,
        on_group_gone=save_groups,
    )
    holder.append(gate)
    bp = BotParts(engine, db_meta, outbox, routes, presenter, channel, gate, token)
    application.bot_data["plangate"] = bp
    h = Handlers(bp)

    application.add_handler(TypeHandler(Update, h.dedupe), group=-2)
    application.add_handler(gate.handler(), group=-1)
    for command, name in COMMANDS:
        application.add_handler(CommandHandler(command, h.command(name)))
    application.add_handler(CommandHandler("new", h.new))
    application.add_handler(
        MessageHandler(filters.Regex(SHOW_PLAN_PATTERN) & filters.TEXT, h.show_plan)
    )
    application.add_handler(CallbackQueryHandler(h.press, pattern=r"^[pg]:"))
    application.add_handler(CallbackQueryHandler(h.option, pattern=QUESTION_PATTERN))
    application.add_handler(CallbackQueryHandler(h.unknown_press))
    application.add_handler(MessageHandler(filters.TEXT & ~filters.COMMAND, h.text))
    application.add_error_handler(h.error)
    return application


async def load_state(bp: BotParts) -> None:
    """Load the last processed update_id and the owner-added groups (once).

    Concurrent callers (``prepare`` and the first update) wait for the one load: an update
    judged before the load finished could be a repeat let through.
    """
    async with bp.load_lock:
        if bp.loaded:
            return
        last = await bp.meta.get_meta(LAST_UPDATE_KEY)
        stored = int(last) if last and last.isdigit() else None
        if stored is not None:
            bp.last_update_id = max(stored, bp.last_update_id or stored)
        groups = await bp.meta.get_meta(GROUPS_KEY)
        if groups:
            with contextlib.suppress(ValueError, TypeError):
                bp.gate.added_groups.update(int(g) for g in json.loads(groups))
        bp.loaded = True


async def prepare(application: Application[Any, Any, Any, Any, Any, Any]) -> None:
    """After ``initialize()``: load the bot's state and register the command menu."""
    bp = parts(application)
    await load_state(bp)
    try:
        await application.bot.set_my_commands([BotCommand(c, d) for c, d in MENU])
    except TelegramError as err:
        _log.warning("telegram.app.set_my_commands_failed %s", type(err).__name__)


async def announce_restored(
    application: Application[Any, Any, Any, Any, Any, Any], restored: Sequence[RestoredGoal]
) -> None:
    """Each goal that came up disarmed gets its goal card anew, with Resume and a note."""
    bp = parts(application)
    for item in restored:
        route = await bp.channel.route(item.session_id)
        if route is None:
            _log.warning("telegram.app.restored_without_chat session=%s", item.session_id)
            continue
        bp.presenter.restick(item.session_id, "goal", note=RESTART_NOTE)


class Handlers:
    """The update callbacks; each is ``async def verb(update, context) -> None``."""

    def __init__(self, bp: BotParts) -> None:
        self.bp = bp

    # ---- plumbing ----------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        async def guarded() -> None:
            try:
                await coro
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # worker boundary: log, the bot goes on
                _log.warning("telegram.app.render_failed %s: %s", type(exc).__name__, exc)

        task = asyncio.get_running_loop().create_task(guarded())
        self.bp.tasks.add(task)
        task.add_done_callback(self.bp.tasks.discard)

    async def _session(self, key: SessionKey) -> str:
        session_id = await self.bp.engine.session_for_chat(key[0], key[1])
        await self.bp.routes.remember(session_id, ChatRoute(key[0], key[1]))
        return session_id

    def _is_owner(self, update: Update) -> bool:
        d = self.bp.gate.decision(update)
        if d is not None:
            return d.owner
        user = update.effective_user
        msg = update.effective_message
        as_chat = isinstance(msg, Message) and msg.sender_chat is not None
        return self.bp.gate.is_owner(user.id if user else None) and not as_chat

    async def _decide(self, session_id: str, call: Awaitable[Outcome]) -> Outcome:
        """Await the engine's decision with the session's card refreshes held.

        The caller must hand the outcome to :meth:`_render` (or release) exactly once: that
        releases the hold after the reply is queued, so a card never overtakes the reply.
        """
        self.bp.presenter.hold(session_id)
        try:
            return await call
        except BaseException:
            self.bp.presenter.release(session_id)
            raise

    def _render(
        self,
        session_id: str,
        key: SessionKey,
        outcome: Outcome,
        *,
        reply_to: int | None,
        actor: int | None,
        actor_name: str | None = None,
        with_reply: bool = True,
    ) -> None:
        """Deliver an outcome: the reply (in order, before the cards), then the cards."""
        if outcome.await_feedback and actor is not None:
            self.bp.gate.expect_reply(key, actor)
        text = _reply_text(outcome) if with_reply else None
        if text is None:
            self._cards(session_id, outcome)
            self.bp.presenter.release(session_id)
            return

        html = text
        markup = None
        if outcome.await_feedback:
            # selective: only the owner's client opens the reply box. Telegram targets the
            # sender of the message replied to, or the users mentioned: a press has no
            # message of the owner's, so the owner is mentioned by name.
            markup = ForceReply(selective=True)
            if reply_to is None and actor is not None and key[0] < 0:
                html = f'<a href="tg://user?id={actor}">{escape(actor_name or "owner")}</a>, {text}'

        async def deliver() -> None:
            try:
                await self.bp.outbox.send_text(
                    key[0], html, thread_id=key[1] or None, reply_to=reply_to, reply_markup=markup
                )
            finally:
                self._cards(session_id, outcome)
                self.bp.presenter.release(session_id)

        self._spawn(deliver())

    def _cards(self, session_id: str, outcome: Outcome) -> None:
        p = self.bp.presenter
        if outcome.plan_card == "restick":
            p.restick(session_id, "plan", state=outcome.plan_card_state)
        elif outcome.plan_card == "refresh":
            p.refresh(session_id, "plan", state=outcome.plan_card_state)
        if outcome.goal_card == "restick":
            p.restick(session_id, "goal", state=outcome.goal_card_state)
        elif outcome.goal_card == "refresh":
            p.refresh(session_id, "goal", state=outcome.goal_card_state)

    # ---- group -2 ----------------------------------------------------------------------

    async def dedupe(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """Drop an update seen before (a repeat after a restart); remember the last one."""
        bp = self.bp
        await load_state(bp)
        if bp.last_update_id is not None and update.update_id <= bp.last_update_id:
            _log.info("telegram.app.repeat_dropped update=%s", update.update_id)
            raise ApplicationHandlerStop
        bp.last_update_id = update.update_id
        await bp.meta.set_meta(LAST_UPDATE_KEY, str(update.update_id))

    # ---- commands ----------------------------------------------------------------------

    def command(
        self, name: CommandName
    ) -> Callable[[Update, ContextTypes.DEFAULT_TYPE], Coroutine[Any, Any, None]]:
        """A CommandHandler callback for one engine command."""

        async def run(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
            await self._run_command(update, name)

        run.__doc__ = f"/{name}: run it in the command plane and render the outcome."
        return run

    async def _run_command(self, update: Update, name: CommandName) -> None:
        msg = update.effective_message
        user = update.effective_user
        if msg is None:
            return
        key = message_key(msg)
        session_id = await self._session(key)
        args = _command_args(msg.text or "")
        actor = user.id if user and self._is_owner(update) else None
        outcome = await self._decide(
            session_id, self.bp.engine.command(session_id, name, args, actor=actor)
        )
        self._render(session_id, key, outcome, reply_to=msg.message_id, actor=actor)

    async def show_plan(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """/show-plan, /show_plan, /show-plan@bot: restick the card (a copy for non-owners)."""
        msg = update.effective_message
        if msg is None or msg.text is None:
            return
        m = SHOW_PLAN_PATTERN.match(msg.text)
        target = m.group(1) if m else None
        if target and target.lower() != (context.bot.username or "").lower():
            return  # addressed to another bot
        if self._is_owner(update):
            await self._run_command(update, "show_plan")
            return
        key = message_key(msg)
        session_id = await self._session(key)
        outcome = await self._decide(
            session_id, self.bp.engine.command(session_id, "show_plan", "", actor=None)
        )
        if outcome.plan_card is not None:
            # A non-owner's copy: no buttons, and the live card stays where it is.
            self.bp.presenter.show_copy(session_id, ChatRoute(*key), reply_to=msg.message_id)
            self.bp.presenter.release(session_id)
            return
        self._render(session_id, key, outcome, reply_to=msg.message_id, actor=None)

    async def new(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """/new: end the key's session (its cards lose their buttons) and bind a fresh one."""
        msg = update.effective_message
        user = update.effective_user
        if msg is None or user is None:
            return
        key = message_key(msg)
        old = await self._session(key)
        outcome = await self.bp.engine.new_session(key[0], key[1], actor=user.id)
        self.bp.presenter.retire(old)
        self.bp.gate.cancel_expect(key)
        fresh = await self._session(key)
        self._render(fresh, key, outcome, reply_to=msg.message_id, actor=user.id)

    # ---- buttons -----------------------------------------------------------------------

    async def press(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """A plan or goal card button: decode, engine.press, answer, redraw."""
        query = update.callback_query
        key = update_key(update)
        if query is None:
            return
        data = cb.decode(query.data)
        if data is None or key is None:
            await self._stale(update)
            return
        session_id = await self._session(key)
        outcome = await self._decide(
            session_id,
            self.bp.engine.press(
                session_id,
                kind=data.kind,
                action=data.action,
                short_id=data.short_id,
                revision=data.revision,
                actor=query.from_user.id,
            ),
        )
        reply = _reply_text(outcome)
        toast = outcome.reply if outcome.reply and len(outcome.reply) <= MAX_TOAST else None
        as_message = reply is not None and (outcome.await_feedback or toast is None)
        await _answer(query, None if as_message else toast, alert=outcome.alert)
        if outcome.stale or (outcome.reply or "").startswith(STALE_TEXT):
            # Take the dead buttons away; if it was the live card, the redraw restores it.
            self._strip_pressed(query.message)
            self.bp.presenter.refresh(session_id, "plan")
            self.bp.presenter.refresh(session_id, "goal")
        self._render(
            session_id,
            key,
            outcome,
            reply_to=None,
            actor=query.from_user.id,
            actor_name=query.from_user.first_name,
            with_reply=as_message,
        )

    async def option(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """An ask_user option button: the option's text goes to the agent as the owner's."""
        query = update.callback_query
        if query is None or query.data is None:
            return
        found = self.bp.channel.answer(query.data)
        if found is None:
            await self._stale(update, text="This question is out of date.")
            return
        question, text = found
        await _answer(query, _clip(f"➡️ {text}", MAX_TOAST), alert=False)
        self.bp.outbox.edit_keyboard(question.chat_id, question.message_id, None)
        await self.bp.engine.user_message(
            question.session_id,
            text,
            actor=query.from_user.id,
            message_id=question.message_id,
        )

    async def unknown_press(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """Any other callback data (forged, or from an older bot): out of date."""
        await self._stale(update)

    async def _stale(self, update: Update, *, text: str = STALE_TEXT) -> None:
        query = update.callback_query
        if query is None:
            return
        await _answer(query, text, alert=False)
        self._strip_pressed(query.message)

    def _strip_pressed(self, message: object) -> None:
        if isinstance(message, Message):
            self.bp.outbox.edit_keyboard(message.chat.id, message.message_id, None)

    # ---- talking to the agent ------------------------------------------------------------

    async def text(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """A text message the gate let through: an owner's words go to the agent."""
        msg = update.effective_message
        user = update.effective_user
        if msg is None or user is None or not msg.text or not self._is_owner(update):
            return
        decision = self.bp.gate.decision(update)
        feedback = bool(decision and decision.feedback)
        key = message_key(msg)
        session_id = await self._session(key)
        text = _strip_mention(msg.text, context.bot.username or "")
        if not text:
            return
        await self.bp.engine.user_message(
            session_id, text, actor=user.id, message_id=msg.message_id, feedback=feedback
        )

    # ---- errors --------------------------------------------------------------------------

    async def error(self, update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
        """The one application error handler: log the error type, never the token."""
        err = context.error
        if err is None:
            return
        update_id = update.update_id if isinstance(update, Update) else None
        detail = "".join(traceback.format_exception(type(err), err, err.__traceback__))
        _log.error(
            "telegram.app.error update=%s type=%s\n%s",
            update_id,
            type(err).__name__,
            redact(detail, self.bp.token),
        )
        # The person who sent a command or a message hears that it failed (never the details).
        if not isinstance(update, Update) or update.callback_query is not None:
            return
        msg = update.effective_message
        if isinstance(msg, Message):
            with contextlib.suppress(Exception):
                await self.bp.outbox.send_text(
                    msg.chat.id,
                    f"⚠️ That failed ({escape(type(err).__name__)}); the log has the details.",
                    thread_id=message_key(msg)[1] or None,
                    reply_to=msg.message_id,
                )


def redact(text: str, token: str) -> str:
    """``text`` with the bot token (and its secret half) replaced."""
    if token:
        text = text.replace(token, "<token>")
        secret = token.split(":", 1)[-1]
        if len(secret) >= 8:
            text = text.replace(secret, "<token>")
    return text


async def _answer(query: Any, text: str | None, *, alert: bool) -> None:
    try:
        await query.answer(text, show_alert=alert)
    except TelegramError as err:
        # Too old or already answered: the press itself still counted.
        _log.info("telegram.app.answer_failed %s", type(err).__name__)


def _reply_text(outcome: Outcome) -> str | None:
    """The outcome's reply as HTML, with the messages /stop dropped listed under it."""
    parts_: list[str] = []
    if outcome.reply:
        parts_.append(escape(outcome.reply))
    # The engine may already list what /stop dropped in its reply: list only the rest.
    missing = [d for d in outcome.dropped if " ".join(d.split())[:40] not in (outcome.reply or "")]
    if missing:
        listed = "\n".join(f"• {escape(_clip(' '.join(d.split()), 200))}" for d in missing)
        parts_.append(f"Dropped {len(missing)} queued message(s):\n{listed}")
    text = "\n\n".join(parts_)
    return text[:4000] if text.strip() else None


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _command_args(text: str) -> str:
    """Everything after the command word, newlines kept (``/plan`` carries a request)."""
    parts_ = text.split(maxsplit=1)
    return parts_[1].strip() if len(parts_) > 1 else ""


def _strip_mention(text: str, username: str) -> str:
    if username:
        text = re.sub(rf"(?<![A-Za-z0-9_])@{re.escape(username)}\b", "", text, flags=re.I)
    return text.strip()


# ---- running -------------------------------------------------------------------------------


async def drain(application: Application[Any, Any, Any, Any, Any, Any]) -> None:
    """Wait until every rendering task and card draw has been delivered (bound the wait)."""
    bp = parts(application)
    while bp.tasks:
        await asyncio.gather(*list(bp.tasks), return_exceptions=True)
    await bp.presenter.flush()


def parse_listen(value: str | None) -> tuple[str, int]:
    """``PLANGATE_WEBHOOK_LISTEN`` ``host:port`` (default ``0.0.0.0:8443``)."""
    if not value:
        return "0.0.0.0", 8443
    host, _, port = value.rpartition(":")
    return host or "0.0.0.0", int(port)


async def serve(
    settings: BotSettings,
    engine: EngineApi,
    db: MetaStore,
    *,
    channel_slot: LateChannel | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Run the bot until SIGINT/SIGTERM (or ``stop``): polling, or a webhook when set.

    Starts the engine (``engine.start()``), announces the goals a restart paused, and shuts
    both down in order on the way out. Polling drops nothing: pending updates are processed,
    and repeats of already processed ones are dropped by update_id.
    """
    webhook_url = getattr(settings, "webhook_url", None)
    if webhook_url and importlib.util.find_spec("tornado") is None:
        raise ConfigError(
            "PLANGATE_WEBHOOK_URL is set but the webhook server is not installed: "
            "pip install 'plangate[webhooks]' (or unset it to use polling)"
        )
    application = build_application(settings, engine, db_meta=db, channel_slot=channel_slot)
    bp = parts(application)
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    async with application:
        await prepare(application)
        restored = await engine.start()
        updater = application.updater
        assert updater is not None
        if webhook_url:
            host, port = parse_listen(getattr(settings, "webhook_listen", None))
            await updater.start_webhook(
                listen=host,
                port=port,
                url_path=urlsplit(webhook_url).path.lstrip("/"),
                webhook_url=webhook_url,
                secret_token=secret_value(getattr(settings, "webhook_secret", None)) or None,
                allowed_updates=list(ALLOWED_UPDATES),
                drop_pending_updates=False,
            )
        else:
            await updater.start_polling(
                allowed_updates=list(ALLOWED_UPDATES), drop_pending_updates=False
            )
        await application.start()
        await announce_restored(application, restored)
        _log.info("telegram.app.running mode=%s", "webhook" if webhook_url else "polling")
        try:
            await stop.wait()
        finally:
            # No new updates; then the engine closes its turns while the chat can still be
            # told; then what is queued for the chat goes out (bounded); then close.
            await updater.stop()
            try:
                await engine.shutdown()
            finally:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(drain(application), SHUTDOWN_FLUSH_S)
                await application.stop()
                await bp.presenter.aclose()
                await bp.outbox.aclose()
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.remove_signal_handler(sig)


__all__ = [
    "ALLOWED_UPDATES",
    "MENU",
    "BotParts",
    "BotSettings",
    "Handlers",
    "announce_restored",
    "build_application",
    "drain",
    "parts",
    "prepare",
    "redact",
    "serve",
]
