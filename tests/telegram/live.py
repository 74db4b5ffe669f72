"""The live rig: the real engine over real storage, the real application on the fake Bot
API, and by default the real openai SDK against the fake chat-completions server."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from telegram.ext import Application

from bot.channels import ChannelQueue
from bot.compose import open_plangate
from bot.telegram.app import announce_restored, parts
from bot.telegram.channel import TELEGRAM_LIMITS
from bot.telegram.keys import person_key, tg_flow
from engine.api import RestoredGoal
from engine.app import Engine, EngineConfig
from engine.approval.policy import BashApproval
from engine.model.openai_provider import OpenAIProvider
from engine.model.script import ScriptStep
from engine.model.transcribe import OpenAITranscriber
from engine.model.types import ModelProvider
from engine.progress.stuck import StuckLimits
from engine.tools.files import FileLimits
from engine.tools.sandbox import SandboxSettings
from engine.usage.meter import UsageConfig
from storage.open import Storage
from tests.engine.helpers import ALLOW_TEST_RUN
from tests.fakebot.server import FakeBotApi, FakeMessage
from tests.fakes.openai_server import FAKE_MODEL, FakeOpenAIServer
from tests.telegram.app_support import GROUP, OWNER, running_bot, settings_for

# The database the live rig opens: None is SQLite in the home; a postgresql:// URL puts the
# stores in PostgreSQL (``on_database``), so a whole end-to-end test runs on either.
DATABASE_URL: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "live_database_url", default=None
)


@contextmanager
def on_database(url: str) -> Iterator[None]:
    """Every ``live_bot`` opened inside keeps its stores in the database at ``url``."""
    token = DATABASE_URL.set(url)
    try:
        yield
    finally:
        DATABASE_URL.reset(token)


@dataclass
class Live:
    app: Application[Any, Any, Any, Any, Any, Any]
    engine: Engine
    storage: Storage
    workspace: Path
    restored: list[RestoredGoal]
    # The fake chat-completions server (None when the test passed its own model).
    model_server: FakeOpenAIServer | None = None


@asynccontextmanager
async def live_bot(
    api: FakeBotApi,
    tmp_path: Path,
    script: Sequence[ScriptStep],
    *,
    max_goal_rounds: int = 20,
    model: ModelProvider | None = None,
    group_pacing: bool = False,
    max_steps: int = 50,
    edit_interval_s: float = 0.05,
    allow_bash: tuple[tuple[str, ...], ...] = ALLOW_TEST_RUN,
    approval_timeout_s: float = 600.0,
    ask_writes: bool = False,
    file_limits: FileLimits | None = None,
    plan_approvals: int = 1,
    owner_overrides: bool = False,
    bash_approval: BashApproval | None = None,
    ask_bash: tuple[tuple[str, ...], ...] = (),
    stuck: StuckLimits | None = None,
    usage: UsageConfig | None = None,
    vision: bool = False,
    bot_settings: dict[str, Any] | None = None,
    projects: tuple[tuple[str, Path], ...] = (),
    git_remote: str | None = None,
    transcribe: bool = False,
    home: Path | None = None,
    sandbox: SandboxSettings | None = None,
    disk_reserve_mb: int = 0,
) -> AsyncIterator[Live]:
    """The real engine over real storage, wired to the real application on the fake API.

    ``bot_settings``: more fields of the bot's settings (``max_upload_mb`` ...); ``vision``:
    the model sees images (``PLANGATE_MODEL_VISION``); ``transcribe``: voice notes go to the
    fake server's ``audio/transcriptions`` (the default rig only). ``home`` defaults to
    ``tmp_path/home`` (beside the workspace); ``sandbox`` to the full sandbox with nothing
    hidden but the home. ``disk_reserve_mb``: PLANGATE_DISK_RESERVE_MB (0, the default: none).

    ``group_pacing``: the shipped outbox pacing (about a call a second per chat, 20 per
    rolling minute in a group), as a real group has it; otherwise the tests' (no waits).
    """
    workspace = tmp_path / "work"
    workspace.mkdir(exist_ok=True)
    # By default the real openai SDK talks to the fake chat-completions server on loopback.
    server: FakeOpenAIServer | None = None
    sdk: OpenAIProvider | None = None
    if model is None:
        server = FakeOpenAIServer()
        server.play(list(script))
        await server.start()
        model = sdk = OpenAIProvider(FAKE_MODEL, base_url=server.base_url, api_key="test-key")
    transcriber = (
        OpenAITranscriber(base_url=server.base_url, api_key="test-key")
        if transcribe and server is not None
        else None
    )
    slot = ChannelQueue(TELEGRAM_LIMITS)
    config = EngineConfig(
        workspace=workspace,
        max_goal_rounds=max_goal_rounds,
        max_steps=max_steps,
        allow_bash=allow_bash,
        approval_timeout_s=approval_timeout_s,
        ask_writes=ask_writes,
        file_limits=file_limits,
        owner_ids=frozenset({person_key(OWNER)}),
        plan_approvals=plan_approvals,
        owner_overrides=owner_overrides,
        bash_approval=bash_approval,
        ask_bash=ask_bash,
        stuck=stuck or StuckLimits(),
        usage=usage or UsageConfig(),
        vision=vision,
        projects=projects,
        git_remote=git_remote,
        **({"sandbox": sandbox} if sandbox is not None else {}),
        disk_reserve_mb=disk_reserve_mb,
    )
    pacing = {"chat_interval_s": 1.0, "group_per_minute": 20} if group_pacing else {}
    settings = settings_for(
        api,
        flow_edit_interval=edit_interval_s,
        flow_group_edit_interval=6.0 if group_pacing else edit_interval_s,
        **(bot_settings or {}),
    )
    try:
        async with (
            open_plangate(
                home or tmp_path / "home",
                model=model,
                channel=slot,
                config=config,
                database_url=DATABASE_URL.get(),
            ) as opened,
            running_bot(
                api,
                opened.engine,
                opened.storage.db,
                notices=slot,
                settings=settings,
                transcriber=transcriber,
                **pacing,
            ) as app,
        ):
            engine = opened.engine
            restored = await engine.start()
            await announce_restored(app, restored)  # as serve() does
            try:
                yield Live(app, engine, opened.storage, workspace, restored, server)
            finally:
                await engine.shutdown()
                await parts(app).presenter.flush()
    finally:
        if sdk is not None:
            await sdk.aclose()
        if transcriber is not None:
            await transcriber.aclose()
        if server is not None:
            await server.stop()


def labels(msg: FakeMessage) -> list[str]:
    return [text for row in msg.buttons for text, _ in row]


def button(msg: FakeMessage, label: str) -> str:
    return next(d for row in msg.buttons for text, d in row if text == label)


async def card(
    api: FakeBotApi, live: Live, session_id: str, *, chat_id: int = GROUP
) -> FakeMessage:
    """The live plan card, as the sidecar's ``flow`` names it."""
    data = await live.engine.plan_card(session_id)
    assert data.sidecar is not None and tg_flow(data.sidecar.flow).card_id is not None
    return api.message(chat_id, tg_flow(data.sidecar.flow).card_id)


async def until(check: Callable[[], Awaitable[bool]], *, timeout_s: float = 30.0) -> None:
    """Wait (bounded) until the async ``check()`` holds; as generous as ``eventually``."""

    async def loop() -> None:
        while not await check():
            await asyncio.sleep(0.02)

    await asyncio.wait_for(loop(), timeout_s)
