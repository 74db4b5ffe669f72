"""Did bash change the workspace? A cheap snapshot, compared step to step.

A file tool's write is progress by itself; bash is opaque, so after a step that ran bash the
detector compares a digest of the workspace with the one taken before:

- in a git repository: ``git status --porcelain`` (every untracked file listed) plus the size
  and modification time of each listed path, so editing an already-modified file again
  counts too;
- elsewhere: sizes and modification times of the files under the workspace, walked to at
  most :data:`MAX_ENTRIES` entries (version control, caches and dependency folders skipped,
  the same folders the checks' watch skips).

git runs with the repository's own code switched off: the workspace is the agent's to write,
so its ``.git/config`` is not trusted. It runs as plangate's own git commands do
(``engine.worktree.git``: the same ``-c`` overrides of every option that runs a program, the
same clean environment with no system or global configuration), submodules are ignored, and a
repository whose configuration names a program git would run (:func:`unsafe_config` over every
file git reads, ``config.worktree`` included: a filter driver, an include...) is walked
instead. The repository is found once; the listing and the status then name it explicitly
(``GIT_DIR``, ``GIT_WORK_TREE``), so both read the same configuration. The child never gets
the project's Python path.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from pathlib import Path

from engine.checks.watch import SKIP_DIRS
from engine.worktree.git import CONFIG_LISTING, SAFE_CONFIG, git_env, unsafe_config

_log = logging.getLogger("plangate.progress.workspace")

MAX_ENTRIES = 20_000
GIT_TIMEOUT_S = 10.0
# No home of its own: git reads no user configuration from it.
_NO_HOME = Path("/nonexistent")


def _git_env() -> dict[str, str]:
    env = git_env(_NO_HOME)
    # A status must not rewrite the index (the agent's own git commands own it).
    env["GIT_OPTIONAL_LOCKS"] = "0"
    return env


async def _git(workspace: Path, *args: str, repo: tuple[str, str] | None = None) -> bytes | None:
    """Run one git command in ``workspace`` (in ``repo``: its git folder and top, when
    given); its stdout, or None when it failed."""
    env = _git_env()
    if repo is not None:
        env["GIT_DIR"], env["GIT_WORK_TREE"] = repo
    try:
        child = await asyncio.create_subprocess_exec(
            "git",
            *(arg for setting in SAFE_CONFIG for arg in ("-c", setting)),
            "-c",
            "core.untrackedCache=false",
            "-c",
            "status.showUntrackedFiles=all",
            *args,
            cwd=workspace,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
    except OSError:
        return None
    try:
        out, _ = await asyncio.wait_for(child.communicate(), GIT_TIMEOUT_S)
    except TimeoutError:
        child.kill()
        await child.wait()
        return None
    except asyncio.CancelledError:
        child.kill()
        raise
    return out if child.returncode == 0 else None


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
    found = await _git(workspace, "rev-parse", "--absolute-git-dir", "--show-toplevel")
    lines = os.fsdecode(found).splitlines() if found is not None else []
    if len(lines) == 2 and all(line.strip() for line in lines):
        # Porcelain paths are relative to the repository's top, which may be above the
        # workspace; only the workspace's own part is listed (the "." pathspec).
        repo = (lines[0], lines[1])
        toplevel = Path(lines[1])
        listing = await _git(workspace, *CONFIG_LISTING, repo=repo)
        # A key that makes git run a program (a filter driver, say) means: walk instead.
        if listing is not None and not unsafe_config(os.fsdecode(listing), scoped=True):
            porcelain = await _git(
                workspace,
                "status",
                "--porcelain=v1",
                "-z",
                "--ignore-submodules=all",
                "--",
                ".",
                repo=repo,
            )
            if porcelain is not None:
                return await asyncio.to_thread(_git_digest, toplevel, porcelain)
        else:
            _log.info("plangate.progress.workspace.unsafe_config walk instead")
    return await asyncio.to_thread(walk_digest, workspace)


__all__ = ["MAX_ENTRIES", "snapshot", "walk_digest"]
