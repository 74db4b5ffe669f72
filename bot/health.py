"""``plangate health``: is the running bot alive? (docs/operations.md, the Docker HEALTHCHECK).

The running process refreshes a heartbeat file in its home from its event loop; ``health``
reads it. A file that is missing or older than a few intervals means the process is gone or
its loop is wedged. It works the same in polling and webhook mode, and needs no port.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path

HEARTBEAT_FILE = "heartbeat"
HEARTBEAT_INTERVAL_S = 15.0
# Three missed beats: one slow write or a busy moment is not a death.
STALE_AFTER_S = 3 * HEARTBEAT_INTERVAL_S

_log = logging.getLogger("plangate.health")


def heartbeat_name(*, replicated: bool, host: str | None = None) -> str:
    """The heartbeat's file under the home: ``heartbeat``; with PostgreSQL, where replicas may
    share the home (docs/scaling.md), ``heartbeats/<host name>``, so one replica's beat never
    answers for another's (each container has its own host name) and one stopping does not
    remove the others'."""
    if not replicated:
        return HEARTBEAT_FILE
    return f"heartbeats/{host or socket.gethostname()}"


def beat(home: Path, *, now: float | None = None, name: str = HEARTBEAT_FILE) -> None:
    """Write the heartbeat (the time and this pid), replacing the file atomically."""
    path = home / name
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(f"{time.time() if now is None else now:.3f} {os.getpid()}\n")
    os.replace(tmp, path)


@contextlib.asynccontextmanager
async def heartbeat(
    home: Path, interval_s: float = HEARTBEAT_INTERVAL_S, *, name: str = HEARTBEAT_FILE
) -> AsyncIterator[None]:
    """Refresh the heartbeat every ``interval_s`` while the body runs; remove it on the way out,
    so a clean stop reads as stopped, not as wedged."""

    async def loop() -> None:
        while True:
            try:
                await asyncio.to_thread(functools.partial(beat, home, name=name))
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
            (home / name).unlink()


def check(
    home: Path,
    *,
    now: float | None = None,
    stale_after_s: float = STALE_AFTER_S,
    name: str = HEARTBEAT_FILE,
) -> str | None:
    """None when the heartbeat is fresh, else one line saying what is wrong."""
    path = home / name
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


__all__ = ["HEARTBEAT_FILE", "STALE_AFTER_S", "beat", "check", "heartbeat", "heartbeat_name"]
