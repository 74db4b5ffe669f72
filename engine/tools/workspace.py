"""Workspace paths and locks shared by the file tools and ``bash`` (docs/agent.md).

A path is resolved (symlinks and ``..``) before it is judged, so ``../x`` and a symlink that
points out of the workspace are both outside. Write tools and ``bash`` hold one asyncio lock
per workspace while they run, so two sessions on one project never interleave mutations.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import secrets
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO


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


def resolve_in_workspace(
    raw: str,
    workspace: Path,
    *,
    also_allowed: Path | None = None,
    extra_roots: Sequence[Path] = (),
) -> Path:
    """Resolve ``raw`` against ``workspace``; raise :class:`OutsideWorkspace` when it escapes.

    ``also_allowed`` is one extra file outside the workspace that may be used (the session's
    plan ``.md``); it matches only exactly, after resolution. ``extra_roots`` are folders
    outside the workspace that count as inside (the read tools pass the session inbox).
    """
    root = real_path(workspace)
    resolved = resolve_path(raw, workspace)
    if is_within(resolved, root):
        return resolved
    if also_allowed is not None and resolved == real_path(also_allowed):
        return resolved
    if any(is_within(resolved, real_path(extra)) for extra in extra_roots):
        return resolved
    raise OutsideWorkspace(raw, resolved)


def display_path(path: Path, workspace: Path) -> str:
    """``path`` relative to the workspace when inside it, else absolute."""
    root = real_path(workspace)
    try:
        return str(path.relative_to(root)) or "."
    except ValueError:
        return str(path)


class PathChanged(OSError):
    """The folder of a write is no longer the one its path resolved to (swapped mid-call)."""


def _open_folder(folder: Path) -> int:
    """An fd on ``folder`` that is still the resolved folder, else :class:`PathChanged`."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    if real_path(Path(f"/proc/self/fd/{fd}")) != folder:
        os.close(fd)
        raise PathChanged(f"{folder} changed while it was being written; try again")
    return fd


class FileTooBig(OSError):
    """A file over the size a tool reads whole; ``size`` is its size in bytes."""

    def __init__(self, path: Path, size: int) -> None:
        super().__init__(f"{path} is {size} bytes")
        self.size = size


def read_text_nofollow(path: Path, *, max_bytes: int | None = None) -> str:
    """The UTF-8 text of the resolved ``path``, refusing a symlink swapped in since.

    Opened non-blocking and checked on the descriptor: a FIFO swapped in raises
    ``OSError`` rather than blocking the thread. A file over ``max_bytes`` raises
    :class:`FileTooBig` before anything is read (at most ``max_bytes`` are ever read).
    """
    folder = _open_folder(path.parent)
    try:
        fd = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder)
    finally:
        os.close(folder)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise OSError(f"{path} is not a regular file")
    if max_bytes is not None and info.st_size > max_bytes:
        os.close(fd)
        raise FileTooBig(path, info.st_size)
    with os.fdopen(fd, "rb") as handle:
        data = handle.read() if max_bytes is None else handle.read(max_bytes + 1)
    if max_bytes is not None and len(data) > max_bytes:  # it grew since the fstat
        raise FileTooBig(path, len(data))
    return data.decode("utf-8")


def open_regular(path: Path) -> BinaryIO | None:
    """The regular file at ``path`` opened for reading, ``None`` for anything else (a symlink
    is not followed; a FIFO, a device or a socket is never read). Opened non-blocking and
    checked on the descriptor, so one swapped in since a walk or a check cannot block."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError:
        regular = False
    if not regular:
        os.close(fd)
        return None
    return os.fdopen(fd, "rb")


def read_regular(path: Path, *, max_bytes: int) -> bytes | None:
    """At most ``max_bytes`` of the regular file at ``path`` (:func:`open_regular`), ``None``
    for anything else."""
    handle = open_regular(path)
    if handle is None:
        return None
    with handle:
        try:
            return handle.read(max_bytes)
        except OSError:
            return None


def sha256_regular(path: Path, *, max_bytes: int) -> str | None:
    """The SHA-256 of the regular file at ``path`` (:func:`open_regular`), ``None`` for
    anything else. At most ``max_bytes`` are read: a bigger file's digest is of its first
    ``max_bytes`` and its size."""
    handle = open_regular(path)
    if handle is None:
        return None
    with handle:
        try:
            size = os.fstat(handle.fileno()).st_size
            sha = hashlib.sha256()
            left = max_bytes
            while left > 0 and (chunk := handle.read(min(1 << 16, left))):
                sha.update(chunk)
                left -= len(chunk)
            if size > max_bytes:
                sha.update(f"\0cut at {max_bytes} of {size}".encode())
        except OSError:
            return None
    return sha.hexdigest()


def replace_file(path: Path, data: bytes) -> None:
    """Write ``data`` to the resolved ``path`` by a temporary file renamed over it.

    The folder is opened once and checked to be the resolved one; the rename replaces the
    directory entry itself, so a symlink or a hard link found there (or swapped in after the
    path was checked) is replaced, never written through. An existing file's mode is kept.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    folder = _open_folder(path.parent)
    try:
        try:
            old = os.stat(path.name, dir_fd=folder, follow_symlinks=False)
            mode = old.st_mode & 0o7777 if stat.S_ISREG(old.st_mode) else 0o666
        except FileNotFoundError:
            mode = 0o666
        tmp = f".{path.name}.{secrets.token_hex(6)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode, dir_fd=folder)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            if mode != 0o666:
                os.chmod(tmp, mode, dir_fd=folder)
            os.rename(tmp, path.name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=folder)
            raise
    finally:
        os.close(folder)


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
    "PathChanged",
    "WorkspaceLocks",
    "cut",
    "display_path",
    "is_within",
    "open_regular",
    "read_regular",
    "read_text_nofollow",
    "real_path",
    "replace_file",
    "resolve_in_workspace",
    "sha256_regular",
]
