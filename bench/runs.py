"""How many approved runs one machine sustains at once (docs/scaling.md, "When to move").

Run: ``python -m bench.runs [--levels 1 2 3 4 6 8] [--tasks 4] [--model-delay 0] [--repeat 3]``.

The real engine over SQLite and plan files; N chats, each in a project of its own (a small
Python project: a ``src/`` package, 40 pytest tests, pytest in the project's ``.venv``), each
with an approved checklist of ``--tasks`` tasks, all started at once with ``/execute``. Per
task the scripted model takes two steps, as an agent does: start the task, read the tests and
edit the module; then run the project's test suite with bash (the real bubblewrap sandbox) and
complete the task. A step is one model call and its tools; its time is the wall time from one
model call of that run to the next (the last step: to the end of the run).

For each level N, the mean time per step of each run, then the median over the N runs; the
levels run in turn ``--repeat`` times (a change in the machine's load hits all of them) and
each level's median is compared with the one at N = 1, measured in the same run: the level where it
reaches 2x is where the machine no longer keeps up. Also printed: the CPU per step (this
process and its children, the sandboxes included) and the machine's load average.

The model answers at once (``--model-delay 0``): every step is the machine's own work, the
worst case. A real model takes seconds per step, during which the run uses no CPU;
``--model-delay S`` waits that long before each answer, to see how many more runs fit.

Nothing asserts on speed; the result is the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.compose import open_plangate
from engine.agent.testing import RecordingChannel
from engine.app import Engine, EngineConfig
from engine.keys import Chat
from engine.model.script import ScriptedCall, ScriptStep, say
from engine.model.scripted import ScriptedProvider
from engine.model.types import ModelReply

OWNER = "tg:7"
PYTEST = ".venv/bin/python -m pytest -q -p no:cacheprovider"
ALLOW = ((".venv/bin/python", "-m", "pytest"),)

PYPROJECT = """[project]
name = "calc"
version = "0.1"

[tool.pytest.ini_options]
pythonpath = ["src"]
"""
OPS = '''"""Small arithmetic the tests check."""


def add(a, b):
    return a + b


def mul(a, b):
    return a * b
'''
TESTS = """import pytest

from calc.ops import add, mul


@pytest.mark.parametrize("a", range(20))
def test_add(a):
    assert add(a, 1) == a + 1


@pytest.mark.parametrize("a", range(20))
def test_mul(a):
    assert mul(a, 2) == a + a
"""


def template(root: Path) -> Path:
    """One project, made once and copied for every run: its ``.venv`` has pytest (installed
    with this machine's pip configuration); the folder is not a git repository, so the plan
    runs in place."""
    project = root / "template"
    for name, text in {
        "pyproject.toml": PYPROJECT,
        "src/calc/__init__.py": "",
        "src/calc/ops.py": OPS,
        "tests/test_ops.py": TESTS,
    }.items():
        path = project / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    python = shutil.which("python3", path="/usr/bin:/bin") or "python3"
    subprocess.run([python, "-m", "venv", str(project / ".venv")], check=True)
    pip = [str(project / ".venv/bin/python"), "-m", "pip", "install", "-q", "pytest"]
    subprocess.run(pip, check=True)
    return project


def plan_md(run: int, tasks: int) -> str:
    steps = "\n".join(
        f"{i}. Part {i} of bench-run-{run}: add op{i} to calc.ops.\n"
        f"   - Done when: the test suite passes with op{i}"
        for i in range(1, tasks + 1)
    )
    return (
        f"# bench-run-{run}\n\n## Context\n- **Problem:** calc needs more operations.\n"
        "- **Target state:** every op exists and the suite passes.\n"
        "- **Intent:** the owner asked.\n\n## Implementation steps\n" + steps + "\n"
    )


def script(tasks: int) -> list[ScriptStep]:
    """Two steps per task, as above, and a last word."""
    out: list[ScriptStep] = []
    ops = OPS
    for i in range(1, tasks + 1):
        edited = ops + f"\n\ndef op{i}(a):\n    return a + {i}\n"
        out.append(
            ScriptStep(
                tool_calls=(
                    ScriptedCall("plan", {"op": "start"}),
                    ScriptedCall("read_file", {"path": "tests/test_ops.py"}),
                    ScriptedCall(
                        "edit_file",
                        {"path": "src/calc/ops.py", "old_text": ops, "new_text": edited},
                    ),
                )
            )
        )
        out.append(
            ScriptStep(
                tool_calls=(
                    ScriptedCall("bash", {"command": PYTEST}),
                    ScriptedCall("plan", {"op": "complete", "evidence": "the suite passes"}),
                )
            )
        )
        ops = edited
    out.append(say(f"All {tasks} parts done; the suite passes."))
    return out


_RUN = re.compile(r"bench-run-(\d+)")


@dataclass
class Routed:
    """One engine, many runs: each request goes to its run's script (found by the run's
    marker in the conversation), and the time of every call is kept per run."""

    delay_s: float
    scripts: dict[int, ScriptedProvider] = field(default_factory=dict)
    calls: dict[int, list[float]] = field(default_factory=dict)

    async def complete(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        *,
        max_tokens: int | None = None,
    ) -> ModelReply:
        found = _RUN.search(" ".join(str(m.get("content")) for m in messages))
        if found is None:
            raise RuntimeError("a model call that names no bench run")
        run = int(found[1])
        self.calls.setdefault(run, []).append(time.perf_counter())
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        return await self.scripts[run].complete(messages, tools, max_tokens=max_tokens)


@dataclass(frozen=True)
class Level:
    runs: int
    step_s: float  # median over runs of each run's mean step time
    cpu_ms_per_step: float
    wall_s: float
    load: float


async def level(
    root: Path, project: Path, n: int, tasks: int, delay_s: float, meter: CpuMeter
) -> Level:
    """``n`` approved runs at once, each in its own copy of the project."""
    folder = root / f"level-{n}"
    projects = folder / "projects"
    for k in range(n):
        shutil.copytree(project, projects / f"bench-run-{k}", symlinks=True)
    model = Routed(delay_s, {k: ScriptedProvider(script(tasks)) for k in range(n)})
    config = EngineConfig(
        workspace=projects / "bench-run-0",
        owner_ids=frozenset({OWNER}),
        allow_bash=ALLOW,
        projects_root=projects,
        max_steps=4 * tasks + 10,
    )
    async with open_plangate(
        folder / "home", model=model, channel=RecordingChannel(), config=config
    ) as opened:
        engine = opened.engine
        await engine.start()
        try:
            sids = [await _approved(engine, k, projects, tasks) for k in range(n)]
            cpu, wall = meter.seconds(), time.perf_counter()
            for sid in sids:
                await engine.command(sid, "execute", "", actor=OWNER)
            ends = await asyncio.gather(*(_ended(engine, sid) for sid in sids))
            wall, cpu = time.perf_counter() - wall, meter.seconds() - cpu
        finally:
            await engine.shutdown()
    steps = []
    for k, end in enumerate(ends):
        times = [*model.calls[k], end]
        steps.append((times[-1] - times[0]) / (len(times) - 1))
    n_steps = sum(len(c) for c in model.calls.values())
    return Level(n, statistics.median(steps), 1000 * cpu / n_steps, wall, os.getloadavg()[0])


async def _approved(engine: Engine, k: int, projects: Path, tasks: int) -> str:
    """A chat in project ``bench-run-k`` with the plan written and ready to run."""
    chat = Chat.private(f"tg:{1000 + k}")
    if k:
        outcome = await engine.project(chat, f"bench-run-{k}", actor=OWNER)
        assert "Now working" in (outcome.reply or ""), outcome.reply
    sid = await engine.session_for_chat(chat)
    plans = engine.plans
    assert (await plans.enter_pre_init(sid)).ok
    workspace = projects / f"bench-run-{k}"
    assert (await plans.init(sid, title=f"bench-run-{k}", mode="design", workspace=workspace)).ok
    (await plans.md_path(sid)).write_text(plan_md(k, tasks), encoding="utf-8")
    assert (await plans.md_written(sid)).ok
    return sid


async def _ended(engine: Engine, sid: str) -> float:
    while not engine.agents.is_idle(sid):
        await engine.agents.wait_idle(sid)
        await asyncio.sleep(0)
    assert await engine.plans.state(sid) == "none", "the run did not finish its checklist"
    return time.perf_counter()


class CpuMeter:
    """CPU of this process and everything it starts, the sandboxes included.

    A sandboxed command's time does not reliably reach this process's figures (``os.times``
    counts only children waited for, and a killed sandbox's inner processes are reaped by
    others), so where it can the bench moves itself into a cgroup of its own (cgroup v1's
    ``cpuacct``, as root) and reads that cgroup's total, which every descendant adds to.
    Elsewhere it falls back to ``os.times`` and says so."""

    ROOT = Path("/sys/fs/cgroup/cpuacct")

    def __init__(self) -> None:
        self.group: Path | None = None
        try:
            group = self.ROOT / f"plangate-bench-{os.getpid()}"
            group.mkdir()
            (group / "cgroup.procs").write_text(str(os.getpid()))
            self.group = group
        except OSError:
            self.group = None

    @property
    def whole(self) -> bool:
        """Whether the sandboxes' CPU is counted."""
        return self.group is not None

    def seconds(self) -> float:
        if self.group is not None:
            return int((self.group / "cpuacct.usage").read_text()) / 1e9
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def close(self) -> None:
        if self.group is not None:
            (self.ROOT / "cgroup.procs").write_text(str(os.getpid()))
            with contextlib.suppress(OSError):
                self.group.rmdir()


async def main_async(levels: Sequence[int], tasks: int, delay_s: float, repeat: int) -> None:
    """Every level ``repeat`` times, the levels in turn (so a change in the machine's load
    hits all of them), then each level's medians against one run's."""
    found: dict[int, list[Level]] = {n: [] for n in levels}
    with tempfile.TemporaryDirectory(prefix="plangate-bench-runs-") as tmp:
        root = Path(tmp)
        project = await asyncio.to_thread(template, root)
        meter = CpuMeter()
        if not meter.whole:
            print("(no cgroup of its own here: the CPU figures leave the sandboxes out)")
        try:
            for r in range(repeat):
                for n in levels:
                    got = await level(root / f"r{r}", project, n, tasks, delay_s, meter)
                    found[n].append(got)
                    print(
                        f"  round {r + 1}, {n:3} runs: {1000 * got.step_s:6.0f} ms per step, "
                        f"{got.cpu_ms_per_step:5.0f} ms CPU per step, load {got.load:4.1f}",
                        flush=True,
                    )
        finally:
            meter.close()
    step = {n: statistics.median(x.step_s for x in v) for n, v in found.items()}
    base = step[levels[0]]
    print(f"cores: {os.cpu_count()}, model delay {delay_s} s, {tasks} tasks per run, medians:")
    for n, v in found.items():
        cpu = statistics.median(x.cpu_ms_per_step for x in v)
        wall = statistics.median(x.wall_s for x in v)
        print(
            f"{n:3} runs: {1000 * step[n]:6.0f} ms per step ({step[n] / base:4.2f}x "
            f"{levels[0]} run), {cpu:5.0f} ms CPU per step, {wall:6.1f} s for the level"
        )
    doubled = next((n for n in levels if step[n] >= 2 * base), None)
    if doubled is None:
        print(f"the step time did not double up to {levels[-1]} runs")
    else:
        print(f"the step time doubled at {doubled} concurrent runs")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 2, 3, 4, 6, 8])
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--model-delay", type=float, default=0.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    asyncio.run(main_async(args.levels, args.tasks, args.model_delay, args.repeat))


if __name__ == "__main__":
    main()
