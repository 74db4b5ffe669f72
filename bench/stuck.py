"""What the stuck detector costs a step (docs/agent.md "Stuck, not slow").

Run: ``python -m bench.stuck [--calls N] [--repeat R] [--files F]``.

Against one sandboxed bash call of ``true`` (what every bash step costs anyway):

1. ``StuckWatch.observe`` with a full history (every pattern checked), per step;
2. the workspace snapshot taken after a bash step, in a git repository of F files with a
   tenth of them modified (``git status`` plus a stat of each listed path);
3. the same snapshot outside a repository (a bounded walk of F files).

Interleaved R times; the medians are printed, so a burst of load on a shared machine hits
both sides of a ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from engine.events import HumanSource
from engine.progress.stuck import Step, StuckWatch, call_record
from engine.progress.workspace import snapshot
from engine.tools.base import ToolContext
from engine.tools.bash import BashTool


async def _bash_s(tool: BashTool, ctx: ToolContext, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        out = await tool.run({"command": "true"}, ctx)
        assert out.content.startswith("exit code 0"), out.content
    return (time.perf_counter() - start) / calls


def _observe_s(steps: int) -> float:
    watch = StuckWatch()
    watch.reset(now=0.0)
    records = [
        Step(calls=(call_record("read_file", {"path": f"f{k}.py"}, f"text {k}", is_error=False),))
        for k in range(steps)
    ]
    start = time.perf_counter()
    for k, step in enumerate(records):
        assert watch.observe(step, now=float(k)) is None
        if k % 50 == 49:
            watch.reset(now=float(k))
    return (time.perf_counter() - start) / steps


def _tree(root: Path, files: int) -> None:
    for n in range(files):
        folder = root / f"pkg{n % 20}"
        folder.mkdir(exist_ok=True)
        (folder / f"mod_{n}.py").write_text(f"# file {n}\n" + "x = 1\n" * 40)


def _git(root: Path, *args: str) -> None:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", *args], cwd=root, check=True, env=env, capture_output=True)


async def _snapshot_s(root: Path, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        await snapshot(root)
    return (time.perf_counter() - start) / calls


async def main(calls: int, repeat: int, files: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        repo, plain = base / "repo", base / "plain"
        repo.mkdir()
        plain.mkdir()
        _tree(repo, files)
        _tree(plain, files)
        _git(repo, "init", "-q")
        _git(repo, "add", "-A")
        _git(repo, "-c", "user.email=b@b", "-c", "user.name=b", "commit", "-qm", "tree")
        for n in range(0, files, 10):  # a tenth of the files modified, as mid-task
            (repo / f"pkg{n % 20}" / f"mod_{n}.py").write_text("changed\n")
        ctx = ToolContext(session_id="s", workspace=plain, turn_id="t", source=HumanSource())
        tool = BashTool()
        bashes, observes, gits, walks = [], [], [], []
        for _ in range(repeat):
            b = await _bash_s(tool, ctx, calls)
            bashes.append(b)
            observes.append(_observe_s(1000) / b)
            gits.append(await _snapshot_s(repo, calls) / b)
            walks.append(await _snapshot_s(plain, calls) / b)
        bash_ms = statistics.median(bashes) * 1000
        print(f"bash `true` call: {bash_ms:.1f} ms (median of {repeat})")
        print(f"detector per step / bash call: {statistics.median(observes):.4f}")
        print(f"git snapshot of {files} files / bash call: {statistics.median(gits):.2f}")
        print(f"walk snapshot of {files} files / bash call: {statistics.median(walks):.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--files", type=int, default=2000)
    args = parser.parse_args()
    asyncio.run(main(args.calls, args.repeat, args.files))
