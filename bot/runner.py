"""``plangate run``: the composition root of the Telegram bot.

Settings -> storage -> model -> engine -> the PTB application; the only module that knows
engine, storage and bot together (with the demo and the doctor).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import socket
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from telegram.error import NetworkError

from bot.channels import ChannelQueue, ChatRouter, FrontEnd, Serving, smallest_limits
from bot.compose import Plangate, open_plangate
from bot.health import heartbeat, heartbeat_name
from bot.settings import (
    Settings,
    config_path,
    load_run_settings,
    require_run_settings,
    settings_warnings,
)
from bot.slack.front import SLACK
from bot.telegram.app import redact
from bot.telegram.front import TELEGRAM
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

# The channels plangate serves, each its own package (docs/architecture.md, "Adding a third
# channel"); the first one wanted starts and stops the engine. A new channel is one entry.
FRONT_ENDS: tuple[FrontEnd, ...] = (TELEGRAM, SLACK)

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
    secrets = [s.get_secret_value() for s in (settings.model_api_key, settings.database_url) if s]
    for front in FRONT_ENDS:
        secrets += front.secrets(settings)
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
        owner_ids=frozenset().union(*(front.owner_keys(settings) for front in FRONT_ENDS)),
        vision=settings.model_vision,
        worktree_root=settings.home / "worktrees",
    )


def replica_name(settings: Settings) -> str:
    """This process's name among replicas: ``PLANGATE_REPLICA_ID``, or host name and pid
    (unique while it lives, and a restarted process is a new replica)."""
    return settings.replica_id or f"{socket.gethostname()}-{os.getpid()}"


def replicated(settings: Settings, fronts: list[FrontEnd]) -> bool:
    """Whether this process is one replica of several (docs/webhook.md, "Several replicas"):
    PostgreSQL, and every front end it serves reaches it over HTTP, where any replica may
    receive a request (:meth:`FrontEnd.replicated`: Telegram by webhook, Slack by the Events
    API on ``PLANGATE_SLACK_LISTEN``). Otherwise it owns every chat itself."""
    if settings.database_url is None:
        return False
    return bool(fronts) and all(front.replicated(settings) for front in fronts)


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


def wanted_front_ends(settings: Settings) -> list[FrontEnd]:
    """The front ends the settings ask for, in :data:`FRONT_ENDS` order."""
    return [front for front in FRONT_ENDS if front.wanted(settings)]


async def serve_front_ends(
    served: list[tuple[FrontEnd, Serving]],
    opened: Plangate,
    queue: ChannelQueue,
    stop: asyncio.Event,
) -> None:
    """Serve the built front ends side by side until ``stop`` (or one ends), the engine's
    words delivered from ``queue`` to the front end each session's chat belongs to; the
    first front end starts and stops the engine, so delivery goes on until it has."""
    channel: Channel = served[0][1].channel
    if len(served) > 1:
        channel = ChatRouter(opened.storage.db, [(f.owns, s.channel) for f, s in served])
    delivering = asyncio.ensure_future(queue.deliver(channel))
    try:
        await _together(
            [serving.serve(stop, owns_engine=i == 0) for i, (_, serving) in enumerate(served)],
            stop,
        )
    finally:
        delivering.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await delivering


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
    fronts = wanted_front_ends(settings)
    replica = replica_name(settings) if replicated(settings, fronts) else None
    if replica is not None:
        _log.info("plangate.runner.replica %s (lease %.0f s)", replica, settings.lease_ttl)
    for front in fronts:
        await front.ready(settings)
    config = engine_config(settings)
    warning = await asyncio.to_thread(sandbox_warning, config.sandbox)
    if warning is not None:
        _log.warning("sandbox: %s", warning)
    model = model_from_settings(settings)
    transcriber = transcriber_from_settings(settings)
    home = settings.home.expanduser()
    # The engine's channel: what it says waits here until the front ends, built on the
    # engine, take it (bot.channels).
    queue = ChannelQueue(smallest_limits([front.limits for front in fronts]))
    try:
        async with (
            open_plangate(
                home,
                model=model,
                channel=queue,
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
            served = [
                (
                    front,
                    front.build(
                        settings,
                        opened,
                        transcriber=transcriber,
                        # Each front end has the replicas' inbox and leases of its own.
                        replicas=(
                            None if replica is None else replica_parts(settings, opened, replica)
                        ),
                    ),
                )
                for front in fronts
            ]
            await serve_front_ends(served, opened, queue, asyncio.Event())
    finally:
        await model.aclose()
        if transcriber is not None:
            await transcriber.aclose()
    return 0
