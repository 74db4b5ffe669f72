"""What checks cost (docs/checks.md).

Run: ``python -m bench.checks [--calls N] [--repeat R] [--files F]``.

1. A check against a bash call of the same command (``true``): ``SandboxChecks.run`` goes
   through the same sandbox runner, so the ratio should stay near 1 (target under 1.1).
2. The "changed tests" snapshot of a tree of F files (a tenth of them test files) against a
   bare ``os.walk`` of the same tree: the price of knowing which tests moved, per plan approval
   and per checked completion.

Interleaved R times; the medians are printed, so a burst of load on a shared machine hits both
sides of a ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

from engine.checks.runner import SandboxChecks
from engine.checks.watch import snapshot
from engine.events import HumanSource
from engine.tools.base import ToolContext
from engine.tools.bash import BashTool


async def _bash_s(tool: BashTool, ctx: ToolContext, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        out = await tool.run({"command": "true"}, ctx)
        assert out.content.startswith("exit code 0"), out.content
    return (time.perf_counter() - start) / calls


async def _check_s(checks: SandboxChecks, workspace: Path, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        run = await checks.run(["true"], session_id="s", workspace=workspace)
        assert run.passed
    return (time.perf_counter() - start) / calls


def _tree(root: Path, files: int) -> None:
    for n in range(files):
        folder = root / ("tests" if n % 10 == 0 else f"pkg{n % 20}")
        folder.mkdir(exist_ok=True)
        name = f"test_{n}.py" if n % 10 == 0 else f"mod_{n}.py"
        (folder / name).write_text(f"# file {n}\n" + "x = 1\n" * 40)


def _walk_s(root: Path) -> float:
    start = time.perf_counter()
    count = sum(len(files) for _d, _s, files in os.walk(root))
    assert count
    return time.perf_counter() - start


def _snapshot_s(root: Path) -> tuple[float, int]:
    start = time.perf_counter()
    hashed = snapshot(["python3 -m unittest -q"], root)
    return time.perf_counter() - start, len(hashed)


async def main(calls: int, repeat: int, files: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp)
        ctx = ToolContext(session_id="s", workspace=workspace, turn_id="t", source=HumanSource())
        tool = BashTool()
        checks = SandboxChecks(BashTool())
        _tree(workspace, files)
        bashes, ratios, walks, snaps = [], [], [], []
        hashed = 0
        for _ in range(repeat):
            b = await _bash_s(tool, ctx, calls)
            c = await _check_s(checks, workspace, calls)
            bashes.append(b)
            ratios.append(c / b)
            w = _walk_s(workspace)
            s, hashed = _snapshot_s(workspace)
            walks.append(w)
            snaps.append(s)
    print(f"bash 'true' per call: {statistics.median(bashes) * 1e3:.2f} ms")
    print(f"check 'true' / bash 'true': {statistics.median(ratios):.3f} (target < 1.1)")
    print(
        f"snapshot of {files} files ({hashed} watched): {statistics.median(snaps) * 1e3:.1f} ms, "
        f"bare os.walk {statistics.median(walks) * 1e3:.1f} ms, "
        f"ratio {statistics.median(snaps) / statistics.median(walks):.1f}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--files", type=int, default=2000)
    args = parser.parse_args()
    asyncio.run(main(args.calls, args.repeat, args.files))
