"""Telegram as one of the composition's front ends (bot.channels.FrontEnd; the entry in
``bot.runner.FRONT_ENDS``): when it is wanted, its owners, its secrets, waiting for the Bot
API at start, building the application on an opened plangate, and its ``doctor`` line."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from telegram import Bot
from telegram.error import InvalidToken, NetworkError, TelegramError

from bot.telegram.app import (
    build_application,
    file_url,
    parts,
    replica_mode,
    serve_application,
)
from bot.telegram.channel import TELEGRAM_LIMITS
from bot.telegram.keys import person_key
from engine.errors import ConfigError
from engine.keys import PersonKey
from engine.ports import Channel

if TYPE_CHECKING:
    from bot.compose import Plangate
    from bot.settings import Settings
    from bot.telegram.ingress import Replicas
    from engine.model.transcribe import Transcriber

_log = logging.getLogger("plangate.runner")

RETRY_FIRST_S = 2.0
RETRY_MAX_S = 60.0
# Telegram's chat ids fit in 52 bits (the Bot API says so); another front end's routes lie
# beyond (bot.slack.keys).
_TELEGRAM_IDS = 1 << 53
REFUSED_TOKEN = (
    "PLANGATE_TELEGRAM_TOKEN: the Telegram server refused the token (getMe: "
    "unauthorized); copy it again from @BotFather"
)


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
            raise ConfigError(REFUSED_TOKEN) from None
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


async def check_telegram(settings: Settings) -> tuple[bool, str]:
    """getMe with the token; also reports whether privacy mode hides group messages."""
    if settings.telegram_token is None:
        return False, "telegram: no token (PLANGATE_TELEGRAM_TOKEN); get one from @BotFather"
    bot = Bot(
        settings.telegram_token.get_secret_value(),
        base_url=settings.telegram_api_url,
        base_file_url=file_url(settings.telegram_api_url),
    )
    try:
        async with bot:
            me = bot.bot
    except InvalidToken:
        return False, (
            "telegram: the server refused the token (PLANGATE_TELEGRAM_TOKEN); "
            "copy it again from @BotFather"
        )
    except NetworkError as exc:
        return False, (
            f"telegram: cannot reach {settings.telegram_api_url} ({exc.message}); "
            "check the network or PLANGATE_TELEGRAM_API_URL"
        )
    except TelegramError as exc:
        return False, f"telegram: getMe failed ({exc.message})"
    privacy = (
        "privacy mode is on: in groups the bot sees only commands, mentions and replies"
        if not me.can_read_all_group_messages
        else "privacy mode is off: the bot sees every group message"
    )
    return True, f"telegram: ok, @{me.username}; {privacy}"


class TelegramServing:
    """The PTB application built on an opened plangate, not yet running."""

    def __init__(
        self,
        settings: Settings,
        opened: Plangate,
        transcriber: Transcriber | None,
        replicas: Replicas | None,
    ) -> None:
        self._settings = settings
        self._engine = opened.engine
        self._replicas = replicas
        self.application = build_application(
            settings,
            opened.engine,
            db_meta=opened.storage.db,
            transcriber=transcriber,
            inbox=replica_mode(settings, replicas),
        )

    @property
    def channel(self) -> Channel:
        return parts(self.application).channel

    async def serve(self, stop: asyncio.Event, *, owns_engine: bool) -> None:
        try:
            await serve_application(
                self.application,
                self._settings,
                self._engine,
                stop=stop,
                owns_engine=owns_engine,
                replicas=self._replicas,
            )
        except InvalidToken:
            raise ConfigError(REFUSED_TOKEN) from None


class TelegramFrontEnd:
    """The Telegram entry of ``bot.runner.FRONT_ENDS``."""

    name = "telegram"
    limits = TELEGRAM_LIMITS

    def wanted(self, settings: Settings) -> bool:
        return settings.telegram_token is not None

    def owns(self, chat_id: int) -> bool:
        return abs(chat_id) < _TELEGRAM_IDS

    def owner_keys(self, settings: Settings) -> frozenset[PersonKey]:
        return frozenset(person_key(user) for user in settings.owner_ids)

    def secrets(self, settings: Settings) -> list[str]:
        found = (settings.telegram_token, settings.webhook_secret)
        return [secret.get_secret_value() for secret in found if secret is not None]

    async def ready(self, settings: Settings) -> None:
        await wait_for_telegram(settings)

    def replicated(self, settings: Settings) -> bool:
        return settings.webhook_url is not None  # by webhook, any replica may get an update

    def build(
        self,
        settings: Settings,
        opened: Plangate,
        *,
        transcriber: Transcriber | None,
        replicas: Replicas | None,
    ) -> TelegramServing:
        return TelegramServing(settings, opened, transcriber, replicas)

    async def doctor(self, settings: Settings) -> list[tuple[bool, str]]:
        return [await check_telegram(settings)]


TELEGRAM = TelegramFrontEnd()

__all__ = ["TELEGRAM", "TelegramFrontEnd", "check_telegram", "wait_for_telegram"]
