"""Many chats at once: a burst of commands, a thousand chats, start-up with a thousand sessions.

Run: ``python -m bench.chats [--burst-chats N] [--chats N] [--profile PART]``.

Everything real except Telegram and the model, as in ``bench.telegram``: python-telegram-bot
polls the fake Bot API (``tests/fakebot/server.py``) over loopback, the engine is
``open_plangate`` over SQLite and plan files in a temporary home, the model is the scripted
provider answering at once. The bare side is a PTB ``Application`` with one handler that
answers a fixed text through ``reply_text``, polling a second fake with the same settings.
Plangate runs with its deliberate pacing off (no per-chat interval, no rate limits), so the
ratios are CPU and I/O cost, not the waits that keep a chat under Telegram's flood limits.

1. Burst: N owners' private chats (default 100) each send three ``/status`` at once (all
   injected before the first poll answers); the time until the fake has every reply, plangate
   against the bare handler, one run each, bare first. The chats are new: plangate creates
   and binds their sessions inside the burst.
2. A thousand chats (``--chats``) each send one message to the agent at once; the time until
   every chat has its reply, against the bare handler answering the same messages. Then the
   bot is stopped, started again on the same home, and every chat sends a second message
   (the sessions now exist, unloaded). RSS of the process after each (the fake servers and the
   bare side live in the same process: the figure before plangate started is printed too).
3. Start-up with the thousand bound sessions of part 2: from opening the storage to the
   fake's first ``getUpdates``, measured on that restart.

``--profile burst|chats`` runs that part under cProfile and prints the top functions by
cumulative and by own time. Ratios, not absolute times, are the result; nothing asserts on
speed.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import logging
import pstats
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from telegram import Update
from telegram.ext import (
    Application,
    CommandHandler,
    ContextTypes,
    MessageHandler,
    filters,
)

from bench.telegram import (
    ALLOWED_UPDATES,
    BARE_TEXT,
    POLL_INTERVAL_S,
    POLL_TIMEOUT_S,
    PacedModel,
    Settings,
    close_plangate_app,
    fake_server,
    plangate_application,
    stop_polling,
)
from bot.channels import ChannelQueue
from bot.compose import open_plangate
from bot.telegram.app import parts, prepare
from bot.telegram.channel import TELEGRAM_LIMITS
from engine.app import EngineConfig
from engine.model.script import say
from tests.fakebot.server import FakeBotApi

FIRST_OWNER = 500_000
AGENT_REPLY = "Done."
AnyApp = Application[Any, Any, Any, Any, Any, Any]


def rss_mb() -> float:
    """This process's resident set size now, in MB (Linux ``/proc``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Replies:
    """Counts the bot's ``sendMessage`` calls on a fake from now on; each check reads only the
    calls made since the last one (the fake re-checks a wait on every call)."""

    def __init__(self, api: FakeBotApi) -> None:
        self.api = api
        self._seen = len(api.calls)
        self.count = 0

    def at_least(self, n: int) -> Callable[[], bool]:
        def check() -> bool:
            calls = self.api.calls
            for call in calls[self._seen :]:
                if call.method == "sendMessage":
                    self.count += 1
            self._seen = len(calls)
            return self.count >= n

        return check


async def burst(
    api: FakeBotApi, chats: list[int], per_chat: int, text: str, *, timeout_s: float = 600
) -> float:
    """Inject ``per_chat`` messages ``text`` from each chat's owner at once; seconds until the
    fake has one reply per message."""
    gc.collect()
    replies = Replies(api)
    start = time.perf_counter()
    for _ in range(per_chat):
        for chat in chats:
            api.user_message(chat, chat, text)
    await api.wait_for(replies.at_least(per_chat * len(chats)), timeout_s=timeout_s)
    return time.perf_counter() - start


async def check_answers(api: FakeBotApi, chats: list[int], want: str, per_chat: int) -> None:
    """Every chat gets ``per_chat`` answers containing ``want`` (checked, not timed; the fake
    records a call as it arrives, a moment before it stores the message)."""

    def answered(chat: int) -> int:
        got = [m.text or "" for m in api.chat(chat).messages.values() if m.from_bot]
        return sum(want in t for t in got)

    try:
        await api.wait_for(lambda: all(answered(c) >= per_chat for c in chats), timeout_s=30)
    except TimeoutError:
        short = [c for c in chats if answered(c) < per_chat]
        raise AssertionError(f"{len(short)} chats lack an answer, e.g. chat {short[0]}") from None


async def start_app(app: AnyApp) -> None:
    await app.initialize()
    assert app.updater is not None
    await app.updater.start_polling(
        poll_interval=POLL_INTERVAL_S,
        timeout=POLL_TIMEOUT_S,
        allowed_updates=list(ALLOWED_UPDATES),
        drop_pending_updates=False,
    )
    await app.start()


@asynccontextmanager
async def bare_bot(api: FakeBotApi) -> AsyncIterator[AnyApp]:
    """Bare PTB answering ``/status`` and any text with a fixed text."""

    async def reply(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        assert update.effective_message is not None
        await update.effective_message.reply_text(BARE_TEXT)

    app = (
        Application.builder()
        .token(api.token)
        .base_url(api.base_url)
        .base_file_url(api.base_file_url)
        .job_queue(None)
        .build()
    )
    app.add_handler(CommandHandler("status", reply))
    app.add_handler(MessageHandler(filters.TEXT & ~filters.COMMAND, reply))
    await start_app(app)
    try:
        yield app
    finally:
        await stop_polling(app)


@dataclass
class Started:
    app: AnyApp
    startup_s: float
    model: PacedModel
    extra: dict[str, Any] = field(default_factory=dict)


@asynccontextmanager
async def plangate_bot(
    api: FakeBotApi, home: Path, owners: frozenset[int]
) -> AsyncIterator[Started]:
    """Plangate started the way ``bot.telegram.app.serve`` does it (storage, engine, application,
    ``prepare``, ``engine.start``, polling), pacing off; ``startup_s`` is from opening the
    storage to the fake's first ``getUpdates``."""
    polls_before = api.count("getUpdates")
    began = time.perf_counter()
    workspace = home / "work"
    workspace.mkdir(parents=True, exist_ok=True)
    model = PacedModel([say(AGENT_REPLY)] * 100_000, delay_s=0)
    slot = ChannelQueue(TELEGRAM_LIMITS)
    async with open_plangate(
        home / "home", model=model, channel=slot, config=EngineConfig(workspace=workspace)
    ) as opened:
        storage, engine = opened.storage, opened.engine
        settings = Settings(
            telegram_token=api.token,
            telegram_api_url=api.base_url,
            flow_edit_interval=0.0,
            owner_ids=owners,
        )
        app = plangate_application(settings, opened, shipped_pacing=False)
        delivering = asyncio.ensure_future(slot.deliver(parts(app).channel))
        await app.initialize()
        await prepare(app)
        await engine.start()
        assert app.updater is not None
        await app.updater.start_polling(
            poll_interval=POLL_INTERVAL_S,
            timeout=POLL_TIMEOUT_S,
            allowed_updates=list(ALLOWED_UPDATES),
            drop_pending_updates=False,
        )
        await api.wait_for(lambda: api.count("getUpdates") > polls_before, timeout_s=60)
        startup_s = time.perf_counter() - began
        await app.start()
        try:
            yield Started(app, startup_s, model, {"commits": storage.db})
        finally:
            await close_plangate_app(app, engine)
            delivering.cancel()


def profiled(enabled: bool) -> cProfile.Profile | None:
    if not enabled:
        return None
    profile = cProfile.Profile()
    profile.enable()
    return profile


def report(profile: cProfile.Profile | None) -> None:
    if profile is None:
        return
    profile.disable()
    stats = pstats.Stats(profile)
    stats.sort_stats("cumulative").print_stats(35)
    stats.sort_stats("tottime").print_stats(25)


async def part_burst(workdir: Path, n_chats: int, *, profile: bool) -> None:
    chats = list(range(FIRST_OWNER, FIRST_OWNER + n_chats))
    async with fake_server() as api, bare_bot(api):
        bare_s = await burst(api, chats, 3, "/status")
        await check_answers(api, chats, BARE_TEXT, 3)
    async with fake_server() as api, plangate_bot(api, workdir / "burst", frozenset(chats)) as pg:
        commits_before = pg.extra["commits"].commits
        calls_before = len(api.calls)
        prof = profiled(profile)
        pg_s = await burst(api, chats, 3, "/status")
        report(prof)
        commits = pg.extra["commits"].commits - commits_before
        methods = Counter(c.method for c in api.calls[calls_before:])
        await check_answers(api, chats, "Agent: idle", 3)
    total = 3 * n_chats
    print(
        f"  {n_chats} chats x 3 /status in one burst: plangate {pg_s:.2f} s "
        f"({total / pg_s:.0f} replies/s, {commits} commits), bare PTB {bare_s:.2f} s "
        f"({total / bare_s:.0f} replies/s): ratio {pg_s / bare_s:.2f}x (target <= 2x)"
    )
    print(f"  plangate's Bot API calls in the burst: {dict(methods)}")


async def part_chats(workdir: Path, n_chats: int, *, profile: bool) -> None:
    chats = list(range(FIRST_OWNER, FIRST_OWNER + n_chats))
    owners = frozenset(chats)
    home = workdir / "chats"
    async with fake_server() as api:
        async with bare_bot(api):
            bare_s = await burst(api, chats, 1, "hello")
        await check_answers(api, chats, BARE_TEXT, 1)
    before_mb = rss_mb()
    async with fake_server() as api:
        async with plangate_bot(api, home, owners) as pg:
            fresh_startup = pg.startup_s
            prof = profiled(profile)
            calls_before = len(api.calls)
            new_s = await burst(api, chats, 1, "hello")
            report(prof)
            methods = Counter(c.method for c in api.calls[calls_before:])
            await check_answers(api, chats, AGENT_REPLY, 1)
            new_mb = rss_mb()
        async with plangate_bot(api, home, owners) as pg:
            restart_startup = pg.startup_s
            again_s = await burst(api, chats, 1, "hello again")
            await check_answers(api, chats, AGENT_REPLY, 2)
            again_mb = rss_mb()
    print(
        f"  {n_chats} chats, one message each to the agent: bare PTB {bare_s:.2f} s; "
        f"plangate, new sessions {new_s:.2f} s ({new_s / bare_s:.2f}x), after a restart "
        f"{again_s:.2f} s ({again_s / bare_s:.2f}x) (target <= 3x)"
    )
    print(f"  plangate's Bot API calls, first round: {dict(methods)}")
    print(
        f"  RSS: {before_mb:.0f} MB before plangate started (fakes, bare side), "
        f"{new_mb:.0f} MB after the first round, {again_mb:.0f} MB after the second "
        "(target <= 150 MB)"
    )
    print(
        f"  start-up to the first getUpdates: empty home {fresh_startup:.2f} s, "
        f"{n_chats} bound sessions {restart_startup:.2f} s (target < 3 s)"
    )


async def main_async(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="plangate-bench-chats-") as tmp:
        workdir = Path(tmp)
        if args.burst_chats > 0:
            print("1. Burst of /status (pacing off)")
            await part_burst(workdir, args.burst_chats, profile=args.profile == "burst")
        if args.chats > 0:
            print("2./3. Many chats, a restart, start-up (pacing off)")
            await part_chats(workdir, args.chats, profile=args.profile == "chats")


def main(argv: list[str] | None = None) -> None:
    """Parse the options and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--burst-chats", type=int, default=100, help="part 1 (0 skips it)")
    parser.add_argument("--chats", type=int, default=1000, help="parts 2 and 3 (0 skips them)")
    parser.add_argument("--profile", choices=("burst", "chats"), help="cProfile one part")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
