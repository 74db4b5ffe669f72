"""The ``bash`` tool: one command in the workspace, in its own process group (DESIGN.md §8).

The command runs as ``bash -c`` with ``start_new_session=True`` so it leads a fresh process
group. On timeout or cancellation (``/stop``) the WHOLE group is sent SIGTERM, then SIGKILL after
a grace period, and the leader is awaited before the tool returns or re-raises. When the command
itself ends, whatever it left running in its group (``sleep 100 &``) is killed the same way: no
background job outlives a call, so a later call never races with an earlier one. stdout and
stderr are merged and capped (head kept, a note says how much was cut). The call holds the
workspace lock shared with the write tools. Exclusive.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from dataclasses import dataclass
from typing import Any

from engine.tools.base import ToolContext, ToolOutcome
from engine.tools.workspace import WorkspaceLocks


@dataclass(frozen=True, slots=True)
class BashLimits:
    default_timeout_s: float = 120.0
    max_timeout_s: float = 600.0
    output_chars: int = 30_000
    # Between SIGTERM and SIGKILL of the group.
    kill_grace_s: float = 2.0


def _signal_group(pgid: int, sig: signal.Signals) -> bool:
    """Signal every process of the group; ``False`` when the group is gone."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    return True


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


async def wait_exit(process: asyncio.subprocess.Process, *, timeout_s: float | None) -> bool:
    """Wait until the leader exited; ``False`` on timeout.

    ``Process.wait()`` also waits for the pipes to close, which a background job of the
    command may hold open for ever; the child watcher sets ``returncode`` at exit, so that is
    what is watched.
    """
    loop = asyncio.get_running_loop()
    deadline = None if timeout_s is None else loop.time() + timeout_s
    while process.returncode is None:
        if deadline is not None and loop.time() >= deadline:
            return False
        await asyncio.sleep(_POLL_S)
    return True


_POLL_S = 0.02


async def kill_process_group(process: asyncio.subprocess.Process, *, grace_s: float) -> None:
    """SIGTERM the group, wait up to ``grace_s`` for it to go, then SIGKILL the group.

    Safe to call when the leader already exited (leftover members of the group are killed).
    Finishes its work even when the calling task is cancelled meanwhile.
    """
    pgid = process.pid
    _signal_group(pgid, signal.SIGTERM)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace_s
    while loop.time() < deadline:
        if process.returncode is not None and not _group_alive(pgid):
            break
        try:
            await asyncio.sleep(_POLL_S)
        except asyncio.CancelledError:
            break  # cancelled again while killing: go straight to SIGKILL
    _signal_group(pgid, signal.SIGKILL)
    with contextlib.suppress(asyncio.CancelledError):
        await wait_exit(process, timeout_s=grace_s)


class BashTool:
    """``bash {command, timeout_s?}``; tracks running groups per session for ``kill_session``."""

    name = "bash"
    description = (
        "Run a bash command in the workspace and return its exit code and output (stdout and "
        "stderr merged, long output cut). timeout_s defaults to 120 (at most 600). Background "
        "processes are killed when the command returns; there is no interactive input."
    )

    def __init__(self, *, locks: WorkspaceLocks | None = None, limits: BashLimits | None = None):
        self._locks = locks or WorkspaceLocks()
        self._limits = limits or BashLimits()
        self._running: dict[str, set[asyncio.subprocess.Process]] = {}

    @property
    def parameters(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {
                "command": {"type": "string"},
                "timeout_s": {"type": "number", "exclusiveMinimum": 0},
            },
            "required": ["command"],
            "additionalProperties": False,
        }

    def is_concurrency_safe(self, args: dict[str, Any]) -> object:
        return False

    async def kill_session(self, session_id: str) -> None:
        """Kill every process group this tool started for ``session_id`` and await them."""
        for process in list(self._running.get(session_id, ())):
            await kill_process_group(process, grace_s=self._limits.kill_grace_s)

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        command = args.get("command")
        if not isinstance(command, str) or not command.strip():
            return ToolOutcome("error: command must be a non-empty string", is_error=True)
        timeout_s = args.get("timeout_s", self._limits.default_timeout_s)
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or timeout_s <= 0:
            return ToolOutcome("error: timeout_s must be a positive number", is_error=True)
        timeout_s = min(float(timeout_s), self._limits.max_timeout_s)
        async with self._locks.lock_for(ctx.workspace):
            return await self._run(command, timeout_s, ctx)

    async def _run(self, command: str, timeout_s: float, ctx: ToolContext) -> ToolOutcome:
        process = await asyncio.create_subprocess_exec(
            "bash",
            "-c",
            command,
            cwd=str(ctx.workspace),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        running = self._running.setdefault(ctx.session_id, set())
        running.add(process)
        collected = bytearray()
        dropped = 0
        cap = self._limits.output_chars * 4  # bytes; decoded text is cut in characters below

        async def pump() -> None:
            nonlocal dropped
            assert process.stdout is not None
            while chunk := await process.stdout.read(65536):
                room = cap - len(collected)
                collected.extend(chunk[: max(room, 0)])
                dropped += max(len(chunk) - max(room, 0), 0)

        reader = asyncio.create_task(pump())
        timed_out = False
        try:
            timed_out = not await wait_exit(process, timeout_s=timeout_s)
            await kill_process_group(process, grace_s=self._limits.kill_grace_s)
            # Every group member is gone, so the pipe closes; a process that left the group
            # (setsid) could still hold it, hence the bound.
            await asyncio.wait({reader}, timeout=self._limits.kill_grace_s + 1.0)
            if not reader.done():
                reader.cancel()
                dropped = max(dropped, 1)
        except BaseException:
            # Cancelled (/stop) or anything else: the whole group dies before we go on.
            await kill_process_group(process, grace_s=self._limits.kill_grace_s)
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader
            raise
        finally:
            running.discard(process)
        return self._outcome(collected, dropped, process.returncode, timed_out, timeout_s)

    def _outcome(
        self, data: bytearray, dropped: int, code: int | None, timed_out: bool, timeout_s: float
    ) -> ToolOutcome:
        text = data.decode("utf-8", "replace")
        limit = self._limits.output_chars
        note = ""
        if len(text) > limit or dropped:
            extra = max(len(text) - limit, 0)
            text = text[:limit]
            note = f"\n[output cut: {extra} more characters and {dropped} more bytes not shown]"
        if timed_out:
            head = f"timed out after {timeout_s:g}s; the process group was killed"
            return ToolOutcome(f"{head}\n{text}{note}".rstrip(), is_error=True)
        head = f"exit code {code}"
        return ToolOutcome(f"{head}\n{text}{note}".rstrip(), is_error=code != 0)


__all__ = ["BashLimits", "BashTool", "kill_process_group"]
