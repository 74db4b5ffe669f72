"""Slack as one of the composition's front ends (bot.channels.FrontEnd; the entry in
``bot.runner.FRONT_ENDS``): when it is wanted, its owners, its secrets, the extra it needs,
building the bolt app on an opened plangate, and its ``doctor`` lines (docs/slack.md).

slack_bolt and aiohttp are an extra (``plangate[slack]``): they are imported only once Slack
is wanted, so this module loads without them.
"""

from __future__ import annotations

import asyncio
import importlib.util
from typing import TYPE_CHECKING

from bot.slack import keys
from bot.slack.render import SLACK_LIMITS
from engine.errors import ConfigError
from engine.keys import PersonKey

if TYPE_CHECKING:
    from bot.compose import Plangate
    from bot.settings import Settings
    from bot.slack.app import SlackFrontEnd as SlackApp
    from bot.telegram.ingress import Replicas
    from engine.model.transcribe import Transcriber
    from engine.ports import Channel


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


async def check_slack(settings: Settings) -> list[tuple[bool, str]]:
    """auth.test with the bot token (and apps.connections.open with the app token, for
    Socket Mode); nothing when Slack is not configured."""
    if settings.slack_bot_token is None:
        return []
    if importlib.util.find_spec("slack_sdk") is None:
        return [(False, "slack: not installed; pip install 'plangate[slack]'")]
    from slack_sdk.errors import SlackApiError, SlackClientError
    from slack_sdk.web.async_client import AsyncWebClient

    url = settings.slack_api_url
    client = AsyncWebClient(token=settings.slack_bot_token.get_secret_value(), base_url=url)
    try:
        who = await client.auth_test()
    except SlackApiError as exc:
        error = exc.response.get("error")
        return [(False, f"slack: the bot token was refused ({error}; PLANGATE_SLACK_BOT_TOKEN)")]
    except (SlackClientError, OSError) as exc:
        return [(False, f"slack: cannot reach {url} ({type(exc).__name__})")]
    results = [(True, f"slack: ok, @{who.get('user')} in {who.get('team')}")]
    if settings.slack_listen is None and settings.slack_app_token is not None:
        app = AsyncWebClient(base_url=url)
        try:
            await app.apps_connections_open(app_token=settings.slack_app_token.get_secret_value())
            results.append((True, "slack: Socket Mode ok (PLANGATE_SLACK_APP_TOKEN)"))
        except SlackApiError as exc:
            error = exc.response.get("error")
            results.append(
                (False, f"slack: the app token was refused ({error}; PLANGATE_SLACK_APP_TOKEN)")
            )
        except (SlackClientError, OSError) as exc:
            results.append((False, f"slack: cannot reach {url} ({type(exc).__name__})"))
    return results


class SlackServing:
    """The Slack front end (bot.slack.app) built on an opened plangate, not yet serving."""

    def __init__(self, settings: Settings, opened: Plangate, replicas: Replicas | None) -> None:
        from bot.slack.app import SlackConfig, SlackFrontEnd

        secret = settings.slack_signing_secret
        app_token = settings.slack_app_token
        assert settings.slack_bot_token is not None
        self._engine = opened.engine
        self._listen = slack_listen(settings.slack_listen)
        self.front: SlackApp = SlackFrontEnd(
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
        self._replicas = replicas

    @property
    def channel(self) -> Channel:
        return self.front.channel

    async def serve(self, stop: asyncio.Event, *, owns_engine: bool) -> None:
        from bot.slack.app import serve_slack

        await serve_slack(
            self.front,
            self._engine,
            stop=stop,
            listen=self._listen,
            owns_engine=owns_engine,
            replicas=self._replicas,
        )


class SlackEntry:
    """The Slack entry of ``bot.runner.FRONT_ENDS``."""

    name = "slack"
    limits = SLACK_LIMITS

    def wanted(self, settings: Settings) -> bool:
        return settings.slack_bot_token is not None

    def owns(self, chat_id: int) -> bool:
        return keys.is_slack_chat(chat_id)

    def owner_keys(self, settings: Settings) -> frozenset[PersonKey]:
        return frozenset(keys.person_key(user) for user in settings.slack_owner_ids)

    def secrets(self, settings: Settings) -> list[str]:
        found = (
            settings.slack_bot_token,
            settings.slack_app_token,
            settings.slack_signing_secret,
        )
        return [secret.get_secret_value() for secret in found if secret is not None]

    async def ready(self, settings: Settings) -> None:
        require_slack_extra(settings)

    def replicated(self, settings: Settings) -> bool:
        return settings.slack_listen is not None  # the Events API: any replica may get one

    def build(
        self,
        settings: Settings,
        opened: Plangate,
        *,
        transcriber: Transcriber | None,
        replicas: Replicas | None,
    ) -> SlackServing:
        return SlackServing(settings, opened, replicas)

    async def doctor(self, settings: Settings) -> list[tuple[bool, str]]:
        return await check_slack(settings)


SLACK = SlackEntry()

__all__ = ["SLACK", "SlackEntry", "check_slack", "require_slack_extra", "slack_listen"]
