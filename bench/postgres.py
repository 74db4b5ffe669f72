"""PostgreSQL against SQLite, in one run: appends per second, and the CPU of a command that
writes (``/plan`` through to its events).

Run: ``python -m bench.postgres [--appends N] [--commands N] [--repeat R]``. It starts its
own PostgreSQL (Debian's server binaries, as ``tests/pg.py`` does) in a temporary folder on a
unix socket, with the server's durable defaults (``fsync`` and ``synchronous_commit`` on), so
both sides pay a flush per commit (SQLite runs as plangate does, WAL with
``synchronous=FULL``). Both sides run alternately in the same process, ``--repeat`` times;
the figures are medians.

1. **Appends**: one session, ``--appends`` appends of one small event one after another
   (each waits for its commit: the latency path), then ten sessions appending at once (the
   throughput path). Appends per second, and CPU per append: plangate's process, and for
   PostgreSQL also the server's processes (SQLite does its work inside plangate's process,
   so the fair comparison is the sum). Then the ten sessions through two pools, five each:
   two replicas' connections against one's.
2. **A command that writes**: the real engine (``open_plangate`` over each store), the
   scripted model answering at once; ``--commands`` chats each send ``/plan Add a greeting``
   and the bench waits until the planning turn has ended (the command, plan mode, the turn,
   the model's reply: its events committed). CPU per command, as above; for PostgreSQL
   twice: as one process, and as one replica of several holding the chats' leases (every
   append and plan file write then passes the lease fence).

Nothing asserts on speed; the result is the ratio (target: PostgreSQL at most 1.5x SQLite's
CPU per command).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pwd
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bot.compose import open_plangate
from engine.agent.testing import RecordingChannel
from engine.app import EngineConfig
from engine.events import UserMessage
from engine.keys import Chat
from engine.model.script import say
from engine.model.scripted import ScriptedProvider
from storage.db import Database
from storage.eventlog import SqliteEventLog
from storage.postgres.db import PgDatabase
from storage.postgres.eventlog import PgEventLog
from tests.pg import _as_owner, _bin

OWNER = "tg:7"


@dataclass(frozen=True)
class Server:
    """The bench's PostgreSQL: its URL and its data folder (for the server's CPU)."""

    url: str
    data: Path

    def cpu_s(self) -> float:
        """User + system CPU of the postmaster and every process it started, now alive."""
        pid = int((self.data / "postmaster.pid").read_text().splitlines()[0])
        pids = [pid, *_children(pid)]
        tick = os.sysconf("SC_CLK_TCK")
        total = 0
        for p in pids:
            try:
                fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += int(fields[11]) + int(fields[12])  # utime, stime
        return total / tick


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        out.extend(int(c) for c in text)
    return out


@contextmanager
def postgres_server() -> Iterator[Server]:
    """initdb + pg_ctl start on a unix socket, durable settings; stopped at the end."""
    owner = "postgres" if os.geteuid() == 0 else None
    root = Path(tempfile.mkdtemp(prefix="plangate-bench-pg-"))
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    if owner is not None:
        pw = pwd.getpwnam(owner)
        os.chown(root, pw.pw_uid, pw.pw_gid)
        os.chown(sock, pw.pw_uid, pw.pw_gid)
    user = owner or pwd.getpwuid(os.geteuid()).pw_name
    run = {"check": True, "capture_output": True, "cwd": "/"}
    subprocess.run(
        _as_owner(
            [_bin("initdb"), "-D", str(data), "-U", user, "-A", "trust", "-E", "UTF8"], owner
        ),
        **run,  # type: ignore[call-overload]
    )
    options = f"-k {sock} -c listen_addresses=''"
    start = [_bin("pg_ctl"), "-D", str(data), "-w", "-s", "-l", str(root / "log"), "-o", options]
    subprocess.run(_as_owner([*start, "start"], owner), **run)  # type: ignore[call-overload]
    try:
        yield Server(f"postgresql:///postgres?host={sock}&user={user}", data)
    finally:
        stop = [_bin("pg_ctl"), "-D", str(data), "-m", "fast", "-s", "stop"]
        subprocess.run(_as_owner(stop, owner), capture_output=True, cwd="/")
        shutil.rmtree(root, ignore_errors=True)


async def _fresh_database(server: Server, name: str) -> str:
    import asyncpg

    admin = await asyncpg.connect(server.url)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    return server.url.replace("/postgres?", f"/{name}?")


@dataclass(frozen=True)
class Cost:
    wall_s: float
    cpu_s: float  # plangate's process
    server_s: float  # PostgreSQL's processes (0 for SQLite)

    def per(self, n: int) -> tuple[float, float, float]:
        """Per operation: operations per second, own CPU ms, own + server CPU ms."""
        return n / self.wall_s, 1000 * self.cpu_s / n, 1000 * (self.cpu_s + self.server_s) / n


async def _measure(work: Callable[[], Awaitable[None]], server: Server | None) -> Cost:
    server_before = server.cpu_s() if server else 0.0
    cpu, wall = time.process_time(), time.perf_counter()
    await work()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return Cost(wall, cpu, (server.cpu_s() - server_before) if server else 0.0)


def _event(i: int) -> UserMessage:
    return UserMessage(text=f"message {i}: add a greeting module and its test")


async def appends(
    log: SqliteEventLog | PgEventLog, n: int, server: Server | None
) -> tuple[Cost, Cost]:
    """``n`` appends one after another on one session, then ``n`` over ten sessions at once."""

    async def serial() -> None:
        for i in range(n):
            await log.append("serial", [_event(i)])

    async def parallel() -> None:
        async def one(s: int) -> None:
            for i in range(n // 10):
                await log.append(f"parallel-{s}", [_event(i)])

        await asyncio.gather(*(one(s) for s in range(10)))

    await log.append("warm", [_event(0)])
    return await _measure(serial, server), await _measure(parallel, server)


async def two_replicas(url: str, n: int, server: Server) -> Cost:
    """The ten sessions' ``n`` appends again, five sessions through each of two pools: two
    replicas' connections to one database (one process: what is measured is the database's
    side of a second replica, not a second machine's cores)."""
    async with await PgDatabase.open(url) as a, await PgDatabase.open(url) as b:
        logs = (PgEventLog(a), PgEventLog(b))
        await logs[0].append("warm-a", [_event(0)])
        await logs[1].append("warm-b", [_event(0)])

        async def parallel() -> None:
            async def one(s: int) -> None:
                for i in range(n // 10):
                    await logs[s % 2].append(f"replicas-{s}", [_event(i)])

            await asyncio.gather(*(one(s) for s in range(10)))

        return await _measure(parallel, server)


async def commands(
    home: Path, n: int, url: str | None, server: Server | None, *, replica: str | None = None
) -> Cost:
    """``n`` chats each send ``/plan Add a greeting``; until each planning turn has ended.

    ``replica``: as one replica of several, holding each chat's lease, so every append and
    plan file write passes the lease fence (docs/storage.md, "Leases and fencing")."""
    workspace = home.parent / "work"
    workspace.mkdir(parents=True, exist_ok=True)
    model = ScriptedProvider([say("Planning noted.") for _ in range(4 * (n + 2))])
    config = EngineConfig(workspace=workspace, owner_ids=frozenset({OWNER}))
    async with open_plangate(
        home,
        model=model,
        channel=RecordingChannel(),
        config=config,
        database_url=url,
        replica=replica,
    ) as opened:
        engine = opened.engine
        await engine.start()
        try:
            if replica is not None:
                for i in range(n + 1):
                    held = await opened.storage.leases.acquire(f"tg:{i}", replica, 3600.0)
                    assert held is not None
            # The first command pays the imports and caches: not measured.
            sids = [await engine.session_for_chat(Chat.private(f"tg:{i}")) for i in range(n + 1)]
            await _plan(engine, sids[0])

            async def run() -> None:
                for sid in sids[1:]:
                    await _plan(engine, sid)

            return await _measure(run, server)
        finally:
            await engine.shutdown()


async def _plan(engine: object, sid: str) -> None:
    await engine.command(sid, "plan", "Add a greeting", actor=OWNER)  # type: ignore[attr-defined]
    agents = engine.agents  # type: ignore[attr-defined]
    while not agents.is_idle(sid):
        await agents.wait_idle(sid)
        await asyncio.sleep(0)


async def main_async(n_appends: int, n_commands: int, repeat: int) -> None:
    rows: dict[str, list[tuple[float, float, float]]] = {}

    def add(name: str, value: tuple[float, float, float]) -> None:
        rows.setdefault(name, []).append(value)

    with postgres_server() as server, tempfile.TemporaryDirectory() as tmp:
        for r in range(repeat):
            folder = Path(tmp) / f"r{r}"
            async with await Database.open(folder / "appends.db") as db:
                serial, parallel = await appends(SqliteEventLog(db), n_appends, None)
            add("sqlite appends, one session", serial.per(n_appends))
            add("sqlite appends, ten sessions", parallel.per(n_appends))
            url = await _fresh_database(server, f"appends{r}")
            async with await PgDatabase.open(url) as pg:
                serial, parallel = await appends(PgEventLog(pg), n_appends, server)
            add("postgres appends, one session", serial.per(n_appends))
            add("postgres appends, ten sessions", parallel.per(n_appends))
            add(
                "postgres appends, two replicas",
                (await two_replicas(url, n_appends, server)).per(n_appends),
            )
            cost = await commands(folder / "sqlite" / "home", n_commands, None, None)
            add("sqlite /plan command", cost.per(n_commands))
            url = await _fresh_database(server, f"commands{r}")
            cost = await commands(folder / "pg" / "home", n_commands, url, server)
            add("postgres /plan command", cost.per(n_commands))
            url = await _fresh_database(server, f"fenced{r}")
            home = folder / "fenced" / "home"
            cost = await commands(home, n_commands, url, server, replica="bench-replica")
            add("postgres /plan command, fenced", cost.per(n_commands))

    med = {k: tuple(statistics.median(x[i] for x in v) for i in range(3)) for k, v in rows.items()}
    print(f"{'figure':34} {'per s':>9} {'own CPU ms':>11} {'+server ms':>11}")
    for name, (rate, own, total) in med.items():
        print(f"{name:34} {rate:9.0f} {own:11.3f} {total:11.3f}")
    for what in ("appends, one session", "appends, ten sessions", "/plan command"):
        pg, lite = med[f"postgres {what}"], med[f"sqlite {what}"]
        print(
            f"postgres/sqlite, {what}: rate {pg[0] / lite[0]:.2f}x, own CPU {pg[1] / lite[1]:.2f}x,"
            f" CPU with the server {pg[2] / lite[2]:.2f}x"
        )
    pg, lite = med["postgres /plan command, fenced"], med["sqlite /plan command"]
    print(
        f"postgres/sqlite, /plan command as a replica holding the lease: rate "
        f"{pg[0] / lite[0]:.2f}x, own CPU {pg[1] / lite[1]:.2f}x, CPU with the server "
        f"{pg[2] / lite[2]:.2f}x"
    )
    two, one = med["postgres appends, two replicas"], med["postgres appends, ten sessions"]
    print(
        f"two replicas/one, ten sessions' appends: rate {two[0] / one[0]:.2f}x,"
        f" CPU with the server {two[2] / one[2]:.2f}x"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--appends", type=int, default=2000)
    parser.add_argument("--commands", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    asyncio.run(main_async(args.appends, args.commands, args.repeat))


if __name__ == "__main__":
    main()
