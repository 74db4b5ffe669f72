"""``plangate health``: is the running bot alive? (docs/operations.md, the Docker HEALTHCHECK).

The running process refreshes a heartbeat file in its home from its event loop; ``health``
reads it. A file that is missing or older than a few intervals means the process is gone or
its loop is wedged. It works the same in polling and webhook mode, and needs no port.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

HEARTBEAT_FILE = "heartbeat"
HEARTBEAT_INTERVAL_S = 15.0
# Three missed beats: one slow write or a busy moment is not a death.
STALE_AFTER_S = 3 * HEARTBEAT_INTERVAL_S

_log = logging.getLogger("plangate.health")


def beat(home: Path, *, now: float | None = None) -> None:
    """Write the heartbeat (the time and this pid), replacing the file atomically."""
    path = home / HEARTBEAT_FILE
    tmp = path.with_name(f".{HEARTBEAT_FILE}.{os.getpid()}")
    tmp.write_text(f"{time.time() if now is None else now:.3f} {os.getpid()}\n")
    os.replace(tmp, path)


@contextlib.asynccontextmanager
async def heartbeat(home: Path, interval_s: float = HEARTBEAT_INTERVAL_S) -> AsyncIterator[None]:
    """Refresh the heartbeat every ``interval_s`` while the body runs; remove it on the way out,
    so a clean stop reads as stopped, not as wedged."""

    async def loop() -> None:
        while True:
            try:
                await asyncio.to_thread(beat, home)
            except OSError as exc:
                _log.warning("plangate.health.beat_failed %s", type(exc).__name__)
            await asyncio.sleep(interval_s)

    task = asyncio.create_task(loop(), name="plangate-heartbeat")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        with contextlib.suppress(OSError):
            (home / HEARTBEAT_FILE).unlink()


def check(
    home: Path, *, now: float | None = None, stale_after_s: float = STALE_AFTER_S
) -> str | None:
    """None when the heartbeat is fresh, else one line saying what is wrong."""
    path = home / HEARTBEAT_FILE
    try:
        fields = path.read_text().split()
        at = float(fields[0])
    except FileNotFoundError:
        return f"not running: no heartbeat in {home} (is `plangate run` started with this home?)"
    except (OSError, ValueError, IndexError):
        return f"unreadable heartbeat: {path}"
    age = (time.time() if now is None else now) - at
    if age > stale_after_s:
        return f"stale heartbeat: last beat {age:.0f} s ago (the process is stuck or gone)"
    return None


__all__ = ["HEARTBEAT_FILE", "STALE_AFTER_S", "beat", "check", "heartbeat"]
