"""bash: output, exit codes, caps, and killing the whole process group.

The process-group tests read host pids from the command, so they run with the sandbox off on
purpose (inside it ``$!`` is a pid of the sandbox's own namespace); tests/agent/test_sandbox.py
shows the same guarantees for the sandbox.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from engine.events import HumanSource
from engine.tools.base import ToolContext
from engine.tools.bash import BashLimits, BashTool
from engine.tools.sandbox import SandboxSettings
from tests.agent.proc_util import alive, wait_for_file

FAST = BashLimits(kill_grace_s=0.5)
UNCONFINED = SandboxSettings(enabled=False)


def ctx(ws: Path) -> ToolContext:
    return ToolContext(session_id="s1", workspace=ws, turn_id="t1", source=HumanSource())


async def test_runs_in_workspace_and_reports_exit_code(tmp_path: Path) -> None:
    tool = BashTool(limits=FAST)
    out = await tool.run({"command": "pwd; echo err >&2; exit 3"}, ctx(tmp_path))
    assert out.is_error
    assert out.content.splitlines()[0] == "exit code 3"
    assert str(tmp_path.resolve()) in out.content
    assert "err" in out.content
    ok = await tool.run({"command": "echo hi"}, ctx(tmp_path))
    assert not ok.is_error and ok.content == "exit code 0\nhi"


async def test_output_is_capped_with_a_note(tmp_path: Path) -> None:
    tool = BashTool(limits=BashLimits(output_chars=100, kill_grace_s=0.5))
    out = await tool.run({"command": "yes x | head -c 100000"}, ctx(tmp_path))
    assert "[output cut:" in out.content
    assert len(out.content) < 400


async def test_timeout_kills_the_whole_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    tool = BashTool(limits=FAST, sandbox=UNCONFINED)
    command = f"sleep 300 & echo $! > {pidfile}; wait"
    out = await tool.run({"command": command, "timeout_s": 0.5}, ctx(tmp_path))
    assert out.is_error and out.content.startswith("timed out after 0.5s")
    grandchild = int(pidfile.read_text())
    assert not alive(grandchild)


async def test_background_job_does_not_outlive_the_call(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    tool = BashTool(limits=FAST, sandbox=UNCONFINED)
    out = await tool.run({"command": f"sleep 300 & echo $! > {pidfile}"}, ctx(tmp_path))
    assert out.content.startswith("exit code 0")
    assert not alive(int(pidfile.read_text()))


async def test_cancellation_kills_the_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    tool = BashTool(limits=FAST, sandbox=UNCONFINED)
    task = asyncio.create_task(
        tool.run({"command": f"sleep 300 & echo $! > {pidfile}; wait"}, ctx(tmp_path))
    )
    grandchild = int(await wait_for_file(pidfile))
    assert alive(grandchild)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not alive(grandchild)


async def test_bad_arguments(tmp_path: Path) -> None:
    tool = BashTool(limits=FAST)
    assert (await tool.run({"command": ""}, ctx(tmp_path))).is_error
    assert (await tool.run({"command": "true", "timeout_s": -1}, ctx(tmp_path))).is_error
    assert tool.is_concurrency_safe({"command": "true"}) is not True
