"""Slack benchmark (docs/bench.md): a command's cost on Slack against a bare slack_bolt handler.

Run: ``python -m bench.slack [--commands N] [--block B]``.

Everything is real except Slack and the model: slack_bolt's ``AsyncApp`` over Socket Mode on
the fake Slack (``tests/fakeslack/server.py``) over loopback, the engine over SQLite and plan
files in a temporary home, the scripted model (never called: ``status`` opens no turn).

The owner sends ``/plangate <verb>`` in a DM, one at a time; a command counts as done when the
fake has received the reply's ``chat.postMessage``. The baseline is a bare ``AsyncApp`` with
one ``/plangate`` listener that acknowledges and posts, with ``chat.postMessage``, the same
text plangate answered with, on a second fake. Both run in this one process and take turns in
blocks of B commands, so a burst of load on a shared machine hits both. Measured per command:
wall time and this process's CPU time (all its threads: SQLite's writer included; the fakes'
own work too, the same per call on both sides). The plangate side runs with its pacing off (no
per-channel interval), so the ratio is overhead, not deliberate waits. The second set of rows
answers the engine's ``command`` with the outcome the engine gave once (the same text): the
Slack front end's own share, without the engine's command plane. Ratios, not absolute times,
are the result.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from bot.channels import ChannelQueue
from bot.compose import open_plangate
from bot.slack import keys
from bot.slack.app import SlackConfig, SlackFrontEnd, serve_socket_mode
from bot.slack.render import SLACK_LIMITS
from engine.api import Outcome
from engine.app import EngineConfig
from engine.model.scripted import ScriptedProvider
from tests.fakeslack.server import Call, FakeSlack

OWNER = "U0OWNER1"
DM = "D0OWNER1"


_POSTED: dict[int, asyncio.Event] = {}


def _watch_posts(slack: FakeSlack) -> None:
    """Set an event on each chat.postMessage the fake serves (no polling of its call list)."""
    event = _POSTED[id(slack)] = asyncio.Event()

    def answered(call: Call) -> None:
        if call.method == "chat.postMessage":
            event.set()

    slack.on_answered = answered


async def _one(slack: FakeSlack, verb: str) -> None:
    event = _POSTED[id(slack)]
    event.clear()
    await slack.slash(DM, OWNER, verb)
    await event.wait()


async def _block(
    slack: FakeSlack, n: int, wall: list[float], cpu: list[float], verb: str = "status"
) -> None:
    for _ in range(n):
        w0, c0 = time.perf_counter(), time.process_time()
        await asyncio.wait_for(_one(slack, verb), 30)
        wall.append(time.perf_counter() - w0)
        cpu.append(time.process_time() - c0)


class _AnsweredEngine:
    """The engine with ``command`` answered by a fixed outcome (the real engine's own answer,
    taken once): what is left is the front end's share of a command."""

    def __init__(self, engine: Any, outcome: Outcome) -> None:
        self._engine, self._outcome = engine, outcome

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    async def command(self, *args: Any, **kwargs: Any) -> Outcome:
        return self._outcome


async def run(
    commands: int, block: int, verb: str = "status", *, front_only: bool = False
) -> dict[str, float]:
    """Both sides, interleaved; returns the means and the ratios. ``front_only``: the engine's
    command plane answers with a stored outcome (the Slack front end's share alone)."""
    logging.getLogger().setLevel(logging.WARNING)
    ours, bare = FakeSlack(), FakeSlack()
    await ours.start()
    await bare.start()
    for slack in (ours, bare):
        slack.channel(DM, im=True)
        _watch_posts(slack)
    stop = asyncio.Event()
    with tempfile.TemporaryDirectory() as tmp:
        home, work = Path(tmp) / "home", Path(tmp) / "work"
        work.mkdir()
        slot = ChannelQueue(SLACK_LIMITS)
        config = EngineConfig(workspace=work, owner_ids=frozenset({keys.person_key(OWNER)}))
        async with open_plangate(
            home, model=ScriptedProvider([]), channel=slot, config=config
        ) as opened:
            front = SlackFrontEnd(
                opened.engine,
                opened.storage.db,
                SlackConfig(
                    bot_token=ours.bot_token,
                    app_token=ours.app_token,
                    api_url=ours.api_url,
                    owner_ids=(OWNER,),
                    interval_s=0.0,
                ),
            )
            delivering = asyncio.ensure_future(slot.deliver(front.channel))
            await front.start()
            await opened.engine.start()
            if front_only:
                sid = await opened.engine.session_for_chat(keys.engine_chat(keys.chat_key(DM)))
                owner = keys.person_key(OWNER)
                outcome = await opened.engine.command(sid, verb, "", actor=owner)  # type: ignore[arg-type]
                front.engine = _AnsweredEngine(opened.engine, outcome)
            serving = asyncio.create_task(serve_socket_mode(front, stop))
            await ours.connected()

            app = AsyncApp(client=AsyncWebClient(token=bare.bot_token, base_url=bare.api_url))
            # The bare handler answers with the very text plangate answers with, so both sides
            # move the same bytes through the SDK and the fake.
            await _block(ours, 1, [], [], verb)
            answer = ours.bot_messages(DM)[-1].text

            @app.command("/plangate")
            async def command(ack: Any, body: dict[str, Any], client: AsyncWebClient) -> None:
                await ack()
                await client.chat_postMessage(channel=body["channel_id"], text=answer)

            handler = AsyncSocketModeHandler(app, bare.app_token)
            await handler.connect_async()  # type: ignore[no-untyped-call]
            await bare.connected()
            sides: dict[str, tuple[FakeSlack, list[float], list[float]]] = {
                "plangate": (ours, [], []),
                "bare": (bare, [], []),
            }
            # Warm-up: first calls pay for imports, connections and the session's creation.
            for slack, _, _ in sides.values():
                await _block(slack, 5, [], [])
            gc.collect()
            done = 0
            while done < commands:
                n = min(block, commands - done)
                for slack, wall, cpu in sides.values():
                    await _block(slack, n, wall, cpu, verb)
                done += n
            stop.set()
            await serving
            await handler.close_async()  # type: ignore[no-untyped-call]
            await opened.engine.shutdown()
            await front.drain()
            delivering.cancel()
            await front.aclose()
    await ours.stop()
    await bare.stop()
    if __debug__ and logging.getLogger("bench.slack").isEnabledFor(logging.DEBUG):
        logging.getLogger("bench.slack").debug("calls: %s / %s", ours.counts(), bare.counts())
    out: dict[str, float] = {}
    for name, (_, wall, cpu) in sides.items():
        out[f"{name}_wall_ms"] = statistics.mean(wall) * 1000
        out[f"{name}_cpu_ms"] = statistics.mean(cpu) * 1000
    out["wall_ratio"] = out["plangate_wall_ms"] / out["bare_wall_ms"]
    out["cpu_ratio"] = out["plangate_cpu_ms"] / out["bare_cpu_ms"]
    return out


def main(
    argv: list[str] | None = None, runner: Callable[[Awaitable[Any]], Any] = asyncio.run
) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--commands", type=int, default=200)
    parser.add_argument("--block", type=int, default=10)
    parser.add_argument("--verbs", default="help,status")
    args = parser.parse_args(argv)
    print(f"commands per side: {args.commands} (blocks of {args.block}, interleaved)")
    rows = [(verb, False) for verb in args.verbs.split(",")]
    rows += [(verb, True) for verb in args.verbs.split(",")]
    for verb, front_only in rows:
        result = runner(run(args.commands, args.block, verb, front_only=front_only))
        what = f"{verb} (front end alone)" if front_only else verb
        print(
            f"/plangate {what:<25} plangate {result['plangate_cpu_ms']:.2f} ms CPU "
            f"({result['plangate_wall_ms']:.2f} ms wall); bare slack_bolt "
            f"{result['bare_cpu_ms']:.2f} ms CPU ({result['bare_wall_ms']:.2f} ms wall); "
            f"ratio {result['cpu_ratio']:.2f}x CPU, {result['wall_ratio']:.2f}x wall"
        )


if __name__ == "__main__":
    main()
