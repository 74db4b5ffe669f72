"""The Telegram application: every handler registered in one function, and ``serve``.

Handler map (groups run in order; a group's first matching handler runs)::

    group -2  TypeHandler(Update)        drop repeats: update ids already processed (ledger)
    group -1  AccessGate (bot.telegram.access)     who may do what; leaves groups; refusals, alerts;
                                         a group upgraded to a supergroup moves over
    group  0  CommandHandler plan execute discard goal stop new project status usage help
              start(=help)
              CommandHandler team        the chat's roles (engine.team)
              MessageHandler /show-plan, /show_plan, /show-plan@bot (one regex)
              CallbackQueryHandler ^[pga]: plan, goal and tool approval buttons -> engine.press
              CallbackQueryHandler ^q:     ask_user option buttons -> the owner's message
              MessageHandler text          to the agent (engine.user_message)
              CallbackQueryHandler ^v:     a voice transcript's Send / Discard (bot.telegram.voice)
              MessageHandler document, photo   fetched into the session inbox
                                         (bot.telegram.uploads),
                                         then the caption and the path to the agent;
                             voice, audio      transcribed, offered back with Send / Discard
    errors    one handler: logs the error type, token redacted

Updates run in lanes (bot.telegram.updates.ChatLaneProcessor): different chats and forum topics
concurrently, one session's updates strictly in arrival order. Handlers are thin: parse ->
call the engine -> render the Outcome. They never await an agent turn, and the rendering
(replies, cards) runs in background tasks through the outbox, so a 429 in one chat never
holds up the updates of another.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.util
import json
import logging
import secrets
import signal
import time
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

from telegram import BotCommand, Update
from telegram.error import BadRequest, TelegramError
from telegram.ext import (
    AIORateLimiter,
    Application,
    BaseRateLimiter,
    CallbackQueryHandler,
    CommandHandler,
    MessageHandler,
    TypeHandler,
    Updater,
    filters,
)

from bot.telegram.access import AccessGate
from bot.telegram.channel import QUESTION_PATTERN, REPLY_DOCUMENT_CHARS, TelegramChannel
from bot.telegram.handlers import (
    SHOW_PLAN_PATTERN,
    BotParts,
    Handlers,
    load_state,
    parts,
    redact,
    stored_groups,
)
from bot.telegram.keys import chat_key, message_key, person_key, session_key
from bot.telegram.outbox import Outbox, Sleep
from bot.telegram.people import SeenPeople
from bot.telegram.presenter import CardPresenter
from bot.telegram.render import escape
from bot.telegram.routes import GROUPS_KEY, ChatRoute, MetaStore, Routes
from bot.telegram.shared_rate import SharedRateLimiter
from bot.telegram.updates import ChatLaneProcessor, UpdateLedger
from bot.telegram.uploads import InputSettings
from bot.telegram.voice import VOICE_PATTERN
from engine.api import CommandName, EngineApi, RestoredGoal
from engine.errors import ConfigError
from engine.keys import ChatKey
from engine.model.transcribe import Transcriber
from engine.tasks import BackgroundTasks

if TYPE_CHECKING:
    # asyncpg is the postgres extra: the replicas' parts are imported when they are used.
    from bot.owners import ChatOwners
    from bot.telegram.ingress import InboxIngress, Replicas
    from storage.postgres.inbox import InboxUpdate

_log = logging.getLogger("plangate.app")

RESTART_NOTE = "⏸ Paused by the restart. Press ▶️ Resume to go on."
ALLOWED_UPDATES: tuple[str, ...] = ("message", "callback_query", "my_chat_member")
SHUTDOWN_FLUSH_S = 10.0
MAX_RUNNING_UPDATES = 64  # updates whose handlers run at once (across chats)

# The menu: Telegram allows only a-z, 0-9 and _ in command names (so show_plan).
MENU: tuple[tuple[str, str], ...] = (
    ("plan", "Start planning, or revise the plan"),
    ("show_plan", "Show the plan card at the bottom"),
    ("execute", "Approve the plan, or continue it"),
    ("discard", "Discard the plan"),
    ("goal", "Set or steer the goal: pause, resume, clear, rounds N, every 30m"),
    ("stop", "Stop the running turn"),
    ("new", "Start a fresh session"),
    ("project", "Show or switch this chat's project"),
    ("status", "What the agent is doing"),
    ("setup", "Run the project's .plangate/setup.sh (asks first)"),
    ("usage", "Tokens and cost: today, this session, the goal"),
    ("team", "Who may do what here: owners, approvers, members"),
    ("whoami", "Your id and your role here"),
    ("help", "How to use plangate"),
)
# CommandHandler names -> engine command names.
COMMANDS: tuple[tuple[str, CommandName], ...] = (
    ("plan", "plan"),
    ("execute", "execute"),
    ("discard", "discard"),
    ("goal", "goal"),
    ("stop", "stop"),
    ("status", "status"),
    ("usage", "usage"),
    ("setup", "setup"),
    ("help", "help"),
)


class BotSettings(Protocol):
    """The settings the Telegram front end reads (``bot.settings.Settings``; read-only here).

    Also read when present: ``telegram_token`` (str or ``SecretStr``), ``model`` (its name).
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


async def save_group(meta: MetaStore, lock: asyncio.Lock, chat_id: int, added: bool) -> None:
    """Persist that an owner added the bot to the group ``chat_id`` (``added``) or that it is
    gone. The stored list is changed for this one group only: other replicas write it too
    (each for the groups it owns), and a whole-set write would undo what they added since this
    process read it."""
    _log.info("plangate.app.groups_changed chat=%s", chat_id)
    async with lock:  # chats run side by side: one read-change-write at a time
        stored = await stored_groups(meta)
        if added:
            stored.add(chat_id)
        else:
            stored.discard(chat_id)
        await meta.set_meta(GROUPS_KEY, json.dumps(sorted(stored)))


def default_limiter(*, inbox: bool) -> BaseRateLimiter[Any]:
    """AIORateLimiter; among replicas (``inbox``) the shared one: Telegram's overall limit is
    the bot's, whichever replica sends (bot.telegram.shared_rate)."""
    return SharedRateLimiter() if inbox else AIORateLimiter()


def build_application(
    settings: BotSettings,
    engine: EngineApi,
    *,
    db_meta: MetaStore,
    rate_limiter: BaseRateLimiter[Any] | None = None,
    chat_interval_s: float = 1.0,
    group_per_minute: int = 20,
    clock: Callable[[], float] = time.monotonic,
    sleep: Sleep = asyncio.sleep,
    transcriber: Transcriber | None = None,
    inbox: bool = False,
) -> Application[Any, Any, Any, Any, Any, Any]:
    """Build the PTB application with every handler registered (see the module docstring).

    Built in one pass, each part given what it uses: the outbox, the card presenter (it
    subscribes to the outbox's failed deliveries), the channel (``parts(app).channel``: the
    composition delivers the engine's words to it, bot.channels), the access gate (it
    subscribes to the groups the outbox finds moved). ``clock`` and ``sleep`` pace the outbox
    and the cards (tests pass a manual clock). ``transcriber``: speech to text for voice
    notes (None: voice gets one line saying how to set it up). The caller still runs the
    application (``serve`` does it all). ``inbox``: this process is one replica of several
    (:func:`replica_mode`): the shared inbox drops repeated updates, not the ledger.
    """
    token = secret_value(getattr(settings, "telegram_token", None))
    api_url = settings.telegram_api_url or "https://api.telegram.org/bot"
    # Chats run concurrently, each session's updates in order (bot.telegram.updates): a slow
    # /stop in one chat no longer holds up the others. The ledger tells the dedupe what is
    # processed.
    ledger = UpdateLedger()
    application = (
        Application.builder()
        .token(token)
        .base_url(api_url)
        .base_file_url(file_url(api_url))
        .rate_limiter(rate_limiter if rate_limiter is not None else default_limiter(inbox=inbox))
        .job_queue(None)  # the engine owns the one scheduler (docs/architecture.md)
        .concurrent_updates(ChatLaneProcessor(max_running=MAX_RUNNING_UPDATES, ledger=ledger))
        .build()
    )
    outbox = Outbox(
        application.bot,
        clock=clock,
        sleep=sleep,
        chat_interval_s=chat_interval_s,
        group_per_minute=group_per_minute,
    )
    routes = Routes(db_meta)
    presenter = CardPresenter(
        engine,
        outbox,
        routes,
        db_meta,
        edit_interval_s=float(getattr(settings, "flow_edit_interval", 1.5)),
        group_edit_interval_s=getattr(settings, "flow_group_edit_interval", None),
        bot=application.bot,
        pin=getattr(settings, "pin_cards", "auto"),
        clock=clock,
        sleep=sleep,
    )
    channel = TelegramChannel(
        outbox,
        presenter,
        document_chars=int(getattr(settings, "reply_document_chars", REPLY_DOCUMENT_CHARS)),
        bot=application.bot,
        clock=clock,
        sleep=sleep,
    )

    # Rendering and delivery that no handler waits for (bp.tasks; drain() awaits them).
    background = BackgroundTasks(_log)

    async def refuse(update: Update, text: str) -> None:
        # Sent in the background: a paced send (a full group window) must not hold the chat's
        # lane, where the owner's next command waits.
        msg = update.message
        if msg is None:
            return

        async def send() -> None:
            await outbox.send_text(
                msg.chat.id,
                escape(text),
                thread_id=message_key(msg)[1] or None,
                reply_to=msg.message_id,
                priority="low",
            )

        # Any failure (Dropped included) is fine: a refusal is expendable.
        background.spawn(send(), name=f"refusal:{msg.chat.id}", expected=(Exception,))

    people = SeenPeople()
    groups_lock = asyncio.Lock()

    async def migrate(old: int, new: int) -> None:
        # The group's sessions, routes, cards and team move to the supergroup's id.
        people.move(old, new)
        for session_id in await engine.migrate_chat(chat_key(old), chat_key(new)):
            route = await routes.lookup(session_id)
            await routes.remember(session_id, ChatRoute(new, route.thread_id if route else 0))
            presenter.refresh(session_id, "plan")
            presenter.refresh(session_id, "goal")

    gate = AccessGate(
        owner_ids=settings.owner_ids,
        allowed_chat_ids=settings.allowed_chat_ids or (),
        refuse=refuse,
        save_groups=functools.partial(save_group, db_meta, groups_lock),
        outbox=outbox,
        on_migrate=migrate,
        roles=lambda chat_id, user_id: engine.role_of(chat_key(chat_id), person_key(user_id)),
        on_seen=people.saw,
        questions=channel.asked,
    )
    bp = BotParts(
        engine,
        db_meta,
        outbox,
        routes,
        presenter,
        channel,
        gate,
        token,
        ledger=ledger,
        tasks=background,
        people=people,
        inputs=InputSettings(
            max_upload_mb=float(getattr(settings, "max_upload_mb", 20.0)),
            max_image_px=int(getattr(settings, "max_image_px", 2048)),
        ),
        transcriber=transcriber,
        model_name=str(getattr(settings, "model", "") or ""),
        # Among replicas the inbox drops repeats (by update_id, across replicas); a process's
        # own ledger would judge other replicas' ids.
        inbox=inbox,
    )
    application.bot_data["plangate"] = bp
    h = Handlers(bp)

    application.add_handler(TypeHandler(Update, h.dedupe), group=-2)
    application.add_handler(gate.handler(), group=-1)
    for command, name in COMMANDS:
        application.add_handler(CommandHandler(command, h.command(name)))
    application.add_handler(CommandHandler("new", h.new))
    application.add_handler(CommandHandler("team", h.team))
    application.add_handler(CommandHandler("project", h.project))
    application.add_handler(CommandHandler("start", h.start))
    application.add_handler(CommandHandler("whoami", h.whoami))
    application.add_handler(
        MessageHandler(filters.Regex(SHOW_PLAN_PATTERN) & filters.TEXT, h.show_plan)
    )
    application.add_handler(CallbackQueryHandler(h.press, pattern=r"^[pga]:"))
    application.add_handler(CallbackQueryHandler(h.option, pattern=QUESTION_PATTERN))
    application.add_handler(CallbackQueryHandler(h.voice_press, pattern=VOICE_PATTERN))
    application.add_handler(CallbackQueryHandler(h.unknown_press))
    application.add_handler(MessageHandler(filters.TEXT & ~filters.COMMAND, h.text))
    application.add_handler(
        MessageHandler(
            filters.Document.ALL | filters.PHOTO | filters.VOICE | filters.AUDIO, h.upload
        )
    )
    # Last: a command no handler above took (the gate let it through only when addressed).
    application.add_handler(MessageHandler(filters.COMMAND, h.unknown_command))
    application.add_error_handler(h.error)
    return application


async def prepare(application: Application[Any, Any, Any, Any, Any, Any]) -> None:
    """After ``initialize()``: load the bot's state and register the command menu."""
    bp = parts(application)
    await load_state(bp)
    try:
        await application.bot.set_my_commands([BotCommand(c, d) for c, d in MENU])
    except TelegramError as err:
        _log.warning("plangate.app.set_my_commands_failed %s", type(err).__name__)


async def announce_restored(
    application: Application[Any, Any, Any, Any, Any, Any], restored: Sequence[RestoredGoal]
) -> None:
    """Each goal that came up disarmed gets its goal card anew, with Resume and a note."""
    bp = parts(application)
    for item in restored:
        route = await bp.channel.route(item.session_id)
        if route is None:
            _log.warning("plangate.app.restored_without_chat session=%s", item.session_id)
            continue
        bp.presenter.restick(item.session_id, "goal", note=RESTART_NOTE)


async def drain(application: Application[Any, Any, Any, Any, Any, Any]) -> None:
    """Wait until every update held is processed, then every rendering task and card draw
    delivered (bound the wait)."""
    bp = parts(application)
    processor = application.update_processor
    if isinstance(processor, ChatLaneProcessor):
        await processor.idle()  # its last watermark write joins bp.tasks
    await bp.tasks.drain()
    await bp.presenter.flush()


def parse_listen(value: str | None) -> tuple[str, int]:
    """``PLANGATE_WEBHOOK_LISTEN`` ``host:port`` (default ``0.0.0.0:8443``) -> (host, port).

    An IPv6 host comes bracketed (``[::]:8443``) and is returned bare (``::``), the form a
    socket binds; a malformed value raises :class:`ConfigError` naming the variable.
    """
    if not value:
        return "0.0.0.0", 8443
    host, _, port = value.strip().rpartition(":")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(
            f"PLANGATE_WEBHOOK_LISTEN: expected host:port, e.g. 0.0.0.0:8443, got {value!r}"
        )
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host or "0.0.0.0", int(port)


async def start_webhook(updater: Updater, settings: BotSettings, webhook_url: str) -> None:
    """Listen on ``PLANGATE_WEBHOOK_LISTEN`` and register ``webhook_url`` with Telegram.

    The secret is ``PLANGATE_WEBHOOK_SECRET``, or a random one for this run when unset: the
    server refuses (403) any POST without it, so nobody who merely learns the URL can
    forge an owner's update. Telegram refusing the URL, or the address being taken, is a
    :class:`ConfigError` naming the variable.
    """
    host, port = parse_listen(getattr(settings, "webhook_listen", None))
    secret = secret_value(getattr(settings, "webhook_secret", None))
    if not secret:
        # setWebhook runs on every start, so a per-run secret always matches Telegram's.
        secret = secrets.token_urlsafe(32)
        _log.info("plangate.app.webhook_secret generated (PLANGATE_WEBHOOK_SECRET unset)")
    try:
        await updater.start_webhook(
            listen=host,
            port=port,
            url_path=urlsplit(webhook_url).path.lstrip("/"),
            webhook_url=webhook_url,
            secret_token=secret,
            allowed_updates=list(ALLOWED_UPDATES),
            drop_pending_updates=False,
            # One connection: Telegram then delivers in order, as the chat lanes expect.
            max_connections=1,
        )
    except BadRequest as err:
        raise ConfigError(
            f"PLANGATE_WEBHOOK_URL: Telegram refused the webhook ({err.message})"
        ) from None
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise ConfigError(
            f"PLANGATE_WEBHOOK_LISTEN: cannot listen on {host}:{port} ({reason})"
        ) from None


async def register_webhook(bot: Any, webhook_url: str, secret: str) -> None:
    """``setWebhook`` as :func:`start_webhook` registers it (the replicas' ingress registers
    the same URL and secret from every replica: the last one's call changes nothing)."""
    try:
        await bot.set_webhook(
            url=webhook_url,
            secret_token=secret,
            allowed_updates=list(ALLOWED_UPDATES),
            drop_pending_updates=False,
            # One connection: Telegram delivers in update_id order, the order owners process.
            max_connections=1,
        )
    except BadRequest as err:
        raise ConfigError(
            f"PLANGATE_WEBHOOK_URL: Telegram refused the webhook ({err.message})"
        ) from None


async def start_replica(
    application: Application[Any, Any, Any, Any, Any, Any],
    settings: BotSettings,
    engine: EngineApi,
    db: MetaStore,
    replicas: Replicas,
    webhook_url: str,
) -> tuple[InboxIngress, ChatOwners]:
    """Webhook mode among several replicas: the ingress that stores every update, and the
    owner loop that processes the chats this replica holds (docs/webhook.md)."""
    from bot.owners import ChatOwners
    from bot.telegram.ingress import SOURCE, InboxIngress, parse_update, shared_secret

    secret = await shared_secret(db, secret_value(getattr(settings, "webhook_secret", None)))
    ingress = InboxIngress(
        replicas.inbox, application.bot, secret=secret, path=urlsplit(webhook_url).path
    )

    async def process(item: InboxUpdate) -> None:
        await application.process_update(parse_update(item, application.bot))

    # Each round tells the shared limiter how many replicas now send.
    limiter = getattr(application.bot, "rate_limiter", None)

    async def taken(chat: ChatKey) -> None:
        # Groups owners added while another replica held them are in the database, not in
        # this process's gate: read them again, or the gate would leave such a group.
        bp = parts(application)
        bp.gate.added_groups.update(await stored_groups(bp.meta))
        # The chat's runs come back paused, as after a restart, before its updates run.
        await announce_restored(application, await engine.chat_taken(chat))

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
        owns=lambda chat: session_key(chat) is not None,
        on_share=limiter.share if isinstance(limiter, SharedRateLimiter) else None,
    )
    host, port = parse_listen(getattr(settings, "webhook_listen", None))
    await ingress.start(host, port)
    try:
        await register_webhook(application.bot, webhook_url, secret)
    except BaseException:
        await ingress.stop()
        raise
    return ingress, owners


async def serve(
    settings: BotSettings,
    engine: EngineApi,
    db: MetaStore,
    *,
    stop: asyncio.Event | None = None,
    transcriber: Transcriber | None = None,
    replicas: Replicas | None = None,
) -> None:
    """Build the application (:func:`build_application`) and serve it
    (:func:`serve_application`), the engine started and shut down with it."""
    require_webhook_server(settings)
    application = build_application(
        settings,
        engine,
        db_meta=db,
        transcriber=transcriber,
        inbox=replica_mode(settings, replicas),
    )
    await serve_application(application, settings, engine, stop=stop, replicas=replicas)


def require_webhook_server(settings: BotSettings) -> None:
    """A webhook URL without the webhook server installed: one line saying what to install."""
    webhook_url = getattr(settings, "webhook_url", None)
    if webhook_url and importlib.util.find_spec("tornado") is None:
        raise ConfigError(
            "PLANGATE_WEBHOOK_URL is set but the webhook server is not installed: "
            "pip install 'plangate[webhooks]' (or unset it to use polling)"
        )


def replica_mode(settings: BotSettings, replicas: Replicas | None) -> bool:
    """Whether this process is one replica of several: a webhook, and the replicas' shared
    inbox and leases (``replicas``, PostgreSQL)."""
    return bool(getattr(settings, "webhook_url", None)) and replicas is not None


async def serve_application(
    application: Application[Any, Any, Any, Any, Any, Any],
    settings: BotSettings,
    engine: EngineApi,
    *,
    stop: asyncio.Event | None = None,
    owns_engine: bool = True,
    replicas: Replicas | None = None,
) -> None:
    """Run the bot until SIGINT/SIGTERM (or ``stop``): polling, or a webhook when set.

    ``owns_engine``: start the engine (``engine.start()``), announce the goals a restart
    paused, and shut the engine down in order on the way out, also when the updates fail to
    start (a refused webhook, a taken port: :class:`ConfigError`); otherwise another front
    end does that and this one only serves. Neither mode drops anything: pending updates are
    processed, and repeats of already processed ones are dropped by update_id. The webhook
    stays registered on the way out, so Telegram keeps the updates that arrive while the bot
    is down and delivers them after the next start.

    ``replicas`` (PostgreSQL): with a webhook, this process is one replica of several; every
    update goes through the shared inbox and only the chats whose lease it holds are processed
    here (:func:`start_replica`). The application is built for it (``inbox``).
    """
    require_webhook_server(settings)
    webhook_url = getattr(settings, "webhook_url", None)
    bp = parts(application)
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        async with application:
            await prepare(application)
            # A replica among several recovers each chat when it takes the chat's lease.
            recover = not replica_mode(settings, replicas)
            restored = await engine.start(recover=recover) if owns_engine else []
            updater = application.updater
            assert updater is not None
            ingress: InboxIngress | None = None
            owners: ChatOwners | None = None
            owners_stop = asyncio.Event()
            owners_task: asyncio.Future[None] | None = None
            try:
                if replica_mode(settings, replicas):
                    assert replicas is not None and webhook_url
                    ingress, owners = await start_replica(
                        application, settings, engine, bp.meta, replicas, webhook_url
                    )
                elif webhook_url:
                    await start_webhook(updater, settings, webhook_url)
                else:
                    await updater.start_polling(
                        allowed_updates=list(ALLOWED_UPDATES), drop_pending_updates=False
                    )
                await application.start()
                if owners is not None:
                    # Updates are processed once the application runs (its bot, its tasks).
                    owners_task = asyncio.ensure_future(owners.run(owners_stop))
                if not replica_mode(settings, replicas):
                    # Among replicas a chat's paused goals are announced by whichever replica
                    # takes the chat (``chat_taken``), never by one that merely started.
                    await announce_restored(application, restored)
                _log.info("plangate.app.running mode=%s", "webhook" if webhook_url else "polling")
                await stop.wait()
            finally:
                # No new updates; then the engine closes its turns while the chat can still
                # be told; then what is queued for the chat goes out (bounded); then close.
                # Each step checks what actually started: a start can fail half-way.
                if updater.running:
                    await updater.stop()
                if ingress is not None:
                    await ingress.stop()
                keeper: asyncio.Future[None] | None = None
                if owners is not None and owners_task is not None:
                    # No new chats or updates; the ones being processed finish. The leases
                    # stay held (renewed) while the engine shuts down: it still writes.
                    owners_stop.set()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(asyncio.shield(owners_task), SHUTDOWN_FLUSH_S)
                    owners_task.cancel()
                    keeper = asyncio.ensure_future(owners.keep())
                # Updates already fetched (or waiting in their chat's lane) are handled while
                # the engine still runs; after engine.shutdown nothing may start a turn.
                processor = application.update_processor
                if isinstance(processor, ChatLaneProcessor):
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(processor.idle(), SHUTDOWN_FLUSH_S)
                try:
                    if owns_engine:
                        await engine.shutdown()
                finally:
                    if owners is not None:
                        if keeper is not None:
                            keeper.cancel()
                        await owners.close()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(drain(application), SHUTDOWN_FLUSH_S)
                    if application.running:
                        await application.stop()
                    await bp.presenter.aclose()
                    await bp.outbox.aclose()
    finally:
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
    "parse_listen",
    "parts",
    "prepare",
    "redact",
    "register_webhook",
    "replica_mode",
    "save_group",
    "serve",
    "serve_application",
    "start_replica",
    "start_webhook",
]
