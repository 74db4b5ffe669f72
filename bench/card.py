"""The plan card's call budget in a group, measured in one run (figures, not asserts).

A design plan of N steps goes from ``/plan`` to a settled review card, is approved with one
press and runs to Done with no further message, in an owner-only supergroup where the fake Bot
API enforces Telegram's 20 calls a minute and the outbox paces as shipped. Printed: the calls
from ``/plan`` to the settled review, and the calls per plan state change of the run.
Counted: every Bot API call but ``getUpdates``, ``answerCallbackQuery`` and
``sendChatAction`` (Telegram does not count those against a group).

    python -m bench.card [--tasks 50 200] [--model-delay 0.0]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.telegram import GROUP, OWNER, PacedModel, fake_server, start_polling, stop_polling
from bot.channels import ChannelQueue
from bot.compose import open_plangate
from bot.telegram.app import build_application, parts, prepare
from bot.telegram.channel import TELEGRAM_LIMITS
from bot.telegram.keys import engine_chat, tg_flow
from engine.app import EngineConfig
from engine.events import PlanChanged
from engine.model.script import ScriptedCall, ScriptStep, call, say
from tests.fakebot.server import FakeBotApi

NOT_COUNTED = {"getUpdates", "answerCallbackQuery", "sendChatAction"}


@dataclass
class Settings:
    """What ``build_application`` reads, with the shipped card intervals."""

    telegram_token: str
    telegram_api_url: str
    flow_edit_interval: float = 1.5
    flow_group_edit_interval: float = 6.0
    owner_ids: frozenset[int] = frozenset({OWNER})
    allowed_chat_ids: frozenset[int] = frozenset({GROUP})
    webhook_url: str | None = None
    webhook_secret: str | None = None
    webhook_listen: str | None = None


def plan_md(steps: int) -> str:
    """A template B plan of ``steps`` numbered steps, each with a Done when line."""
    lines = [
        f"{i}. Step {i} — do part {i}.\n   - Done when: part {i} exists"
        for i in range(1, steps + 1)
    ]
    return (
        "# Many parts\n\n## Context\n- **Problem:** many parts.\n- **Target state:** all parts.\n"
        "- **Intent:** the owner asked.\n\n## Implementation steps\n" + "\n".join(lines) + "\n"
    )


def script(steps: int) -> list[ScriptStep]:
    """Plan (init, write, submit), then one model step per task (start + complete)."""
    one = ScriptStep(
        tool_calls=(
            ScriptedCall("plan", {"op": "start"}),
            ScriptedCall("plan", {"op": "complete", "evidence": "done"}),
        )
    )
    return [
        call("plan", {"op": "init", "title": "Many parts", "mode": "design"}),
        call("write_file", {"path": "{plan_md}", "content": plan_md(steps)}),
        call("plan", {"op": "submit"}),
        say("The plan is ready for review."),
        *([one] * steps),
        say(f"All {steps} tasks done."),
    ]


@dataclass
class CardRun:
    tasks: int
    review_calls: Counter[str]
    run_calls: Counter[str]
    changes: int
    run_s: float
    group_429s: int

    @property
    def per_change(self) -> float:
        return sum(self.run_calls.values()) / max(1, self.changes)


def counted(api: FakeBotApi, since: int) -> Counter[str]:
    return Counter(c.method for c in api.calls[since:] if c.method not in NOT_COUNTED)


async def card_run(tasks: int, *, model_delay_s: float, workdir: Path) -> CardRun:
    """One plan of ``tasks`` steps from /plan to Done in a paced group."""
    (workdir / "work").mkdir(parents=True, exist_ok=True)
    slot = ChannelQueue(TELEGRAM_LIMITS)
    async with (
        fake_server(group_limit=20) as api,
        open_plangate(
            workdir / "home",
            model=PacedModel(script(tasks), delay_s=model_delay_s),
            channel=slot,
            config=EngineConfig(workspace=workdir / "work"),
        ) as opened,
    ):
        storage, engine = opened.storage, opened.engine
        settings = Settings(telegram_token=api.token, telegram_api_url=api.base_url)
        app = build_application(settings, engine, db_meta=storage.db)
        delivering = asyncio.ensure_future(slot.deliver(parts(app).channel))
        try:
            await start_polling(app)
            await prepare(app)
            await engine.start()
            first = len(api.calls)
            api.user_message(GROUP, OWNER, "/plan Many parts")
            await api.wait_for(
                lambda: any("Ready for review" in m.text for m in api.bot_messages(GROUP)),
                timeout_s=120,
            )
            sid = await engine.session_for_chat(engine_chat((GROUP, 0)))
            await engine.agents.wait_idle(sid)
            await asyncio.wait_for(parts(app).presenter.flush(), 120)
            review_calls = counted(api, first)
            data = await engine.plan_card(sid)
            assert data.sidecar is not None
            card_id = tg_flow(data.sidecar.flow).card_id  # the card's key as Telegram's id
            assert card_id is not None
            card = api.message(GROUP, card_id)
            approve = next(d for row in card.buttons for t, d in row if t == "✅ Approve")
            seq = len(await storage.log.read(sid))
            first = len(api.calls)
            start = time.perf_counter()
            api.press(GROUP, card.message_id, approve, user_id=OWNER)
            # The last task can end a turn at the step cap: the card's Done is the end.
            await api.wait_for(
                lambda: f"{tasks}/{tasks}" in api.message(GROUP, card.message_id).text,
                timeout_s=600 + 4 * tasks * model_delay_s,
            )
            await engine.agents.wait_idle(sid)
            await asyncio.wait_for(parts(app).presenter.flush(), 120)
            run_s = time.perf_counter() - start
            events = [s.event for s in await storage.log.read(sid)][seq:]
            changes = sum(isinstance(e, PlanChanged) for e in events)
            done = api.message(GROUP, card.message_id)
            assert "Done" in done.text and f"{tasks}/{tasks}" in done.text, done.text
            return CardRun(tasks, review_calls, counted(api, first), changes, run_s, api.group_429s)
        finally:
            await engine.shutdown()
            bp = parts(app)
            await asyncio.wait_for(bp.presenter.flush(), 60)
            await stop_polling(app)
            await bp.presenter.aclose()
            await bp.outbox.aclose()
            delivering.cancel()


def show(run: CardRun) -> None:
    def by(calls: Counter[str]) -> str:
        return ", ".join(f"{m} {n}" for m, n in sorted(calls.items()))

    print(f"  {run.tasks}-step plan:")
    review = sum(run.review_calls.values())
    print(f"    /plan to settled review: {review} calls ({by(run.review_calls)})")
    print(
        f"    approve to Done: {sum(run.run_calls.values())} calls ({by(run.run_calls)}) "
        f"for {run.changes} plan changes in {run.run_s:.1f} s"
    )
    print(f"    calls per plan state change: {run.per_change:.3f} (target at most 0.5)")
    print(f"    429s the fake returned: {run.group_429s}")


async def main_async(tasks: Sequence[int], model_delay_s: float) -> None:
    print(
        "The plan card in an owner-only group: the fake enforces 20 calls/min, shipped pacing "
        f"(1 call/s per chat, 20/min per group, progress edits every 6 s); model delay "
        f"{model_delay_s} s per call"
    )
    with tempfile.TemporaryDirectory(prefix="plangate-card-") as tmp:
        for n in tasks:
            show(await card_run(n, model_delay_s=model_delay_s, workdir=Path(tmp) / f"run{n}"))


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the options and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tasks", type=int, nargs="+", default=[50, 200])
    parser.add_argument("--model-delay", type=float, default=0.0, help="seconds per model call")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(main_async(args.tasks, args.model_delay))


if __name__ == "__main__":
    main()
