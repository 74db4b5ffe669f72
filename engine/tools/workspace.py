"""Workspace paths and locks shared by the file tools and ``bash`` (DESIGN.md §8, §14).

A path is resolved (symlinks and ``..``) before it is judged, so ``../x`` and a symlink that
points out of the workspace are both outside. Write tools and ``bash`` hold one asyncio lock
per workspace while they run, so two sessions on one project never interleave mutations.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path


class OutsideWorkspace(Exception):
    """A path that resolves outside the workspace (and is not the session ``.md``)."""

    def __init__(self, raw: str, resolved: Path) -> None:
        super().__init__(raw)
        self.raw = raw
        self.resolved = resolved

    def result_text(self, workspace: Path) -> str:
        """The fixed tool result for the model."""
        return (
            f"refused: {self.raw!r} resolves to {self.resolved}, which is outside the "
            f"workspace {real_path(workspace)}; file tools only work inside the workspace"
        )


def real_path(path: Path) -> Path:
    """``path`` with every symlink and ``..`` resolved (missing tails allowed)."""
    return Path(os.path.realpath(path))


def is_within(path: Path, root: Path) -> bool:
    """``True`` when the resolved ``path`` is ``root`` or below it (both already resolved)."""
    return path == root or root in path.parents


def resolve_path(raw: str, workspace: Path) -> Path:
    """The absolute, symlink-free path ``raw`` names, relative paths taken from ``workspace``.

    The one place paths from tools, the gate and plan import are resolved; a path that does not
    exist yet resolves through its existing parents.
    """
    candidate = Path(raw).expanduser()
    if not candidate.is_absolute():
        candidate = real_path(workspace) / candidate
    return real_path(candidate)


def resolve_in_workspace(raw: str, workspace: Path, *, also_allowed: Path | None = None) -> Path:
    """Resolve ``raw`` against ``workspace``; raise :class:`OutsideWorkspace` when it escapes.

    ``also_allowed`` is one extra file outside the workspace that may be used (the session's
    plan ``.md``); it matches only exactly, after resolution.
    """
    root = real_path(workspace)
    resolved = resolve_path(raw, workspace)
    if is_within(resolved, root):
        return resolved
    if also_allowed is not None and resolved == real_path(also_allowed):
        return resolved
    raise OutsideWorkspace(raw, resolved)


def display_path(path: Path, workspace: Path) -> str:
    """``path`` relative to the workspace when inside it, else absolute."""
    root = real_path(workspace)
    try:
        return str(path.relative_to(root)) or "."
    except ValueError:
        return str(path)


class WorkspaceLocks:
    """One ``asyncio.Lock`` per resolved workspace path, created on first use."""

    def __init__(self) -> None:
        self._locks: dict[Path, asyncio.Lock] = {}

    def lock_for(self, workspace: Path) -> asyncio.Lock:
        key = real_path(workspace)
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock


def cut(text: str, limit: int, *, what: str = "output") -> str:
    """``text`` cut to ``limit`` characters with a note saying how much was left out."""
    if len(text) <= limit:
        return text
    dropped = len(text) - limit
    return f"{text[:limit]}\n[{what} cut: {dropped} more characters not shown]"


__all__ = [
    "OutsideWorkspace",
    "WorkspaceLocks",
    "cut",
    "display_path",
    "is_within",
    "real_path",
    "resolve_in_workspace",
]
