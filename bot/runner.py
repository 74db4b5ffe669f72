"""``plangate run``: the composition root of the Telegram bot.

Settings -> storage -> model -> engine -> the PTB application; the only module that knows
engine, storage and bot together (with the demo and the doctor).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib.util
import itertools
import logging
import os
import signal
import socket
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from telegram import Bot
from telegram.error import InvalidToken, NetworkError

from bot.channels import SplitChannel, lives_in
from bot.compose import Plangate, open_plangate
from bot.health import heartbeat, heartbeat_name
from bot.settings import (
    Settings,
    config_path,
    load_run_settings,
    require_run_settings,
    settings_warnings,
)
from bot.slack import keys
from bot.telegram.app import file_url, redact, serve
from bot.telegram.channel import LateChannel
from bot.telegram.keys import person_key
from engine.app import EngineConfig
from engine.errors import ConfigError
from engine.model.openai_provider import OpenAIProvider
from engine.model.transcribe import OpenAITranscriber
from engine.ports import Channel
from engine.progress.stuck import StuckLimits
from engine.tools.host import install_refusal, protected_folders
from engine.tools.sandbox import SandboxSettings, probe
from engine.usage.meter import UsageConfig
from engine.worktree.git import secret_refusal

if TYPE_CHECKING:
    from bot.telegram.ingress import Replicas

_log = logging.getLogger("plangate.runner")


class RedactingFilter(logging.Filter):
    """Removes the bot token and the model key from every log record."""

    def __init__(self, secrets: list[str]) -> None:
        super().__init__()
        self._secrets = [s for s in secrets if s]

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        for secret in self._secrets:
            message = redact(message, secret)
        record.msg, record.args = message, None
        return True


class NetworkErrorsInOneLine(logging.Filter):
    """A Telegram network error (unreachable, timed out) is one log line, not a traceback: it is
    weather, not a bug, and PTB logs one per failed poll. ``--debug`` keeps the traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, NetworkError):
            record.msg = f"{record.getMessage()} ({type(error).__name__}: {error.message})"
            record.args, record.exc_info, record.exc_text = None, None, None
        return True


def configure_logging(settings: Settings) -> None:
    """Logs to stderr at ``PLANGATE_LOG_LEVEL`` with every secret redacted."""
    secrets = [
        s.get_secret_value()
        for s in (
            settings.telegram_token,
            settings.model_api_key,
            settings.webhook_secret,
            settings.database_url,
            settings.slack_bot_token,
            settings.slack_app_token,
            settings.slack_signing_secret,
        )
        if s is not None
    ]
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    handler.addFilter(RedactingFilter(secrets))
    if settings.log_level != "DEBUG":
        handler.addFilter(NetworkErrorsInOneLine())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(settings.log_level)
    # httpx logs every request URL, and a Bot API URL contains the token.
    logging.getLogger("httpx").setLevel(logging.WARNING)


def model_from_settings(settings: Settings) -> OpenAIProvider:
    """The OpenAI-compatible provider the settings describe; ConfigError when it has no key."""
    key = settings.model_api_key.get_secret_value() if settings.model_api_key else None
    return OpenAIProvider(settings.model, base_url=settings.model_base_url, api_key=key)


def transcriber_from_settings(settings: Settings) -> OpenAITranscriber | None:
    """Speech to text for voice notes, on the model's server and key unless
    ``PLANGATE_TRANSCRIBE_BASE_URL`` names another; None when ``PLANGATE_TRANSCRIBE_MODEL`` is
    ``off`` or there is nowhere to send it (no key for OpenAI itself)."""
    if settings.transcribe_model.lower() == "off":
        return None
    key = settings.model_api_key.get_secret_value() if settings.model_api_key else None
    base_url = settings.transcribe_base_url or settings.model_base_url
    if base_url is None and not key:
        return None
    return OpenAITranscriber(settings.transcribe_model, base_url=base_url, api_key=key)


def sandbox_settings(settings: Settings) -> SandboxSettings:
    """The sandbox as the settings describe it; the home, the .env file and the secret files
    stay hidden from every tool (absolute secret files as named, relative ones in every
    workspace)."""
    hidden = [settings.home]
    env_file = Path(".env").absolute()
    if env_file.is_file():
        hidden.append(env_file)
    hidden += [Path(name) for name in settings.secret_files if Path(name).is_absolute()]
    return SandboxSettings(
        enabled=settings.sandbox == "on",
        network=settings.bash_network,
        memory_mb=settings.bash_memory_mb,
        max_processes=settings.bash_max_processes,
        env_pass=settings.bash_env,
        hidden=tuple(hidden),
        hidden_names=tuple(n for n in settings.secret_files if not Path(n).is_absolute()),
        tool_dirs=settings.sandbox_tool_dirs,
    )


def sandbox_warning(sandbox: SandboxSettings) -> str | None:
    """The start-up warning about bash's confinement, ``None`` when it is whole."""
    if not sandbox.enabled:
        return (
            "PLANGATE_SANDBOX=off: bash runs unconfined as this user, with the network, "
            "and pre-init plan mode cannot keep it from changing the project"
        )
    status = probe(sandbox)
    if status.problem is not None:
        return f"{status.problem} (every bash call is refused until then)"
    return "; ".join(status.notes) or None


# The engine's settings whose PLANGATE_* name differs from the engine's field, or that the
# engine takes in another shape; every other field of EngineConfig that a setting of the same
# name exists for is copied as it is (SHARED_FIELDS).
_DERIVED = frozenset(
    {
        "max_goal_rounds",
        "stuck",
        "sandbox",
        "usage",
        "bash_approval",
        "approval_timeout_s",
        "setup_timeout_s",
        "owner_ids",
        "vision",
        "worktree_root",
    }
)
SHARED_FIELDS: tuple[str, ...] = tuple(
    f.name
    for f in dataclasses.fields(EngineConfig)
    if f.name in Settings.model_fields and f.name not in _DERIVED
)


def install_problems(settings: Settings) -> list[str]:
    """One line for each folder the agent would work in that holds plangate's own files (its
    interpreter, venv, installed package or home) or a secret file in its git history:
    ``run`` and ``doctor`` refuse those."""
    protected = protected_folders(settings.home)
    found = [install_refusal("PLANGATE_WORKSPACE:", settings.workspace, protected)]
    found += [
        install_refusal(f"PLANGATE_PROJECTS {name}:", path, protected)
        for name, path in settings.projects
    ]
    # A PLANGATE_SECRET_FILES path tracked anywhere in a repository's history is readable
    # through git show, git log -p or the pack files, whatever the sandbox masks.
    found.append(secret_refusal("PLANGATE_WORKSPACE:", settings.workspace, settings.secret_files))
    found += [
        secret_refusal(f"PLANGATE_PROJECTS {name}:", path, settings.secret_files)
        for name, path in settings.projects
    ]
    return [line for line in found if line is not None]


def slack_owner_keys(settings: Settings) -> frozenset[str]:
    """Slack's owners as the engine's person keys (bot.slack.keys)."""
    return frozenset(keys.person_key(user) for user in settings.slack_owner_ids)


def require_slack_extra(settings: Settings) -> None:
    """A Slack token without the slack extra installed: one line saying what to install."""
    if settings.slack_bot_token is None:
        return
    if (
        importlib.util.find_spec("slack_bolt") is None
        or importlib.util.find_spec("aiohttp") is None
    ):
        raise ConfigError(
            "PLANGATE_SLACK_BOT_TOKEN is set but Slack support is not installed: "
            "pip install 'plangate[slack]' (or unset it)"
        )


def slack_listen(value: str | None) -> tuple[str, int] | None:
    """``PLANGATE_SLACK_LISTEN`` ``host:port`` -> (host, port); None: Socket Mode."""
    if not value:
        return None
    host, _, port = value.strip().rpartition(":")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(
            f"PLANGATE_SLACK_LISTEN: expected host:port, e.g. 0.0.0.0:3000, got {value!r}"
        )
    return host.strip("[]") or "0.0.0.0", int(port)


def engine_config(settings: Settings) -> EngineConfig:
    """The engine's configuration from the settings: the fields named alike as they are
    (:data:`SHARED_FIELDS`), the others in the engine's shape."""
    return EngineConfig(
        **{name: getattr(settings, name) for name in SHARED_FIELDS},
        max_goal_rounds=settings.goal_max_rounds,
        stuck=StuckLimits(
            repeats=settings.stuck_repeats,
            errors=settings.stuck_errors,
            monologue=settings.stuck_monologue,
            progress_steps=settings.progress_steps,
            progress_s=settings.progress_minutes * 60,
            task_tokens=settings.task_tokens,
        ),
        sandbox=sandbox_settings(settings),
        usage=UsageConfig(
            daily_tokens=settings.daily_tokens,
            price_input=settings.price_input,
            price_output=settings.price_output,
            footer=settings.usage_footer,
            max_output_tokens=settings.max_output_tokens,
        ),
        setup_timeout_s=settings.setup_timeout,
        bash_approval=settings.bash_approval_mode,
        approval_timeout_s=settings.approval_timeout,
        owner_ids=frozenset(person_key(u) for u in settings.owner_ids) | slack_owner_keys(settings),
        vision=settings.model_vision,
        worktree_root=settings.home / "worktrees",
    )


def replica_name(settings: Settings) -> str:
    """This process's name among replicas: ``PLANGATE_REPLICA_ID``, or host name and pid
    (unique while it lives, and a restarted process is a new replica)."""
    return settings.replica_id or f"{socket.gethostname()}-{os.getpid()}"


def replicated(settings: Settings) -> bool:
    """Whether this process is one replica of several (docs/webhook.md, "Several replicas"):
    PostgreSQL, and every front end it serves reaches it over HTTP, where any replica may
    receive a request (Telegram by webhook, Slack by the Events API on
    ``PLANGATE_SLACK_LISTEN``). Otherwise it owns every chat itself."""
    if settings.database_url is None:
        return False
    served = []
    if settings.telegram_token is not None:
        served.append(settings.webhook_url is not None)
    if settings.slack_bot_token is not None:
        served.append(settings.slack_listen is not None)
    return bool(served) and all(served)


def replica_parts(settings: Settings, opened: Plangate, replica: str) -> Replicas:
    """The shared inbox and leases of the opened PostgreSQL store, for ``serve``."""
    from bot.telegram.ingress import Replicas
    from storage.postgres.db import PgDatabase
    from storage.postgres.inbox import PgUpdateInbox

    db = opened.storage.db
    assert isinstance(db, PgDatabase)
    return Replicas(
        inbox=PgUpdateInbox(db, fenced=True),
        leases=opened.storage.leases,
        replica=replica,
        ttl_s=settings.lease_ttl,
    )


RETRY_FIRST_S = 2.0
RETRY_MAX_S = 60.0


async def wait_for_telegram(
    settings: Settings, *, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
) -> None:
    """``getMe`` until the Telegram server answers, backing off from 2 s to a minute and logging
    one line per failed attempt; a refused token stops at once (ConfigError)."""
    assert settings.telegram_token is not None
    bot = Bot(
        settings.telegram_token.get_secret_value(),
        base_url=settings.telegram_api_url,
        base_file_url=file_url(settings.telegram_api_url),
    )
    delay = RETRY_FIRST_S
    for attempt in itertools.count(1):
        try:
            await bot.get_me()
            return
        except InvalidToken:
            raise ConfigError(
                "PLANGATE_TELEGRAM_TOKEN: the Telegram server refused the token (getMe: "
                "unauthorized); copy it again from @BotFather"
            ) from None
        except NetworkError as exc:
            _log.warning(
                "telegram: cannot reach %s (%s); attempt %d, next in %.0f s",
                urlsplit(settings.telegram_api_url).netloc or settings.telegram_api_url,
                exc.message,
                attempt,
                delay,
            )
        await sleep(delay)
        delay = min(delay * 2, RETRY_MAX_S)


async def _together(jobs: list[Coroutine[Any, Any, None]], stop: asyncio.Event) -> None:
    """Run the front ends side by side; when one ends (or fails) the others are stopped."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    tasks = [asyncio.ensure_future(job) for job in jobs]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        stop.set()
        await asyncio.gather(*tasks)
    finally:
        stop.set()
        for task in tasks:
            if not task.done():
                task.cancel()


async def _serve_slack(
    settings: Settings,
    opened: Plangate,
    slot: LateChannel,
    stop: asyncio.Event,
    *,
    alone: bool,
    replicas: Replicas | None = None,
) -> None:
    """The Slack front end on the opened plangate (bot.slack.app); ``replicas``: one replica
    of several (bot.slack.ingress)."""
    from bot.slack.app import SlackConfig, SlackFrontEnd, serve_slack

    secret = settings.slack_signing_secret
    app_token = settings.slack_app_token
    assert settings.slack_bot_token is not None
    front = SlackFrontEnd(
        opened.engine,
        opened.storage.db,
        SlackConfig(
            bot_token=settings.slack_bot_token.get_secret_value(),
            app_token=app_token.get_secret_value() if app_token else "",
            signing_secret=secret.get_secret_value() if secret else "",
            api_url=settings.slack_api_url,
            owner_ids=settings.slack_owner_ids,
            allowed_channels=settings.slack_allowed_channels,
            replayed=replicas is not None,
        ),
    )
    slot.bind(front.channel)
    await serve_slack(
        front,
        opened.engine,
        stop=stop,
        listen=slack_listen(settings.slack_listen),
        owns_engine=alone,
        replicas=replicas,
    )


async def run_bot() -> int:
    """Run the bot until SIGINT/SIGTERM; a setting or token problem is one line and exit 2."""
    settings = load_run_settings()
    require_run_settings(settings)
    held = install_problems(settings)
    if held:
        raise ConfigError(held[0])
    configure_logging(settings)
    for line in settings_warnings(files=[config_path(), Path(".env")]):
        _log.warning("settings: %s", line)
    require_slack_extra(settings)
    if settings.telegram_token is not None:
        await wait_for_telegram(settings)
    config = engine_config(settings)
    warning = await asyncio.to_thread(sandbox_warning, config.sandbox)
    if warning is not None:
        _log.warning("sandbox: %s", warning)
    model = model_from_settings(settings)
    transcriber = transcriber_from_settings(settings)
    telegram_slot = LateChannel()
    slack_slot = LateChannel()
    home = settings.home.expanduser()
    # Which front end a session belongs to is where its chat is (bot.slack.keys); the routes
    # are read from the home's meta table, which exists once plangate is opened.
    opened_box: list[Plangate] = []

    async def on_slack(session_id: str) -> bool:
        if not opened_box:
            return False
        return await lives_in(opened_box[0].storage.db, session_id, keys.is_slack_chat)

    serves_telegram = settings.telegram_token is not None
    serves_slack = settings.slack_bot_token is not None
    channel: Channel
    if serves_telegram and serves_slack:
        channel = SplitChannel(telegram_slot, slack_slot, on_slack)
    else:
        channel = telegram_slot if serves_telegram else slack_slot
    replica = replica_name(settings) if replicated(settings) else None
    if replica is not None:
        _log.info("plangate.runner.replica %s (lease %.0f s)", replica, settings.lease_ttl)
    try:
        async with (
            open_plangate(
                home,
                model=model,
                channel=channel,
                config=config,
                database_url=(
                    None
                    if settings.database_url is None
                    else settings.database_url.get_secret_value()
                ),
                replica=replica,
            ) as opened,
            heartbeat(home, name=heartbeat_name(replicated=settings.database_url is not None)),
        ):
            opened_box.append(opened)
            stop = asyncio.Event()
            jobs = []
            if serves_slack:
                jobs.append(
                    _serve_slack(
                        settings,
                        opened,
                        slack_slot,
                        stop,
                        alone=not serves_telegram,
                        replicas=(
                            None if replica is None else replica_parts(settings, opened, replica)
                        ),
                    )
                )
            if serves_telegram:
                jobs.append(
                    serve(
                        settings,
                        opened.engine,
                        opened.storage.db,
                        channel_slot=telegram_slot,
                        transcriber=transcriber,
                        stop=stop,
                        replicas=(
                            None if replica is None else replica_parts(settings, opened, replica)
                        ),
                    )
                )
            await _together(jobs, stop)
    except InvalidToken:
        raise ConfigError(
            "PLANGATE_TELEGRAM_TOKEN: the Telegram server refused the token (getMe: "
            "unauthorized); copy it again from @BotFather"
        ) from None
    finally:
        await model.aclose()
        if transcriber is not None:
            await transcriber.aclose()
    return 0
