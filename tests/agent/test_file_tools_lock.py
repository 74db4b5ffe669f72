"""Write tools resolve their path under the workspace lock (docs/agent.md).

A ``bash`` holding the lock may swap a folder for a symlink that points out of the workspace;
a write that resolved its path before waiting for the lock would then write outside.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from engine.events import HumanSource
from engine.tools.base import ToolContext, ToolOutcome
from engine.tools.files import EditFileTool, WriteFileTool
from engine.tools.workspace import WorkspaceLocks


def ctx(ws: Path) -> ToolContext:
    return ToolContext(session_id="s1", workspace=ws, turn_id="t1", source=HumanSource())


async def _swap_while_locked(
    tmp_path: Path, run: object, *, tool_cls: type[WriteFileTool] | type[EditFileTool]
) -> tuple[ToolOutcome, Path]:
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    (ws / "sub" / "f.txt").write_text("inside")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text("outside")
    locks = WorkspaceLocks()
    tool = tool_cls(locks=locks)
    lock = locks.lock_for(ws)
    await lock.acquire()  # another writer (a bash command) is running in this workspace
    try:
        task = asyncio.create_task(tool.run(run, ctx(ws)))  # type: ignore[arg-type]
        for _ in range(20):
            await asyncio.sleep(0)
        assert not task.done()
        # What that bash does meanwhile: the folder becomes a link out of the workspace.
        (ws / "sub").rename(ws / "sub-old")
        (ws / "sub").symlink_to(outside)
    finally:
        lock.release()
    return await asyncio.wait_for(task, 10.0), outside


@pytest.mark.parametrize(
    ("tool_cls", "args"),
    [
        (WriteFileTool, {"path": "sub/f.txt", "content": "pwned"}),
        (EditFileTool, {"path": "sub/f.txt", "old_text": "outside", "new_text": "pwned"}),
    ],
)
async def test_symlink_swapped_while_waiting_for_the_lock_is_seen(
    tmp_path: Path,
    tool_cls: type[WriteFileTool] | type[EditFileTool],
    args: dict[str, object],
) -> None:
    out, outside = await _swap_while_locked(tmp_path, args, tool_cls=tool_cls)
    assert out.is_error and "outside the workspace" in out.content, out.content
    assert (outside / "f.txt").read_text() == "outside"
