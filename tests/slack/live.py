"""The Slack rig: the real engine over real storage, the real slack_bolt app over Socket Mode
on the fake Slack (tests/fakeslack), and the real openai SDK against the fake model server."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from bot.channels import ChannelQueue
from bot.compose import open_plangate
from bot.slack import keys
from bot.slack.app import SlackConfig, SlackFrontEnd, serve_socket_mode
from bot.slack.render import SLACK_LIMITS
from engine.app import Engine, EngineConfig
from engine.approval.policy import BashApproval
from engine.model.openai_provider import OpenAIProvider
from engine.model.script import ScriptStep
from engine.tasks import BackgroundTasks
from storage.open import Storage
from tests.engine.helpers import ALLOW_TEST_RUN
from tests.fakes.openai_server import FAKE_MODEL, FakeOpenAIServer
from tests.fakeslack.server import FakeSlack, Message

OWNER = "U0OWNER1"
APPROVER = "U0APPROV"
STRANGER = "U0STRANG"
CHANNEL = "C0TEAM01"
DM = "D0OWNER1"
GROUP = keys.chat_key(CHANNEL)


@dataclass
class SlackLive:
    front: SlackFrontEnd
    engine: Engine
    storage: Storage
    workspace: Path
    slack: FakeSlack


@asynccontextmanager
async def live_slack(
    slack: FakeSlack,
    tmp_path: Path,
    script: Sequence[ScriptStep],
    *,
    max_goal_rounds: int = 20,
    allow_bash: tuple[tuple[str, ...], ...] = ALLOW_TEST_RUN,
    bash_approval: BashApproval | None = None,
    allowed_channels: tuple[str, ...] = (CHANNEL,),
    document_chars: int = 6000,
) -> AsyncIterator[SlackLive]:
    """The real engine and the real Slack front end, connected to ``slack`` by Socket Mode."""
    workspace = tmp_path / "work"
    workspace.mkdir(exist_ok=True)
    server = FakeOpenAIServer()
    server.play(list(script))
    await server.start()
    model = OpenAIProvider(FAKE_MODEL, base_url=server.base_url, api_key="test-key")
    queue = ChannelQueue(SLACK_LIMITS)
    config = EngineConfig(
        workspace=workspace,
        max_goal_rounds=max_goal_rounds,
        allow_bash=allow_bash,
        bash_approval=bash_approval,
        owner_ids=frozenset({keys.person_key(OWNER)}),
    )
    front_config = SlackConfig(
        bot_token=slack.bot_token,
        app_token=slack.app_token,
        api_url=slack.api_url,
        owner_ids=(OWNER,),
        allowed_channels=allowed_channels,
        interval_s=0.0,
        document_chars=document_chars,
    )
    stop = asyncio.Event()
    tasks = BackgroundTasks(logging.getLogger("tests.slack"))
    try:
        async with open_plangate(
            tmp_path / "home", model=model, channel=queue, config=config
        ) as opened:
            front = SlackFrontEnd(opened.engine, opened.storage.db, front_config)
            delivering = tasks.spawn(queue.deliver(front.channel), name="deliver")
            await front.start()
            serving = tasks.spawn(serve_socket_mode(front, stop), name="socket")
            await slack.connected()
            await opened.engine.start()
            try:
                yield SlackLive(front, opened.engine, opened.storage, workspace, slack)
            finally:
                await opened.engine.shutdown()
                await front.drain()
                stop.set()
                await serving
                delivering.cancel()
                await front.aclose()
    finally:
        await model.aclose()
        await server.stop()


def labels(msg: Message) -> list[str]:
    return [label for label, _, _ in msg.buttons()]


async def until(check: Callable[[], Awaitable[bool] | bool], *, timeout_s: float = 30.0) -> None:
    """Wait (bounded) until ``check()`` holds."""

    async def loop() -> None:
        while True:
            got = check()
            if not isinstance(got, bool):
                got = await got
            if got:
                return
            await asyncio.sleep(0.02)

    await asyncio.wait_for(loop(), timeout_s)


async def card(live: SlackLive, session_id: str, channel: str = CHANNEL) -> Message:
    """The live plan card, as the sidecar's ``flow`` names it."""
    data = await live.engine.plan_card(session_id)
    assert data.sidecar is not None and data.sidecar.flow.card_id is not None
    ts = data.sidecar.flow.card_id
    assert ts is not None
    return live.slack.message(channel, ts)
