"""Session folders and atomic file writes (docs/plan-json-spec.md).

Layout under the plangate home:

    projects/<slug>/session/      a session bound to a workspace (every plangate session)
    profiles/<name>/session/      no workspace, a profile set
    session/                      no workspace, no profile
    agents/session/               legacy read-only fallback, never written
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

_T = TypeVar("_T")

# fsync'd writes get their own threads: the default pool is shared with everything else that
# blocks (tools, DNS lookups), and a save stuck behind it would stall every plan change.
_DURABLE_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="plangate-durable")


async def run_durable(fn: Callable[..., _T], *args: Any) -> _T:
    """Run a blocking durable write ``fn(*args)`` on the durable-write threads and await it."""
    return await asyncio.get_running_loop().run_in_executor(_DURABLE_POOL, fn, *args)


def workspace_slug(workspace: str | os.PathLike[str]) -> str:
    """``<folder name>-<first 8 hex of sha256 of the resolved path>``."""
    resolved = Path(workspace).resolve()
    digest = hashlib.sha256(str(resolved).encode("utf-8")).hexdigest()[:8]
    return f"{resolved.name or 'root'}-{digest}"


def session_dir(home: Path, *, workspace: str | None = None, profile: str | None = None) -> Path:
    """Where a session's plan files live (the write location)."""
    if workspace:
        return home / "projects" / workspace_slug(workspace) / "session"
    if profile:
        return home / "profiles" / profile / "session"
    return home / "session"


def legacy_session_dir(home: Path) -> Path:
    """The read-only fallback for files written by older tools; never written to."""
    return home / "agents" / "session"


def fsync_dir(path: Path) -> None:
    """Make a rename or a new file in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves either the old or the new bytes.

    Temp file in the same folder, fsync, rename over the target, fsync the folder.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise
    fsync_dir(path.parent)


def atomic_write_text(path: Path, text: str) -> None:
    """:func:`atomic_write_bytes` for UTF-8 text."""
    atomic_write_bytes(path, text.encode("utf-8"))
