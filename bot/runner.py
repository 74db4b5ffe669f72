"""``plangate run``: the composition root of the Telegram bot.

Settings -> storage -> model -> engine -> the PTB application; the only module that knows
engine, storage and bot together (with the demo and the doctor).
"""

from __future__ import annotations

import logging

from telegram.error import InvalidToken

from bot.app import redact, serve
from bot.channel import LateChannel
from bot.settings import Settings, load_settings, require_run_settings
from engine.app import EngineConfig, build_engine
from engine.errors import ConfigError
from engine.model.openai_provider import OpenAIProvider
from storage.open import open_storage


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


def configure_logging(settings: Settings) -> None:
    """INFO logs to stderr with every secret redacted."""
    secrets = [
        s.get_secret_value()
        for s in (settings.telegram_token, settings.model_api_key, settings.webhook_secret)
        if s is not None
    ]
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    handler.addFilter(RedactingFilter(secrets))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    # httpx logs every request URL, and a Bot API URL contains the token.
    logging.getLogger("httpx").setLevel(logging.WARNING)


def model_from_settings(settings: Settings) -> OpenAIProvider:
    """The OpenAI-compatible provider the settings describe; ConfigError when it has no key."""
    key = settings.model_api_key.get_secret_value() if settings.model_api_key else None
    return OpenAIProvider(settings.model, base_url=settings.model_base_url, api_key=key)


def engine_config(settings: Settings) -> EngineConfig:
    return EngineConfig(
        workspace=settings.workspace,
        profile=settings.profile,
        max_goal_rounds=settings.goal_max_rounds,
        todo_parallel=settings.todo_parallel,
        max_steps=settings.max_steps,
        stall_steps=settings.checklist_stall_steps,
        allow_bash=settings.allow_bash,
        approval_timeout_s=settings.approval_timeout,
        ask_writes=settings.ask_writes,
    )


async def run_bot() -> int:
    """Run the bot until SIGINT/SIGTERM; a setting or token problem is one line and exit 2."""
    settings = load_settings()
    require_run_settings(settings)
    configure_logging(settings)
    model = model_from_settings(settings)
    storage = await open_storage(settings.home.expanduser())
    channel = LateChannel()
    engine = build_engine(
        log=storage.log,
        sessions=storage.sessions,
        plan_store=storage.plan_store,
        model=model,
        channel=channel,
        config=engine_config(settings),
    )
    try:
        await serve(settings, engine, storage.db, channel_slot=channel)
    except InvalidToken:
        raise ConfigError(
            "PLANGATE_TELEGRAM_TOKEN: the Telegram server refused the token (getMe: "
            "unauthorized); copy it again from @BotFather"
        ) from None
    finally:
        await model.aclose()
        await storage.close()
    return 0
