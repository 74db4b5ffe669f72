"""The disk reserve: the agent cannot make plangate's own writes fail (docs/security.md,
"Whole-call limits").

plangate's home (the database, plan files, sessions, and the plans' worktrees under it) lives
on a file system that the agent's bash calls may write too: the workspace, a worktree, a cache
a setup step fills. ``PLANGATE_DISK_RESERVE_MB`` keeps room for plangate itself:

- **The reserve is held.** At start a file of that size (``.disk-reserve`` in the home,
  hidden like the rest of it) is allocated. Whatever fills the disk, plangate can always get
  that much back by deleting it, so its own writes after a full disk still succeed.
- **Below the reserve nothing of the agent's runs.** Every sandboxed command (bash, checks,
  setup) is refused while the free space is below the reserve, and one that brings it below
  while it runs is killed (:meth:`DiskReserve.watch`); the reserve file is released then, so
  the writes that follow (the tool's result, the pause, other chats' messages) have room.
- **The run pauses with the reason**: the session controller asks :meth:`DiskReserve.low`
  before each step; an approved run pauses with it on the card, a turn stops with a notice.

The agent runs again only once the reserve file is held again, which needs twice the reserve
free (so that as much is left beside it). The
check is the free space of the home's file system (``statvfs``), read cheaply and often; a
writer faster than the watch's interval can still touch the bottom for a moment, which the
released reserve then absorbs.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

_log = logging.getLogger("plangate.tools.disk")

RESERVE_FILE = ".disk-reserve"
# How often a running command's effect on the free space is looked at.
WATCH_INTERVAL_S = 0.05
_MB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class DiskState:
    """The home's file system as last read: free megabytes and whether that is too little."""

    free_mb: int
    low: bool


class DiskReserve:
    """Keeps ``reserve_mb`` of the file system under ``home`` for plangate's own writes."""

    def __init__(self, home: Path, reserve_mb: int) -> None:
        self.home = home
        self.reserve_mb = reserve_mb
        self._file = home / RESERVE_FILE
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        """A reserve of 0 turns the whole mechanism off."""
        return self.reserve_mb > 0

    def free_mb(self) -> int:
        """Free megabytes on the home's file system for an unprivileged writer."""
        folder = self.home if self.home.exists() else self.home.parent
        stat = os.statvfs(folder)
        return stat.f_bavail * stat.f_frsize // _MB

    def state(self) -> DiskState:
        """The free space now, and whether it is below the reserve."""
        free = self.free_mb()
        return DiskState(free, self.enabled and free < self.reserve_mb)

    def hold(self) -> bool:
        """Allocate the reserve file (at start, and again once the space is back); ``True``
        when it is held. Never raises: a reserve that cannot be taken is logged."""
        if not self.enabled:
            return False
        with self._lock:
            if self.held():
                return True
            if self.free_mb() < 2 * self.reserve_mb:
                return False
            try:
                self.home.mkdir(parents=True, exist_ok=True)
                fd = os.open(self._file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                try:
                    os.posix_fallocate(fd, 0, self.reserve_mb * _MB)
                finally:
                    os.close(fd)
            except OSError as exc:
                _log.warning("plangate.tools.disk.reserve_failed error=%s", exc)
                with contextlib.suppress(OSError):
                    self._file.unlink()
                return False
            return True

    def release(self) -> bool:
        """Give the reserve back to the file system; ``True`` when there was one."""
        with self._lock:
            try:
                self._file.unlink()
            except FileNotFoundError:
                return False
            except OSError as exc:
                _log.warning("plangate.tools.disk.release_failed error=%s", exc)
                return False
        _log.warning("plangate.tools.disk.reserve_released home=%s", self.home)
        return True

    def held(self) -> bool:
        """The reserve file is there, whole."""
        try:
            return self._file.stat().st_size >= self.reserve_mb * _MB
        except OSError:
            return False

    def low(self) -> str | None:
        """The reason nothing of the agent's may run now, ``None`` when there is room.

        Below the reserve the reserve file is released (plangate's writes need the room);
        above twice the reserve it is taken again.
        """
        if not self.enabled:
            return None
        state = self.state()
        if state.low:
            self.release()
            return low_text(state.free_mb, self.reserve_mb)
        if self.held() or self.hold():
            return None
        # Released before and not yet back to twice the reserve: still too little.
        return low_text(self.free_mb(), self.reserve_mb)


def low_text(free_mb: int, reserve_mb: int) -> str:
    """The one line a refused command, a paused run and a notice give."""
    return (
        f"Paused: the disk plangate's home is on has {free_mb} MB free, below the "
        f"{reserve_mb} MB it keeps for itself (PLANGATE_DISK_RESERVE_MB); free some space "
        "(the workspace, a worktree, a cache), then Resume."
    )


__all__ = ["RESERVE_FILE", "WATCH_INTERVAL_S", "DiskReserve", "DiskState", "low_text"]
