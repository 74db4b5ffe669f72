"""A /stop (the call's task cancelled) at the two moments of a sandboxed bash call that wait on
a thread: while the call's pids cgroup is being made, and while a call whose command ended
waits for its sandbox to be gone. Real bubblewrap, real cgroups, real threads.

To land the cancellation at exactly that moment, the loop's default thread pool holds the one
job the call is waiting on there (a slow disk at that step) until the test releases it.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from engine.events import HumanSource
from engine.tools.base import ToolContext, ToolOutcome
from engine.tools.bash import BashLimits, BashTool
from engine.tools.sandbox import CallCgroup, SandboxSettings, probe

FAST = BashLimits(kill_grace_s=0.5)
# The jobs a sandboxed call hands to asyncio.to_thread, by the name of what they run.
MAKE_CGROUP = "_new_cgroup"
READ_SANDBOX_PID = "_read_info.<locals>.read"


def _runs(fn: Callable[..., object]) -> str:
    """The qualified name of what a pool job runs (asyncio.to_thread wraps it in a partial)."""
    if isinstance(fn, functools.partial) and fn.args:
        return str(getattr(fn.args[0], "__qualname__", ""))
    return str(getattr(fn, "__qualname__", ""))


class HoldingPool(ThreadPoolExecutor):
    """A real thread pool that holds the jobs running ``hold`` until :attr:`release` is set,
    and keeps what every job running ``hold`` or one of ``watch`` returned."""

    def __init__(self, hold: str, *, watch: tuple[str, ...] = ()) -> None:
        super().__init__(max_workers=4)
        self.hold = hold
        self.watch = (hold, *watch)
        self.release = threading.Event()
        self.held = asyncio.Event()  # submit() runs on the loop's thread (run_in_executor)
        self.results: dict[str, list[object]] = {name: [] for name in self.watch}
        self.finished = threading.Event()  # the held job has run

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        name = _runs(fn)
        if name not in self.watch:
            return super().submit(fn, *args, **kwargs)
        holding = name == self.hold

        def job() -> object:
            if holding:
                self.release.wait(10)
            try:
                result = fn(*args, **kwargs)
                self.results[name].append(result)
                return result
            finally:
                if holding:
                    self.finished.set()

        if holding:
            self.held.set()
        return super().submit(job)


def awaiting(task: asyncio.Task[Any]) -> list[str]:
    """The coroutines ``task`` is suspended in, outermost first (``cr_await`` chain)."""
    names: list[str] = []
    coro: object = task.get_coro()
    while isinstance(coro, Coroutine):
        names.append(coro.cr_code.co_qualname)
        coro = coro.cr_await
    return names


async def quiet() -> None:
    """Wait (bounded) until no task but this test's is left on the loop."""
    for _ in range(1000):
        if asyncio.all_tasks() == {asyncio.current_task()}:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"tasks left behind: {asyncio.all_tasks()}")


def ctx(ws: Path) -> ToolContext:
    return ToolContext(session_id="s1", workspace=ws, turn_id="t1", source=HumanSource())


def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


def start(pool: HoldingPool, ws: Path, command: str) -> asyncio.Task[ToolOutcome]:
    asyncio.get_running_loop().set_default_executor(pool)
    return asyncio.create_task(BashTool(limits=FAST).run({"command": command}, ctx(ws)))


async def test_a_stop_while_the_cgroup_is_made_waits_for_it_and_removes_it(
    tmp_path: Path,
) -> None:
    ws = workspace(tmp_path)
    pool = HoldingPool(MAKE_CGROUP)
    if probe(SandboxSettings()).process_limit != "cgroup":
        # Not root, or no writable pids hierarchy: a call makes no cgroup, so there is no
        # moment to land on. Say that much, and that the call still runs.
        outcome = await start(pool, ws, "touch ran")
        assert outcome.content == "exit code 0" and (ws / "ran").exists()
        assert pool.results[MAKE_CGROUP] == []
        return
    call = start(pool, ws, "touch ran")
    made: list[object] = []
    try:
        await asyncio.wait_for(pool.held.wait(), 10)
        call.cancel()  # the /stop lands while the folder is being made
        pool.release.set()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(call, 10)
        assert await asyncio.to_thread(pool.finished.wait, 10)
        made = pool.results[MAKE_CGROUP]
        [cgroup] = made
        assert isinstance(cgroup, CallCgroup)
        assert not cgroup.folder.exists()  # made after the /stop, and removed all the same
        assert not (ws / "ran").exists()  # the command never started
        await quiet()
    finally:
        pool.release.set()
        for left in made:  # a failed run leaves no folder behind on the host
            if isinstance(left, CallCgroup):
                left.remove()


async def test_a_stop_while_a_finished_call_waits_for_its_sandbox_is_raised_after_clean_up(
    tmp_path: Path,
) -> None:
    ws = workspace(tmp_path)
    # The sandbox's pid (read from bwrap's info pipe) is what the end of a call waits for.
    pool = HoldingPool(READ_SANDBOX_PID, watch=(MAKE_CGROUP,))
    call = start(pool, ws, "echo done > ran")
    try:

        async def in_finish() -> None:
            while "_Confined.finish" not in awaiting(call):
                assert not call.done(), call.result()
                await asyncio.sleep(0.005)

        await asyncio.wait_for(in_finish(), 10)
        assert (ws / "ran").read_text() == "done\n"  # the command ran to its end
        call.cancel()  # the /stop lands while the call makes sure its sandbox is gone
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(call, 10)  # not swallowed: the turn ends as stopped
        # The clean-up ran before the cancellation went on: the call's cgroup is gone.
        cgroups = pool.results[MAKE_CGROUP]
        assert len(cgroups) == (probe(SandboxSettings()).process_limit == "cgroup")
        for cgroup in cgroups:
            assert isinstance(cgroup, CallCgroup) and not cgroup.folder.exists()
    finally:
        pool.release.set()
    assert await asyncio.to_thread(pool.finished.wait, 10)
    await quiet()
