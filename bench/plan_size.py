"""The event loop's cost of drawing the review card of a 500 KB plan, before and after the
per-revision digest (docs/bench.md).

Run: ``python -m bench.plan_size [--kb K] [--draws N]``.

The plan is a real template B of about ``--kb`` KB (the default, 500, is just under the 512 KB
limit), taken to post-init Editing in a real engine over SQLite and plan files in a temporary
home. A draw is what the front end does for every card update: ``Engine.plan_card`` and the
presenter's ``plan_view`` (the plan is too long for one message, so the card lists its steps).

- **before**: what a draw cost before the digest, rebuilt from the same functions: template
  B validated on the loop at every draw (``validate_template_b``), the card built from the
  Markdown (steps extracted on the loop on the first draw, then from the card's text cache).
- **after**: ``plan_card`` + ``plan_view`` now; validation and steps come from the plan
  service's digest, made once per revision in a worker thread.

Both are the median of ``--draws`` draws at one revision. The first draw of a new revision is
measured too, as the longest stall of the event loop while it runs (a ticker task notes the
gaps), since that draw is where the parse happens.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.extract import make_plan
from bot.compose import open_plangate
from bot.telegram import cards, presenter
from bot.telegram.keys import engine_chat
from engine.agent.testing import RecordingChannel
from engine.app import EngineConfig
from engine.model.scripted import ScriptedProvider
from engine.plan.extract import validate_template_b


def plan_of_kb(kb: int) -> str:
    steps = 100
    while len(make_plan(steps).encode()) < kb * 1024:
        steps += 100
    while len(make_plan(steps).encode()) > kb * 1024:
        steps -= 5
    return make_plan(steps)


async def longest_stall(work: Callable[[], Awaitable[Any]]) -> float:
    """The longest gap between two ticks of a 1 ms ticker while ``work`` runs."""
    gaps: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    try:
        await work()
    finally:
        done.set()
        await tick
    return max(gaps, default=0.0)


async def run(kb: int, draws: int) -> dict[str, float]:
    md = plan_of_kb(kb)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "work"
        work.mkdir()
        async with open_plangate(
            Path(tmp) / "home",
            model=ScriptedProvider([]),
            channel=RecordingChannel(),
            config=EngineConfig(workspace=work),
        ) as opened:
            engine = opened.engine
            plans = engine.plans
            sid = await engine.session_for_chat(engine_chat((-100, 0)))
            assert (await plans.enter_pre_init(sid)).ok
            assert (await plans.init(sid, title="Big", mode="design", workspace=work)).ok
            (await plans.md_path(sid)).write_text(md, encoding="utf-8")
            assert (await plans.md_written(sid)).ok

            async def draw_after() -> None:
                data = await engine.plan_card(sid)
                assert data.state == "review" and data.steps
                presenter.plan_view(data, attached=True)

            async def draw_before() -> None:
                sidecar = await plans.current(sid)
                text = await plans.md_text(sid) or ""
                assert not validate_template_b(text)
                cards.build_plan_card(sidecar, "review", markdown=text, attached=True)

            first_after = await longest_stall(draw_after)
            first_before = await longest_stall(draw_before)

            def median(samples: list[float]) -> float:
                return statistics.median(samples)

            timed: dict[str, list[float]] = {"before": [], "after": []}
            for _ in range(draws):  # interleaved, so load on the machine hits both alike
                for name, fn in (("before", draw_before), ("after", draw_after)):
                    start = time.perf_counter()
                    await fn()
                    timed[name].append(time.perf_counter() - start)
            await engine.shutdown()
    return {
        "kb": len(md.encode()) / 1024,
        "before": median(timed["before"]),
        "after": median(timed["after"]),
        "first_before": first_before,
        "first_after": first_after,
    }


def main(argv: list[str] | None = None) -> None:
    """Print the draw cost before and after, and the first draw's longest loop stall."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kb", type=int, default=500)
    parser.add_argument("--draws", type=int, default=20)
    args = parser.parse_args(argv)
    got = asyncio.run(run(args.kb, args.draws))
    print(f"plan: {got['kb']:,.0f} KB")
    print(
        f"a review card draw at one revision: before {got['before'] * 1000:.1f} ms, "
        f"after {got['after'] * 1000:.2f} ms: {got['after'] / got['before']:.4f}x "
        f"({got['before'] / got['after']:,.0f}x cheaper)"
    )
    print(
        f"longest event-loop stall during the first draw of a revision: before "
        f"{got['first_before'] * 1000:.1f} ms, after {got['first_after'] * 1000:.1f} ms"
    )


if __name__ == "__main__":
    main()
