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
so its ``.git/config`` is not trusted. fsmonitor and hooks are disabled on the command line,
system and global config are not read, submodules are ignored, and a repository that
configures a filter driver (a clean filter is a command git would run) is walked instead. The
child gets a clean environment, never the project's Python path.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from pathlib import Path

from engine.checks.watch import SKIP_DIRS

_log = logging.getLogger("plangate.progress.workspace")

MAX_ENTRIES = 20_000
GIT_TIMEOUT_S = 10.0
# Passed before the subcommand: nothing the repository configures may run code.
_GIT_SAFE = (
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.untrackedCache=false",
    "-c",
    "status.showUntrackedFiles=all",
)


def _git_env() -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": "/nonexistent",
        "LC_ALL": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        # A status must not rewrite the index (the agent's own git commands own it).
        "GIT_OPTIONAL_LOCKS": "0",
        "GIT_TERMINAL_PROMPT": "0",
    }


async def _git(workspace: Path, *args: str) -> bytes | None:
    """Run one git command in ``workspace``; its stdout, or None when it failed."""
    try:
        child = await asyncio.create_subprocess_exec(
            "git",
            *_GIT_SAFE,
            *args,
            cwd=workspace,
            env=_git_env(),
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
    for entry in porcelain.split(b"\0"):
        if len(entry) > 3:
            rel = os.fsdecode(entry[3:])
            digest.update(_stat_line(root, rel).encode("utf-8", "surrogateescape"))
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
    inside = await _git(workspace, "rev-parse", "--is-inside-work-tree")
    if inside is not None and inside.strip() == b"true":
        filters = await _git(workspace, "config", "--name-only", "--get-regexp", r"^filter\.")
        # Exit status 1 means "no such key": None here, and no filter is configured.
        if not filters:
            porcelain = await _git(
                workspace, "status", "--porcelain=v1", "-z", "--ignore-submodules=all"
            )
            if porcelain is not None:
                return await asyncio.to_thread(_git_digest, workspace, porcelain)
        else:
            _log.info("plangate.progress.workspace.filters_configured walk instead")
    return await asyncio.to_thread(walk_digest, workspace)


__all__ = ["MAX_ENTRIES", "snapshot", "walk_digest"]
