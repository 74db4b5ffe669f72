"""Telegram benchmarks (docs/bench.md): command overhead, and Bot API calls per plan change.

Run: ``python -m bench.telegram [--commands N] [--tasks T] [--model-delay S]``.

Everything is real except Telegram and the model: python-telegram-bot's ``Application``
polls the fake Bot API server (``tests/fakebot/server.py``) over loopback HTTP, the engine is
``build_engine`` over SQLite and plan files in a temporary home, and the model is the scripted
provider (``engine/model/scripted.py``).

1. Command overhead. The owner sends N commands in a private chat, one at a time: each is
   injected into the fake, PTB fetches it with ``getUpdates``, the handler runs, and the
   command counts as done when the fake has received its last Bot API call (``/status``: the
   reply's ``sendMessage``; ``/show-plan`` with a live checklist: the new card's
   ``pinChatMessage``, after its ``sendMessage``, the old card's keyboard strip and unpin).
   The baseline is a bare PTB ``Application`` with one ``CommandHandler`` that answers with a
   fixed text through ``reply_text``, on a second fake, polled with the same settings. Both
   applications run at once and take turns in blocks, so a burst of load on a shared machine
   hits both (with a pause between blocks, so neither side's background work is timed as the
   other's); the ratio is plangate's mean time per command over the bare one's, and each
   command's CPU (this process, all threads) is printed beside it. The
   plangate side runs with its pacing off (no per-chat interval, no rate limits, no edit
   interval), so the ratio is CPU and I/O overhead, not the deliberate waits.
2. Calls per plan change. The owner asks for a checklist; the scripted model inits a
   checklist of T tasks and starts and completes each, then replies. Counted: the Bot API
   calls the fake received after the owner's message (``getUpdates`` left out: polling is
   not caused by the run), by method, against the ``plan/changed`` events in the session's
   log. The first run is the target: an owner-only group (allowed by id; the owner mentions
   the bot), the shipped pacing (``flow_edit_interval`` 1.5 s, one call per chat per second,
   20 calls per rolling minute per group, AIORateLimiter), and a fake that enforces
   Telegram's group limit (20 messages per minute) and counts the 429s it answers, which
   must be none. Then the private chat: the shipped pacing, and the tests' fast pacing
   (``flow_edit_interval`` 0.05 s, no chat interval), at ``--model-delay`` seconds per model
   call (default 0.05 s, a very fast model) and with no delay. ``--group-only`` runs the
   group row alone (with a slower ``--model-delay`` it shows the window at work).

Ratios, not absolute times, are the result; nothing asserts on speed.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from telegram import Update
from telegram.ext import AIORateLimiter, Application, CommandHandler, ContextTypes

from bot.channels import ChannelQueue
from bot.compose import Plangate as Opened
from bot.compose import open_plangate
from bot.telegram.app import ALLOWED_UPDATES, build_application, drain, parts, prepare
from bot.telegram.channel import TELEGRAM_LIMITS
from bot.telegram.keys import engine_chat
from engine.app import Engine, EngineConfig
from engine.model.script import ScriptStep, call, say
from engine.model.scripted import ScriptedProvider
from engine.model.types import ModelReply
from storage.open import Storage
from tests.fakebot.server import FakeBotApi, FakeChat

OWNER = 1001
GROUP = -1001234  # an owner-only supergroup, allowed by id (part 2)
BARE_TEXT = "Idle. No plan, no goal."
# The polling both applications use (the tests' settings; updates wake the poll at once).
POLL_INTERVAL_S = 0.0
POLL_TIMEOUT_S = 1
FAST_EDIT_S = 0.05
SHIPPED_EDIT_S = 1.5
SHIPPED_CHAT_INTERVAL_S = 1.0
# Between blocks: longer than the update_id flush window (bot.telegram.handlers), so neither
# side's background work is timed as the other's.
SETTLE_S = 0.5

AnyApp = Application[Any, Any, Any, Any, Any, Any]


@dataclass
class Settings:
    """The BotSettings ``build_application`` reads (the owner's private chat is allowed)."""

    telegram_token: str
    telegram_api_url: str
    flow_edit_interval: float
    owner_ids: frozenset[int] = frozenset({OWNER})
    allowed_chat_ids: frozenset[int] = frozenset({GROUP})
    webhook_url: str | None = None
    webhook_secret: str | None = None
    webhook_listen: str | None = None


class PacedModel:
    """The scripted provider, answering after ``delay_s`` (a model that takes some time)."""

    def __init__(self, script: Sequence[ScriptStep], *, delay_s: float) -> None:
        self.inner = ScriptedProvider(list(script))
        self.delay_s = delay_s

    async def complete(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        *,
        max_tokens: int | None = None,
    ) -> ModelReply:
        """The next scripted reply, after the delay."""
        if self.delay_s > 0:
            await asyncio.sleep(self.delay_s)
        return await self.inner.complete(messages, tools, max_tokens=max_tokens)


def checklist_script(tasks: int) -> list[ScriptStep]:
    """A checklist init of ``tasks`` tasks, a start and a complete for each, a final reply."""
    specs = [{"title": f"Task {i + 1}", "description": f"Do step {i + 1}."} for i in range(tasks)]
    steps: list[ScriptStep] = [
        call(
            "plan", {"op": "init", "title": "Bench checklist", "mode": "checklist", "tasks": specs}
        )
    ]
    for i in range(tasks):
        steps.append(call("plan", {"op": "start"}))
        steps.append(call("plan", {"op": "complete", "evidence": f"step {i + 1} done"}))
    steps.append(say(f"All {tasks} tasks done."))
    return steps


@asynccontextmanager
async def fake_server(*, group_limit: int | None = None) -> AsyncIterator[FakeBotApi]:
    """A started fake Bot API server (enforcing ``group_limit`` per minute), stopped on exit."""
    api = FakeBotApi(group_limit_per_minute=group_limit)
    await api.start()
    try:
        yield api
    finally:
        await api.stop()


async def start_polling(app: AnyApp) -> None:
    """Initialize and start ``app`` polling with the settings both sides share."""
    await app.initialize()
    assert app.updater is not None
    await app.updater.start_polling(
        poll_interval=POLL_INTERVAL_S,
        timeout=POLL_TIMEOUT_S,
        allowed_updates=list(ALLOWED_UPDATES),
        drop_pending_updates=False,
    )
    await app.start()


async def stop_polling(app: AnyApp) -> None:
    """Stop ``app`` (updater, then application) and shut it down."""
    assert app.updater is not None
    await asyncio.wait_for(app.updater.stop(), 10)
    await asyncio.wait_for(app.stop(), 10)
    await app.shutdown()


@dataclass
class Plangate:
    app: AnyApp
    engine: Engine
    storage: Storage


@asynccontextmanager
async def plangate_bot(
    api: FakeBotApi,
    home: Path,
    model: Any,
    *,
    flow_edit_interval: float,
    shipped_pacing: bool,
    max_steps: int = 50,
) -> AsyncIterator[Plangate]:
    """The real engine over real storage and the real application, polling ``api``."""
    workspace = home / "work"
    workspace.mkdir(parents=True, exist_ok=True)
    slot = ChannelQueue(TELEGRAM_LIMITS)
    async with open_plangate(
        home / "home",
        model=model,
        channel=slot,
        config=EngineConfig(workspace=workspace, max_steps=max_steps),
    ) as opened:
        storage, engine = opened.storage, opened.engine
        settings = Settings(
            telegram_token=api.token,
            telegram_api_url=api.base_url,
            flow_edit_interval=flow_edit_interval,
        )
        app = plangate_application(settings, opened, shipped_pacing=shipped_pacing)
        delivering = asyncio.ensure_future(slot.deliver(parts(app).channel))
        await start_polling(app)
        await prepare(app)
        await engine.start()
        try:
            yield Plangate(app, engine, storage)
        finally:
            await close_plangate_app(app, engine)
            delivering.cancel()


def plangate_application(settings: Settings, opened: Opened, *, shipped_pacing: bool) -> AnyApp:
    """The real application on an opened plangate; without ``shipped_pacing`` nothing is
    paced (no rate limiter, no per-chat interval, no group window)."""
    if shipped_pacing:
        return build_application(settings, opened.engine, db_meta=opened.storage.db)
    return build_application(
        settings,
        opened.engine,
        db_meta=opened.storage.db,
        rate_limiter=AIORateLimiter(overall_max_rate=0, group_max_rate=0),
        chat_interval_s=0.0,
        group_per_minute=1_000_000,
    )


async def close_plangate_app(app: AnyApp, engine: Engine) -> None:
    """Shut down the way ``bot.telegram.app.serve`` does: the engine, the cards, polling,
    the outbox."""
    await engine.shutdown()
    bp = parts(app)
    # Every rendering task (the last update_id write among them) ends before the db closes.
    await asyncio.wait_for(drain(app), 30)
    await stop_polling(app)
    await bp.presenter.aclose()
    await bp.outbox.aclose()


def bare_application(api: FakeBotApi) -> AnyApp:
    """Bare PTB: one CommandHandler per command, each replying with a fixed text."""

    async def reply(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """Answer with the fixed text."""
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
    app.add_handler(CommandHandler(["status", "show_plan", "show"], reply))
    return app


# ---- part 1: command overhead ---------------------------------------------------------------

Done = Callable[[FakeBotApi, FakeChat, int, int], bool]


def replied(api: FakeBotApi, chat: FakeChat, message_id: int, first_call: int) -> bool:
    """The bot's message right after the command's is there (the reply)."""
    reply = chat.messages.get(message_id + 1)
    return reply is not None and reply.from_bot


def card_pinned(api: FakeBotApi, chat: FakeChat, message_id: int, first_call: int) -> bool:
    """The new card (the bot's next message) has been pinned: the restick's last call."""
    target = message_id + 1
    return any(
        c.method == "pinChatMessage" and c.params.get("message_id") == target
        for c in api.calls[first_call:]
    )


async def one_command(api: FakeBotApi, text: str, done: Done) -> tuple[float, float]:
    """Inject ``text`` from the owner; the seconds until ``done`` holds on the fake, and the
    CPU seconds this process spent meanwhile (all threads: SQLite's included)."""
    chat = api.chat(OWNER)
    first_call = len(api.calls)
    start, cpu = time.perf_counter(), time.process_time()
    msg = api.user_message(OWNER, OWNER, text)
    await api.wait_for(lambda: done(api, chat, msg.message_id, first_call), timeout_s=10)
    return time.perf_counter() - start, time.process_time() - cpu


async def run_block(
    api: FakeBotApi, text: str, done: Done, count: int, wall: list[float], cpu: list[float]
) -> None:
    """``count`` commands, one after another; their wall and CPU times appended."""
    gc.collect()
    for _ in range(count):
        w, c = await one_command(api, text, done)
        wall.append(w)
        cpu.append(c)


def last_answer(api: FakeBotApi) -> str:
    """The text of the bot's answer to the owner's last message (checked, not timed)."""
    chat = api.chat(OWNER)
    asked = max(m.message_id for m in chat.messages.values() if not m.from_bot)
    return api.message(OWNER, asked + 1).text


@dataclass
class Overhead:
    command: str
    plangate_s: list[float]
    bare_s: list[float]
    calls_per_command: float
    plangate_cpu_s: list[float]
    bare_cpu_s: list[float]

    @property
    def ratio(self) -> float:
        return statistics.fmean(self.plangate_s) / statistics.fmean(self.bare_s)

    @property
    def median_ratio(self) -> float:
        # Robust to the few commands that hit a slow fsync on a busy disk.
        return statistics.median(self.plangate_s) / statistics.median(self.bare_s)

    @property
    def cpu_ratio(self) -> float:
        # This process's CPU per command: what the load of the other processes moves least.
        return statistics.fmean(self.plangate_cpu_s) / statistics.fmean(self.bare_cpu_s)


async def compare(
    pg: FakeBotApi,
    bare: FakeBotApi,
    text: str,
    done: Done,
    *,
    expect: str,
    count: int,
    blocks: int,
) -> Overhead:
    """``count`` commands on each side, in alternating blocks, after a short warm-up."""
    for _ in range(3):
        await one_command(pg, text, done)
        await one_command(bare, text, replied)
    per_block = max(1, count // blocks)
    pg_times: list[float] = []
    bare_times: list[float] = []
    pg_cpu: list[float] = []
    bare_cpu: list[float] = []
    calls_before = len(pg.calls) - pg.count("getUpdates")
    for _ in range(blocks):
        await run_block(pg, text, done, per_block, pg_times, pg_cpu)
        # Plangate's work after the last reply (the command/run record, the update_id flush)
        # ends before the bare side is timed: it would count as the bare side's CPU.
        await asyncio.sleep(SETTLE_S)
        await run_block(bare, text, replied, per_block, bare_times, bare_cpu)
        await asyncio.sleep(SETTLE_S)
    calls = len(pg.calls) - pg.count("getUpdates") - calls_before
    # Both sides answered what was asked (a wrong predicate would time nothing useful).
    assert expect in last_answer(pg), last_answer(pg)
    assert last_answer(bare) == BARE_TEXT
    return Overhead(text, pg_times, bare_times, calls / len(pg_times), pg_cpu, bare_cpu)


async def command_overhead(*, count: int, blocks: int, workdir: Path) -> list[Overhead]:
    """Part 1: /status, then /show-plan with a live 3-task checklist."""
    script = [
        call(
            "plan",
            {
                "op": "init",
                "title": "Bench",
                "mode": "checklist",
                "tasks": [{"title": "One"}, {"title": "Two"}, {"title": "Three"}],
            },
        ),
        say("The checklist is ready."),
    ]
    async with (
        fake_server() as pg_api,
        fake_server() as bare_api,
        plangate_bot(
            pg_api,
            workdir / "overhead",
            ScriptedProvider(script),
            flow_edit_interval=0.0,
            shipped_pacing=False,
        ) as live,
    ):
        bare = bare_application(bare_api)
        await start_polling(bare)
        try:
            results = [
                await compare(
                    pg_api,
                    bare_api,
                    "/status",
                    replied,
                    expect="Plan: none",
                    count=count,
                    blocks=blocks,
                )
            ]
            # A live checklist, so /show-plan reposts the card (the heavy read-only path).
            pg_api.user_message(OWNER, OWNER, "make a checklist")
            await pg_api.wait_for(
                lambda: any(
                    # startswith: a private chat's reply carries the usage footer
                    m.text.startswith("The checklist is ready.")
                    for m in pg_api.bot_messages(OWNER)
                ),
                timeout_s=20,
            )
            sid = await live.engine.session_for_chat(engine_chat((OWNER, 0)))
            await live.engine.agents.wait_idle(sid)
            await parts(live.app).presenter.flush()
            results.append(
                await compare(
                    pg_api,
                    bare_api,
                    "/show-plan",
                    card_pinned,
                    expect="Bench",
                    count=count,
                    blocks=blocks,
                )
            )
        finally:
            await stop_polling(bare)
    return results


# ---- part 2: calls per plan change ------------------------------------------------------------


@dataclass(frozen=True)
class Pacing:
    """One configuration of part 2."""

    label: str
    chat_id: int  # GROUP (the owner mentions the bot) or OWNER (the private chat)
    flow_edit_interval_s: float
    shipped: bool  # shipped outbox pacing and AIORateLimiter, else the tests' (no waits)
    model_delay_s: float
    group_limit: int | None = None  # the fake enforces Telegram's group limit per minute


@dataclass
class CallCount:
    pacing: Pacing
    calls: Counter[str]
    plan_changes: int
    run_s: float
    refused_429: int  # 429s the fake's group limit answered

    @property
    def total(self) -> int:
        return sum(self.calls.values())

    @property
    def ratio(self) -> float:
        return self.total / self.plan_changes


def pacings(model_delay_s: float) -> list[Pacing]:
    """The group with shipped pacing and the limit on (the target); then the private chat:
    shipped pacing, the tests' edit interval at the same model speed, and with no delay."""
    return [
        Pacing("group, shipped pacing", GROUP, SHIPPED_EDIT_S, True, model_delay_s, 20),
        Pacing("private, shipped pacing", OWNER, SHIPPED_EDIT_S, True, model_delay_s),
        Pacing("private, tests' pacing", OWNER, FAST_EDIT_S, False, model_delay_s),
        Pacing("private, tests' pacing, instant model", OWNER, FAST_EDIT_S, False, 0.0),
    ]


async def checklist_run(*, tasks: int, pacing: Pacing, workdir: Path) -> CallCount:
    """Part 2: one checklist run of ``tasks`` tasks; Bot API calls against plan changes."""
    model = PacedModel(checklist_script(tasks), delay_s=pacing.model_delay_s)
    final = f"All {tasks} tasks done."
    chat_id = pacing.chat_id
    async with fake_server(group_limit=pacing.group_limit) as api:
        async with plangate_bot(
            api,
            workdir,
            model,
            flow_edit_interval=pacing.flow_edit_interval_s,
            shipped_pacing=pacing.shipped,
            max_steps=2 * tasks + 10,
        ) as live:
            first_call = len(api.calls)
            start = time.perf_counter()
            ask = f"Run a checklist of {tasks} tasks."
            # In a group the agent hears the owner only when the bot is addressed.
            text = ask if chat_id > 0 else f"@{api.username} {ask}"
            api.user_message(chat_id, OWNER, text)
            # Bounded, with room for the model's delay on each of its 2 * T + 2 calls.
            limit_s = 120 + 2 * (2 * tasks + 2) * pacing.model_delay_s
            await api.wait_for(
                lambda: any(m.text.startswith(final) for m in api.bot_messages(chat_id)),
                timeout_s=limit_s,
            )
            sid = await live.engine.session_for_chat(engine_chat((chat_id, 0)))
            await live.engine.agents.wait_idle(sid)
            await asyncio.wait_for(parts(live.app).presenter.flush(), 120)
            run_s = time.perf_counter() - start
            changes = await live.storage.log.read(sid, types=["plan/changed"])
            card = await live.engine.plan_card(sid)
            # The run really finished the plan, and one card on the fake says so.
            assert card.state == "done", card.state
            cards = [m.text for m in api.bot_messages(chat_id) if "Bench checklist" in m.text]
            assert len(cards) == 1 and f"{tasks}/{tasks}" in cards[0], cards
            assert "Done" in cards[0], cards
        calls = Counter(c.method for c in api.calls[first_call:] if c.method != "getUpdates")
    return CallCount(pacing, calls, len(changes), run_s, api.group_429s)


# ---- output ---------------------------------------------------------------------------------


def ms(values: Sequence[float]) -> str:
    mean_ms = statistics.fmean(values) * 1000
    return f"mean {mean_ms:.2f} ms, median {statistics.median(values) * 1000:.2f} ms"


def print_overhead(o: Overhead) -> None:
    print(f"  {o.command}: {len(o.plangate_s)} commands each side")
    print(
        f"    plangate (engine + application): {ms(o.plangate_s)}, "
        f"{o.calls_per_command:.1f} Bot API calls each"
    )
    print(f"    bare PTB CommandHandler reply:   {ms(o.bare_s)}, 1 Bot API call each")
    print(f"    ratio plangate / bare (means):   {o.ratio:.2f}x (medians: {o.median_ratio:.2f}x)")
    pg_cpu_ms = statistics.fmean(o.plangate_cpu_s) * 1000
    bare_cpu_ms = statistics.fmean(o.bare_cpu_s) * 1000
    print(
        f"    CPU per command (this process):  plangate {pg_cpu_ms:.2f} ms, bare "
        f"{bare_cpu_ms:.2f} ms, ratio {o.cpu_ratio:.2f}x"
    )


def print_calls(c: CallCount, tasks: int) -> None:
    by_method = ", ".join(f"{m} {n}" for m, n in sorted(c.calls.items()))
    p = c.pacing
    outbox = "1 call/s per chat + AIORateLimiter" if p.shipped else "no outbox waits"
    if p.shipped and p.chat_id < 0:
        outbox += " + 20 calls/min per group"
    limit = f"fake enforces {p.group_limit}/min per group" if p.group_limit else "no fake limit"
    print(
        f"  {p.label}: flow_edit_interval {p.flow_edit_interval_s} s, {outbox}, "
        f"model delay {p.model_delay_s} s per call, {limit}; run {c.run_s:.1f} s"
    )
    print(f"    Bot API calls: {c.total} ({by_method})")
    print(f"    plan/changed events: {c.plan_changes} (init + {tasks} starts + {tasks} completes)")
    print(f"    ratio calls / plan changes: {c.ratio:.3f}")
    if p.group_limit:
        print(f"    429s the fake returned: {c.refused_429}")


async def main_async(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="plangate-bench-") as tmp:
        workdir = Path(tmp)
        if args.commands > 0:
            print(
                "1. Engine overhead per Telegram command "
                f"(pacing off; poll timeout {POLL_TIMEOUT_S} s)"
            )
            overhead = await command_overhead(
                count=args.commands, blocks=args.blocks, workdir=workdir
            )
            for o in overhead:
                print_overhead(o)
        if args.tasks <= 0:
            return
        print(f"2. Telegram calls for a {args.tasks}-task checklist run")
        selected = pacings(args.model_delay)
        if args.group_only:
            selected = selected[:1]
        for i, pacing in enumerate(selected):
            c = await checklist_run(tasks=args.tasks, pacing=pacing, workdir=workdir / f"run{i}")
            print_calls(c, args.tasks)


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the options and print both benchmarks."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--commands", type=int, default=300, help="commands per side (part 1; 0 skips it)"
    )
    parser.add_argument("--blocks", type=int, default=6, help="alternating blocks (part 1)")
    parser.add_argument(
        "--tasks", type=int, default=50, help="checklist tasks (part 2; 0 skips it)"
    )
    parser.add_argument("--model-delay", type=float, default=0.05, help="seconds per model call")
    parser.add_argument("--group-only", action="store_true", help="part 2: the group row only")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
