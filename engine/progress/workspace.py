"""Did bash change the workspace? A cheap snapshot, compared step to step.

A file tool's write is progress by itself; bash is opaque, so after a step that ran bash the
detector compares a digest of the workspace with the one taken before:

- in a git repository: ``git status --porcelain`` (every untracked file listed) plus the size
  and modification time of each listed path, so editing an already-modified file again
  counts too;
- elsewhere: sizes and modification times of the files under the workspace, walked to at
  most :data:`MAX_ENTRIES` entries (version control, caches and dependency folders skipped,
  the same folders the checks' watch skips).

git runs through plangate's one host git runner (``engine.worktree.git.Git``): the workspace
is the agent's to write, so its ``.git/config`` is not trusted; the runner's forced settings,
clean environment and configuration check apply (a repository whose configuration names a
program git would run is walked instead), submodules are never entered, and the status does
not rewrite the index (``GIT_OPTIONAL_LOCKS=0``: the agent's own git commands own it).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from pathlib import Path

from engine.checks.watch import SKIP_DIRS
from engine.worktree.git import IGNORE_SUBMODULES, Git, GitError

_log = logging.getLogger("plangate.progress.workspace")

MAX_ENTRIES = 20_000
GIT_TIMEOUT_S = 10.0


def _stat_line(root: Path, rel: str) -> str:
    try:
        st = os.lstat(root / rel)
    except OSError:
        return f"{rel}\0-"
    return f"{rel}\0{st.st_size}\0{st.st_mtime_ns}"


def _git_digest(root: Path, porcelain: bytes) -> str:
    digest = hashlib.sha256(porcelain)
    entries = iter(porcelain.split(b"\0"))
    for entry in entries:
        if len(entry) <= 3:
            continue
        rel = os.fsdecode(entry[3:])
        digest.update(_stat_line(root, rel).encode("utf-8", "surrogateescape"))
        if entry[:1] in (b"R", b"C"):
            next(entries, None)  # a rename's or copy's source path follows without a status
    return "git:" + digest.hexdigest()


def walk_digest(root: Path, *, max_entries: int = MAX_ENTRIES) -> str:
    """Sizes and mtimes of the files under ``root`` (bounded), as one digest."""
    digest = hashlib.sha256()
    seen = 0
    stack = [root]
    while stack and seen < max_entries:
        folder = stack.pop()
        try:
            with os.scandir(folder) as entries:
                items = sorted(entries, key=lambda e: e.name)
        except OSError:
            continue
        for entry in items:
            seen += 1
            if seen > max_entries:
                break
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if entry.is_dir(follow_symlinks=False):
                if entry.name not in SKIP_DIRS:
                    stack.append(Path(entry.path))
                continue
            line = f"{entry.path}\0{st.st_size}\0{st.st_mtime_ns}\n"
            digest.update(line.encode("utf-8", "surrogateescape"))
    return "walk:" + digest.hexdigest()


async def snapshot(workspace: Path) -> str:
    """A digest that changes when a file in the workspace is created, changed or removed."""
    repo = await Git.discover(workspace, optional_locks=False)
    if repo is not None and repo.work_tree is not None:
        # Porcelain paths are relative to the repository's top, which may be above the
        # workspace; only the workspace's own part is listed (run at the top, the
        # workspace's path from there is the pathspec).
        inside = os.path.relpath(workspace.resolve(), repo.work_tree.resolve())
        try:
            done = await repo.run(
                "status",
                "--porcelain=v1",
                "-z",
                "--untracked-files=all",
                IGNORE_SUBMODULES,
                "--",
                f":(literal){inside}",
                check=False,
                timeout_s=GIT_TIMEOUT_S,
            )
        except GitError:
            # A key that makes git run a program (a filter driver, say) means: walk instead.
            _log.info("plangate.progress.workspace.unsafe_config walk instead")
        except (OSError, TimeoutError):
            pass
        else:
            if done.ok:
                porcelain = os.fsencode(done.out)
                return await asyncio.to_thread(_git_digest, repo.work_tree, porcelain)
    return await asyncio.to_thread(walk_digest, workspace)


__all__ = ["MAX_ENTRIES", "snapshot", "walk_digest"]
