"""Helpers to see whether a process is gone (a zombie counts as gone)."""

from __future__ import annotations

import asyncio
from pathlib import Path


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    # The state follows the parenthesised command name.
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X")


async def wait_for_file(path: Path, *, attempts: int = 500) -> str:
    """Poll until ``path`` has content (bounded), return it."""
    for _ in range(attempts):
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        await asyncio.sleep(0.01)
    raise AssertionError(f"{path} never appeared")
