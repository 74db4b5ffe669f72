"""What a plan's worktree costs (docs/projects.md).

Run: ``python -m bench.worktree [--files F] [--changed C] [--repeat R]``.

One plan's whole worktree life through ``Worktrees`` (the config check, ``git worktree add``
at approval, the commit, diffstat and diff at Done, Keep branch's removal, every phase logged
to a real SQLite log) on a repository of F files with C of them changed, against the bare git
work a person would do by hand for the same (``worktree add``, ``add -A``, ``commit``,
``worktree remove``). The ratio is what plangate's safety and bookkeeping add; target under 2.

Interleaved R times; the medians are printed, so a burst of load on a shared machine hits both
sides of the ratio.
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

from engine.agent.testing import RecordingChannel
from engine.plan.service import PlanChange
from engine.plan.types import PlanSidecar
from engine.worktree.service import Worktrees
from storage.open import open_storage

_ENV = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "LANG": "C",
}
_ID = ("-c", "user.name=bench", "-c", "user.email=bench@localhost")


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *_ID, *args], cwd=repo, env=_ENV, check=True, capture_output=True)


def _repo(root: Path, files: int) -> Path:
    repo = root / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    for n in range(files):
        folder = repo / f"pkg{n % 20}"
        folder.mkdir(exist_ok=True)
        (folder / f"mod_{n}.py").write_text(f"# file {n}\n" + "x = 1\n" * 40)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "first")
    return repo


def _change(tree: Path, changed: int, tag: str) -> None:
    for n in range(changed):
        (tree / f"pkg{n % 20}" / f"mod_{n}.py").write_text(f"# changed {tag}\n")


def _by_hand_s(repo: Path, root: Path, changed: int, n: int) -> float:
    tree = root / f"hand-{n}"
    start = time.perf_counter()
    _git(repo, "worktree", "add", "-q", "-b", f"hand/{n}", str(tree))
    _change(tree, changed, f"hand {n}")
    _git(tree, "add", "-A")
    _git(tree, "commit", "-q", "-m", "by hand")
    _git(repo, "worktree", "remove", "--force", str(tree))
    return time.perf_counter() - start


async def _plangate_s(service: Worktrees, changed: int, n: int) -> float:
    session = f"{n:032x}"
    plan = PlanSidecar(id=f"{n:08x}" * 4, session_id=session, title=f"Bench {n}", status="Active")
    start = time.perf_counter()
    await service.on_plan_change(PlanChange(session, before=None, after=plan))
    record = await service.record(session)
    assert record is not None and record.phase == "live", record
    _change(Path(record.path), changed, f"plangate {n}")
    done = PlanChange(session, before=plan, after=None, archived="completed", archived_sidecar=plan)
    await service.on_plan_change(done)
    view = await service.view(session)
    assert view is not None and len(view.files) == changed and view.patch
    await service.keep(session, actor=None)
    return time.perf_counter() - start


async def main(files: int, changed: int, repeat: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        repo = _repo(root, files)
        storage = await open_storage(root / "home")

        async def project(session_id: str) -> Path:
            return repo

        service = Worktrees(
            storage.log, RecordingChannel(), project_for=project, root=root / "home" / "worktrees"
        )
        hands, ours = [], []
        try:
            for n in range(repeat):
                hands.append(_by_hand_s(repo, root, changed, n))
                ours.append(await _plangate_s(service, changed, n))
        finally:
            await storage.close()
    hand, mine = statistics.median(hands), statistics.median(ours)
    print(f"by hand (add, commit, remove) of {files} files, {changed} changed: {hand * 1e3:.0f} ms")
    print(f"plangate's worktree life (approve .. Done .. Keep branch): {mine * 1e3:.0f} ms")
    print(f"ratio {mine / hand:.2f} (target < 2)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--changed", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.files, args.changed, args.repeat))
