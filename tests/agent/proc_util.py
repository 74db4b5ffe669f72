"""Helpers to see whether a process is gone (a zombie counts as gone)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    # The state follows the parenthesised command name.
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X")


async def wait_for_file(path: Path, *, timeout_s: float = 30.0) -> str:
    """Poll until ``path`` has content, return it.

    The bound is a safety net for a hung test, not a speed check: a sandboxed command on a
    loaded machine can take seconds to start.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        await asyncio.sleep(0.01)
    raise AssertionError(f"{path} never appeared")


def unique_marker() -> str:
    """A word no other process on the host has in its command line (for ``processes_with``).

    A fixed word is not enough: another run of the suite on the same machine (a second
    checkout, another person's) has the same word in its processes at the same time. Digits
    only, so it can also be the fraction of a ``sleep``.
    """
    return str(uuid.uuid4().int)[:15]


def processes_with(marker: str) -> list[int]:
    """Host pids of live processes whose command line contains ``marker``.

    Inside the sandbox ``$!`` is a pid of its own namespace, so tests find their processes by
    a word in the command line instead; make it with ``unique_marker``.
    """
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (
                (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            )
        except OSError:
            continue
        if marker in cmdline and alive(int(entry.name)):
            found.append(int(entry.name))
    return found
