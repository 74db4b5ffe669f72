"""What running grep's search in a killable child process costs against running it in-process.

Run: ``python -m bench.grep [--repeat R]``.

Both sides search this checkout's ``engine/``, ``bot/``, ``storage/`` and ``tests/`` for a
pattern with many matches (``def ``, capped at 300 shown) and one with none: the tool
(``GrepTool.run``: a child ``python -I -S -B -c`` running ``engine/tools/search.py``, JSON
lines back over a pipe) against ``engine.tools.search.search`` called directly in a thread
(what grep did before it moved to a child, minus nothing). Best of R runs each; the ratio
is the result.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from engine.events import HumanSource
from engine.tools.base import ToolContext
from engine.tools.files import FileLimits, GrepTool
from engine.tools.search import search

_ROOT = Path(__file__).resolve().parents[1]


async def _best(fn: Callable[[], Awaitable[object]], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        await fn()
        best = min(best, time.perf_counter() - start)
    return best


async def run(repeat: int) -> None:
    limits = FileLimits()
    ctx = ToolContext(session_id="bench", workspace=_ROOT, turn_id="t", source=HumanSource())
    tool = GrepTool(limits=limits)
    print("pattern | child ms | in-process ms | ratio")
    for pattern in ("def ", "zq_no_such_text_qz"):
        request: dict[str, Any] = {
            "pattern": pattern,
            "root": str(_ROOT),
            "workspace": str(_ROOT),
            "glob": "*.py",
            "max_matches": limits.grep_matches,
            "line_chars": limits.grep_line_chars,
            "file_bytes": limits.grep_file_bytes,
        }

        async def child(pattern: str = pattern) -> object:
            return await tool.run({"pattern": pattern, "glob": "*.py"}, ctx)

        async def inline(request: dict[str, Any] = request) -> object:
            lines: list[dict[str, Any]] = []
            await asyncio.to_thread(search, request, lines.append)
            return lines

        a = await _best(child, repeat)
        b = await _best(inline, repeat)
        print(f"{pattern!r} | {a * 1000:.0f} | {b * 1000:.0f} | {a / b:.2f}x")


def main(argv: list[str] | None = None) -> None:
    """Print both timings and the ratio per pattern."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=7)
    asyncio.run(run(parser.parse_args(argv).repeat))


if __name__ == "__main__":
    main()
