"""Real ``plangate run`` replicas for the tests: processes in webhook mode on one PostgreSQL,
one home and one workspace (a git repository), talking to the fake Bot API and the fake model
server that run in the test's own process.

The test stands in for Telegram: :class:`Courier` POSTs every pending update, one at a time in
order (the webhook is registered with ``max_connections=1``), each to a replica picked at
random, and tries another replica when one does not answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import socket
import sys
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from engine.model.script import Script, ScriptStep
from engine.model.types import ModelReply
from tests.fakebot.server import FakeBotApi

ROOT = Path(__file__).resolve().parents[2]
HOOK_URL = "https://bot.example.org/tg/replicas"  # the fake POSTs to its path
SECRET = "replicas-secret_1"
_ENV_KEYS = ("PLANGATE_", "TELEGRAM_BOT_TOKEN", "OPENAI_API_KEY")


class RoutedScript(Script):
    """One script per conversation, chosen by the marker its first user message carries, so
    chats running at once on any replica each get their own replies from one fake server."""

    def __init__(self, scripts: Mapping[str, Sequence[ScriptStep]]) -> None:
        super().__init__([])
        self.scripts = {marker: Script(list(steps)) for marker, steps in scripts.items()}

    def next_reply(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        offered: Collection[str] | None = None,
    ) -> ModelReply:
        first = next((str(m.get("content")) for m in messages if m.get("role") == "user"), "")
        marker = next(m for m in self.scripts if m in first)
        return self.scripts[marker].next_reply(messages, offered=offered)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Replica:
    name: str
    port: int
    proc: asyncio.subprocess.Process
    log: Path

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None

    def kill(self) -> None:
        """SIGKILL: no shutdown, no lease released, connections dropped."""
        os.kill(self.proc.pid, signal.SIGKILL)


def replica_env(
    api: FakeBotApi, *, model_url: str, dsn: str, home: Path, workspace: Path, **extra: str
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_ENV_KEYS)}
    env.update(
        PYTHONPATH=str(ROOT),
        PLANGATE_TELEGRAM_TOKEN=api.token,
        PLANGATE_TELEGRAM_API_URL=api.base_url,
        PLANGATE_HOME=str(home),
        PLANGATE_WORKSPACE=str(workspace),
        PLANGATE_MODEL="fake-model",
        PLANGATE_MODEL_BASE_URL=model_url,
        PLANGATE_DATABASE_URL=dsn,
        PLANGATE_WEBHOOK_URL=HOOK_URL,
        PLANGATE_WEBHOOK_SECRET=SECRET,
        PLANGATE_FLOW_EDIT_INTERVAL="0.05",
        PLANGATE_FLOW_GROUP_EDIT_INTERVAL="0.05",
        PLANGATE_DISK_RESERVE_MB="0",
        PLANGATE_TRANSCRIBE_MODEL="off",
    )
    env.update(extra)
    return env


async def start_replica(name: str, env: dict[str, str], logs: Path) -> Replica:
    """``plangate run`` as replica ``name``; returns once its webhook port accepts."""
    port = free_port()
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{name}.log"
    with log.open("ab") as err:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bot.cli",
            "run",
            cwd=str(logs),
            env={
                **env,
                "PLANGATE_REPLICA_ID": name,
                "PLANGATE_WEBHOOK_LISTEN": f"127.0.0.1:{port}",
            },
            stdout=asyncio.subprocess.DEVNULL,
            stderr=err,
        )
    replica = Replica(name, port, proc, log)

    async def accepting() -> None:
        while True:
            if not replica.alive:
                raise AssertionError(f"replica {name} exited:\n{log.read_text()[-3000:]}")
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.05)
                continue
            writer.close()
            return

    await asyncio.wait_for(accepting(), 90)
    return replica


async def stop_replica(replica: Replica) -> None:
    if replica.alive:
        replica.proc.send_signal(signal.SIGTERM)
    with contextlib.suppress(ProcessLookupError):
        await asyncio.wait_for(replica.proc.wait(), 60)


@dataclass
class Courier:
    """Telegram's side of the webhook: every pending update POSTed, in order, to a replica
    picked at random among the live ones; ``delivered`` records (update_id, replica)."""

    api: FakeBotApi
    replicas: list[Replica]
    rng: random.Random = field(default_factory=lambda: random.Random(36))
    delivered: list[tuple[int, str]] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            pending = self.api.pending()
            if not pending:
                await asyncio.sleep(0.02)
                continue
            update = pending[0]
            target = self.rng.choice([r for r in self.replicas if r.alive])
            try:
                status = await self.api.deliver_webhook(
                    update, proxy_to=target.origin, timeout_s=10
                )
            except (aiohttp.ClientError, TimeoutError):
                status = 0  # no answer: Telegram retries (here: at once, maybe elsewhere)
            if status == 200:
                self.delivered.append((int(update["update_id"]), target.name))
            else:
                await asyncio.sleep(0.05)

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


@asynccontextmanager
async def running(
    api: FakeBotApi, env: dict[str, str], logs: Path, names: Sequence[str]
) -> AsyncIterator[tuple[list[Replica], Courier]]:
    """The replicas started (one after another: the first migrates the database), and the
    courier delivering; everything stopped on the way out."""
    replicas: list[Replica] = []
    courier = Courier(api, replicas)
    try:
        for name in names:
            replicas.append(await start_replica(name, env, logs))
        courier.start()
        yield replicas, courier
    finally:
        await courier.stop()
        await asyncio.gather(*(stop_replica(r) for r in replicas))


__all__ = [
    "HOOK_URL",
    "SECRET",
    "Courier",
    "Replica",
    "RoutedScript",
    "replica_env",
    "running",
    "start_replica",
    "stop_replica",
]
