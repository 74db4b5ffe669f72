"""The ``bash`` tool: one command in the workspace, confined by bubblewrap.

The command runs as ``bash -c`` inside the sandbox of :mod:`engine.tools.sandbox` (its own
pid namespace: when the call ends the namespace ends and every process in it, ``setsid`` and
``nohup`` jobs included). The workspace is mounted read-only before ``plan init`` and writable
in Active and NoPlan; after ``plan init`` bash does not run at all. The plan state is read at
each call through ``plan_view``. Without bubblewrap the call is refused with the fix, unless
the sandbox was switched off on purpose (``SandboxSettings(enabled=False)``).

The outer process runs with ``start_new_session=True`` so it leads a fresh process
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
import dataclasses
import json
import logging
import os
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from engine.tools.base import ToolContext, ToolOutcome
from engine.tools.boundary import Boundary, BoundaryPolicy, PlanViewSource, ReadOnlyRoots
from engine.tools.disk import WATCH_INTERVAL_S, DiskReserve
from engine.tools.effects import BUILTIN
from engine.tools.plan_view import GATE_TEXTS
from engine.tools.sandbox import (
    CallCgroup,
    SandboxSettings,
    guarded,
    helper_env,
    new_call_cgroup,
    probe,
    reap_adopted,
    sandbox_env,
)
from engine.tools.workspace import WorkspaceLocks

# Where a setup run sees its project's package caches, and the variables that point the
# package managers there (uv copies out of its cache instead of linking, so nothing a plan
# does to its environment afterwards can reach the cache the next setup reads).
CACHE_MOUNT = "/var/cache/plangate"
CACHE_EXPORTS = (
    f"export PIP_CACHE_DIR={CACHE_MOUNT}/pip UV_CACHE_DIR={CACHE_MOUNT}/uv UV_LINK_MODE=copy "
    f"npm_config_cache={CACHE_MOUNT}/npm YARN_CACHE_FOLDER={CACHE_MOUNT}/yarn "
    f"XDG_CACHE_HOME={CACHE_MOUNT}/xdg\n"
)


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
# How long the end of a call waits for a SIGKILLed sandbox init to be gone.
_KILL_WAIT_S = 2.0


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


@dataclass(frozen=True, slots=True)
class CommandRun:
    """How one sandboxed command ended, before it is worded for the model.

    ``exit_code`` is ``None`` when it timed out or never started (``problem`` says why);
    ``output`` is stdout and stderr merged, capped at the output limit (its head, or with
    ``keep="tail"`` its end); ``cut`` counts the characters and bytes left out.
    """

    exit_code: int | None
    output: str
    timed_out: bool = False
    timeout_s: float = 0.0
    cut: tuple[int, int] = (0, 0)
    problem: str | None = None


class BashTool:
    """``bash {command, timeout_s?, network?, reason?}``; tracks running groups per session
    for ``kill_session``."""

    name = "bash"
    declaration = BUILTIN["bash"]
    description = (
        "Run a bash command in the workspace and return its exit code and output (stdout and "
        "stderr merged, long output cut). timeout_s defaults to 120 (at most 600). Background "
        "processes are killed when the command returns; there is no interactive input. The "
        "command runs in a sandbox without network; set network: true, with a short reason, "
        "only when it truly needs the network (installing a package, fetching a page): the "
        "owner is asked to allow that."
    )

    def __init__(
        self,
        *,
        locks: WorkspaceLocks | None = None,
        limits: BashLimits | None = None,
        sandbox: SandboxSettings | None = None,
        plan_view: PlanViewSource | None = None,
        read_only_roots: ReadOnlyRoots | None = None,
        boundary: BoundaryPolicy | None = None,
        disk: DiskReserve | None = None,
    ):
        """``boundary`` decides the mounts; without it one is made of ``sandbox``,
        ``plan_view`` (NoPlan when that is not given either) and ``read_only_roots``.
        ``disk``: the reserve kept for plangate's own writes (engine/tools/disk.py): no
        command starts below it, and one that brings the free space below it is stopped."""
        self._disk = disk if disk is not None and disk.enabled else None
        self._locks = locks or WorkspaceLocks()
        self._limits = limits or BashLimits()
        self._policy = boundary or BoundaryPolicy(
            settings=sandbox or SandboxSettings(),
            plan_view=plan_view,
            read_only_roots=read_only_roots,
        )
        self._sandbox = self._policy.settings
        self._running: dict[str, set[asyncio.subprocess.Process]] = {}

    @property
    def parameters(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {
                "command": {"type": "string"},
                "timeout_s": {"type": "number", "exclusiveMinimum": 0},
                "network": {
                    "type": "boolean",
                    "description": "Run with the network (the owner is asked first).",
                },
                "reason": {
                    "type": "string",
                    "description": "Why the network is needed, for the owner.",
                },
            },
            "required": ["command"],
            "additionalProperties": False,
        }

    def is_concurrency_safe(self, args: dict[str, Any]) -> object:
        return False

    @property
    def boundary(self) -> BoundaryPolicy:
        """The policy this tool's calls are confined by (shared with the file tools)."""
        return self._policy

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
        network = args.get("network", False)
        if not isinstance(network, bool):
            return ToolOutcome("error: network must be true or false", is_error=True)
        reason = args.get("reason", "")
        if not isinstance(reason, str):
            return ToolOutcome("error: reason must be a string", is_error=True)
        async with self._locks.lock_for(ctx.workspace):
            view = await self._policy.view(ctx.session_id)
            if view.state == "post_init":  # the gate refuses first; this holds without it too
                return ToolOutcome(GATE_TEXTS["gate-editing-bash"], is_error=True)
            boundary = await self._policy.for_call(ctx, view=view)
            if network:
                # This one call has the host's network; the approval gate asked the owner
                # before the call got here (docs/agent.md, "Tool approvals").
                boundary = boundary.with_network(True)
            ran = await self._run(command, timeout_s, session_id=ctx.session_id, boundary=boundary)
        if ran.problem is not None:
            return ToolOutcome(ran.problem, is_error=True)
        return self._outcome(ran)

    async def run_check(
        self,
        command: str,
        *,
        session_id: str,
        workspace: Path,
        hidden: Sequence[Path] = (),
    ) -> CommandRun:
        """Run a check (docs/checks.md): the same sandbox as a call, with the workspace
        read-only and the network off whatever the settings say, the longest timeout a call
        may ask for, and the END of the output kept (a test runner's verdict is last)."""
        async with self._locks.lock_for(workspace):
            boundary = await self._policy.for_session(session_id, workspace)
            return await self._run(
                command,
                self._limits.max_timeout_s,
                session_id=session_id,
                boundary=boundary.for_check(hidden),
                keep="tail",
            )

    async def run_setup(
        self,
        script: str,
        *,
        session_id: str,
        workspace: Path,
        timeout_s: float,
        caches: Path | None = None,
    ) -> CommandRun:
        """Run a project's setup script (docs/environments.md): the session's sandbox with the
        workspace writable and the network on, ``caches`` (the project's package caches in
        plangate's home) mounted writable at :data:`CACHE_MOUNT` for this run only, its own
        timeout, and the END of the output kept (an installer's error is last)."""
        async with self._locks.lock_for(workspace):
            boundary = await self._policy.for_session(session_id, workspace)
            boundary = dataclasses.replace(boundary, writable=True, network=True)
            if caches is not None and boundary.settings.enabled:
                boundary = dataclasses.replace(boundary, binds=((caches, CACHE_MOUNT),))
                script = CACHE_EXPORTS + script
            return await self._run(
                script, timeout_s, session_id=session_id, boundary=boundary, keep="tail"
            )

    async def _run(
        self,
        command: str,
        timeout_s: float,
        *,
        session_id: str,
        boundary: Boundary,
        keep: Literal["head", "tail"] = "head",
    ) -> CommandRun:
        sandbox = boundary.settings
        if self._disk is not None:
            low = await asyncio.to_thread(self._disk.low)
            if low is not None:
                return CommandRun(exit_code=None, output="", problem=low)
        if not sandbox.enabled:
            # Unconfined on purpose, but still without the bot's secrets.
            process = await self._spawn(
                ["bash", "-c", guarded(), "bash", command],
                cwd=str(boundary.workspace),
                env=sandbox_env(sandbox, os.environ, workspace=boundary.workspace),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
            return await self._collect(process, timeout_s, session_id, _Confined(), keep)
        status = await asyncio.to_thread(probe, sandbox)
        if status.problem is not None:
            return CommandRun(exit_code=None, output="", problem=status.problem)
        info_r, info_w = os.pipe()
        cgroup: CallCgroup | None = None
        try:
            if status.process_limit == "cgroup" or status.memory_limit == "cgroup":
                # Reading mountinfo and making the folder are file IO: off the event loop. A
                # /stop meanwhile still waits for the folder, so the clean-up below removes it.
                made = asyncio.ensure_future(asyncio.to_thread(_new_cgroup, sandbox))
                try:
                    cgroup = await asyncio.shield(made)
                except asyncio.CancelledError:
                    cgroup = await made
                    raise
            # A call whose memory cgroup could not be made gets the fallback limits.
            memory_cgroup = cgroup is not None and cgroup.memory
            argv = boundary.bwrap_argv(command, info_fd=info_w, memory_cgroup=memory_cgroup)
            if cgroup is not None:
                argv = cgroup.enter_argv(argv)
            process = await self._spawn(
                argv,
                cwd="/",
                env=helper_env(),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
                pass_fds=(info_w,),
            )
        except BaseException:
            os.close(info_r)
            if cgroup is not None:
                await _Confined(cgroup=cgroup).finish(self._limits.kill_grace_s + 1.0)
            raise
        finally:
            os.close(info_w)
        confined = _Confined(cgroup=cgroup, info=asyncio.create_task(_read_info(info_r)))
        return await self._collect(process, timeout_s, session_id, confined, keep)

    async def _spawn(self, argv: list[str], **kwargs: Any) -> asyncio.subprocess.Process:
        """Start ``argv``; a cancellation during the start still kills the whole group.

        The child can run (and start jobs) before ``create_subprocess_exec`` returns, and
        asyncio's own clean-up on cancellation kills only the leader.
        """
        start = asyncio.ensure_future(asyncio.create_subprocess_exec(*argv, **kwargs))
        try:
            return await asyncio.shield(start)
        except asyncio.CancelledError:
            with contextlib.suppress(BaseException):
                process = await start
                await kill_process_group(process, grace_s=self._limits.kill_grace_s)
            raise

    async def _collect(
        self,
        process: asyncio.subprocess.Process,
        timeout_s: float,
        session_id: str,
        confined: _Confined,
        keep: Literal["head", "tail"],
    ) -> CommandRun:
        running = self._running.setdefault(session_id, set())
        running.add(process)
        collected = bytearray()
        dropped = 0
        cap = self._limits.output_chars * 4  # bytes; decoded text is cut in characters below

        async def pump() -> None:
            nonlocal dropped
            assert process.stdout is not None
            while chunk := await process.stdout.read(65536):
                if keep == "tail":
                    collected.extend(chunk)
                    over = len(collected) - cap
                    if over > 0:
                        del collected[:over]
                        dropped += over
                    continue
                room = cap - len(collected)
                collected.extend(chunk[: max(room, 0)])
                dropped += max(len(chunk) - max(room, 0), 0)

        reader = asyncio.create_task(pump())
        watch = asyncio.create_task(self._watch_disk(process)) if self._disk else None
        timed_out = False
        try:
            exited = asyncio.ensure_future(wait_exit(process, timeout_s=timeout_s))
            try:
                if watch is not None:
                    # A watch that fires kills the group, so the leader exits right after.
                    await asyncio.wait({exited, watch}, return_when=asyncio.FIRST_COMPLETED)
                timed_out = not await exited
            finally:
                exited.cancel()
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
            await confined.finish(self._limits.kill_grace_s + 1.0)
            if watch is not None and not watch.done():
                watch.cancel()
        text = collected.decode("utf-8", "replace")
        stopped = (
            watch.result() if watch is not None and watch.done() and not watch.cancelled() else None
        )
        if stopped is None and self._disk is not None:
            # A write that filled the disk between two looks: the reserve goes back now,
            # before the result is written anywhere.
            stopped = await asyncio.to_thread(self._disk.low)
        if stopped is not None:
            return CommandRun(
                exit_code=None,
                output=text,
                problem=f"{text.rstrip()}\n{stopped}".lstrip(),
            )
        limit = self._limits.output_chars
        extra = max(len(text) - limit, 0)
        if extra:
            text = text[-limit:] if keep == "tail" else text[:limit]
        return CommandRun(
            exit_code=None if timed_out else process.returncode,
            output=text,
            timed_out=timed_out,
            timeout_s=timeout_s,
            cut=(extra, dropped),
        )

    async def _watch_disk(self, process: asyncio.subprocess.Process) -> str | None:
        """While ``process`` runs, look at the free space; below the reserve, release it,
        kill the call's group and say why (``None`` when the call ended first)."""
        disk = self._disk
        assert disk is not None
        while process.returncode is None:
            await asyncio.sleep(WATCH_INTERVAL_S)
            try:
                low = disk.state().low
            except OSError:  # the home's file system cannot be read: nothing to go by
                return None
            if low:
                disk.release()
                await kill_process_group(process, grace_s=0.0)
                return disk.low()
        return None

    def _outcome(self, ran: CommandRun) -> ToolOutcome:
        text = ran.output
        extra, dropped = ran.cut
        note = ""
        if extra or dropped:
            note = f"\n[output cut: {extra} more characters and {dropped} more bytes not shown]"
        if ran.timed_out:
            head = f"timed out after {ran.timeout_s:g}s; the process group was killed"
            return ToolOutcome(f"{head}\n{text}{note}".rstrip(), is_error=True)
        head = f"exit code {ran.exit_code}"
        return ToolOutcome(f"{head}\n{text}{note}".rstrip(), is_error=ran.exit_code != 0)


def _running(pid: int) -> bool:
    """``True`` while ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


async def _read_info(fd: int) -> int | None:
    """The host pid of the sandbox's init, from bwrap's ``--info-fd`` (``None`` if it failed)."""

    def read() -> bytes:
        data = b""
        try:
            while chunk := os.read(fd, 4096):
                data += chunk
        finally:
            os.close(fd)
        return data

    raw = await asyncio.to_thread(read)
    try:
        pid = json.loads(raw.decode("utf-8", "replace")).get("child-pid")
    except (ValueError, AttributeError):
        return None
    return pid if isinstance(pid, int) else None


def _new_cgroup(sandbox: SandboxSettings) -> CallCgroup | None:
    """A fresh cgroup for one call (pids and memory), or ``None`` where none can be had."""
    return new_call_cgroup(sandbox)


@dataclass
class _Confined:
    """What must be gone before a sandboxed call returns: the sandbox init and its cgroup."""

    cgroup: CallCgroup | None = None
    info: asyncio.Task[int | None] | None = None

    async def finish(self, bound_s: float) -> None:
        """Wait (bounded) until the pid namespace is gone, then drop the cgroup.

        The namespace's init exits only after every process in it is dead, so its end is the
        end of everything the call started. Completes even when the caller is cancelled, and
        then raises the cancellation (a ``/stop`` that lands here is not lost).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + bound_s
        cancelled = False
        pid = None
        if self.info is not None:
            try:
                pid = await asyncio.shield(asyncio.wait_for(self.info, bound_s))
            except asyncio.CancelledError:
                cancelled = True
            except Exception:  # no pid from the sandbox: the cgroup still bounds the wait
                pid = None
        while loop.time() < deadline:
            gone = pid is None or not _running(pid)
            if gone and (self.cgroup is None or self.cgroup.empty()):
                break
            try:
                await asyncio.sleep(_POLL_S)
            except asyncio.CancelledError:
                cancelled = True
        if pid is not None and _running(pid):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            # The namespace's processes die with its init, but not at once: wait (bounded)
            # so the call does not return while they are still going.
            killed_by = loop.time() + _KILL_WAIT_S
            while loop.time() < killed_by and (
                _running(pid) or (self.cgroup is not None and not self.cgroup.empty())
            ):
                try:
                    await asyncio.sleep(_POLL_S)
                except asyncio.CancelledError:
                    cancelled = True
        if pid is not None:
            reap_adopted(pid)
        if self.cgroup is not None and not self.cgroup.remove():
            log.warning("plangate.tools.bash.cgroup_left folder=%s", self.cgroup.folder)
        if cancelled:
            raise asyncio.CancelledError


log = logging.getLogger("plangate.tools.bash")

__all__ = ["BashLimits", "BashTool", "CommandRun", "PlanViewSource", "kill_process_group"]
