"""Every file tool reads a bounded number of bytes whatever the file, and a file name that is
not UTF-8 never makes a result that cannot be stored.

Memory is measured in the test itself, without psutil: the kernel's high-water mark of this
process's resident set (``VmHWM`` in /proc/self/status), reset first through
/proc/self/clear_refs, against the resident set before the call.
"""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest

from engine.events import HumanSource, ToolResult
from engine.model.script import call, say
from engine.model.scripted import ScriptedProvider
from engine.tools.base import ToolContext
from engine.tools.files import EditFileTool, GrepTool, ListFilesTool, ReadFileTool
from tests.engine.helpers import OWNER, engine_rig, settle
from tests.keys import chat

MB = 1 << 20
# Well over what any one read keeps (a 1 MB chunk and the shown window), well under the
# file sizes below: a read that holds the file, or one long line of it, blows through it.
GROWTH_LIMIT = 50 * MB


def ctx(ws: Path) -> ToolContext:
    return ToolContext(session_id="s", workspace=ws, turn_id="t", source=HumanSource())


def resident() -> int:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def peak() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/self/status")


async def growth_of_read(ws: Path, name: str) -> tuple[int, str]:
    gc.collect()
    try:
        Path("/proc/self/clear_refs").write_text("5")  # the high-water mark starts again
    except OSError:
        pytest.skip("this kernel cannot reset the peak RSS (/proc/self/clear_refs)")
    before = resident()
    out = await ReadFileTool().run({"path": name}, ctx(ws))
    return peak() - before, out.content


async def test_read_file_of_a_200_mb_file_with_no_newline_keeps_memory_flat(
    tmp_path: Path,
) -> None:
    big = tmp_path / "one-line.log"
    block = b"x" * MB
    with big.open("wb") as handle:
        for _ in range(200):
            handle.write(block)
    growth, content = await growth_of_read(tmp_path, "one-line.log")
    assert growth < GROWTH_LIMIT, f"{growth / MB:.0f} MB"
    first = content.splitlines()[0]
    assert first.startswith("1\txxxx") and "[line cut: about" in first
    assert "read_file read the first 64 MB of this 200.0 MB file" in content


async def test_read_file_of_a_sparse_20_gb_file_keeps_memory_flat(tmp_path: Path) -> None:
    sparse = tmp_path / "disk.img"
    with sparse.open("wb") as handle:
        handle.truncate(20 << 30)  # as `truncate -s 20G disk.img`: no block written
    growth, content = await growth_of_read(tmp_path, "disk.img")
    assert growth < GROWTH_LIMIT, f"{growth / MB:.0f} MB"
    assert "this 20.0 GB file" in content and "more lines may follow" in content


async def test_the_other_file_tools_read_a_bounded_amount_of_a_huge_file(
    tmp_path: Path,
) -> None:
    with (tmp_path / "disk.img").open("wb") as handle:
        handle.truncate(20 << 30)
    (tmp_path / "notes.txt").write_text("the needle\n")
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")
    before = resident()
    found = await GrepTool().run({"pattern": "needle"}, ctx(tmp_path))
    listed = await ListFilesTool().run({}, ctx(tmp_path))
    edited = await EditFileTool().run(
        {"path": "disk.img", "old_text": "a", "new_text": "b"}, ctx(tmp_path)
    )
    assert peak() - before < GROWTH_LIMIT
    assert edited.is_error and "edit_file edits files up to 16 MB" in edited.content
    assert found.content == "notes.txt:1: the needle"  # the 20 GB file is skipped, not read
    assert "disk.img" in listed.content


async def test_a_file_name_that_is_not_utf8_is_listed_and_grepped_with_replacement_characters(
    tmp_path: Path,
) -> None:
    model = ScriptedProvider(
        [
            call("list_files", {}),
            call("grep", {"pattern": "needle"}),
            call("read_file", {"path": "good.txt"}),
            say("Listed and searched."),
        ]
    )
    async with engine_rig(tmp_path, model) as rig:
        work = os.fsencode(rig.workspace)
        fd = os.open(work + b"/bad\xff.txt", os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(fd, b"a needle in a badly named file\n")
        os.close(fd)
        (rig.workspace / "good.txt").write_text("plain text\n", encoding="utf-8")
        sid = await rig.engine.session_for_chat(chat(-100))
        await rig.engine.user_message(sid, "what is here?", actor=OWNER, message_id="1")
        await settle(rig.engine, sid)
        results = [
            s.event
            for s in await rig.storage.log.read(sid, types={"tool/result"})
            if isinstance(s.event, ToolResult)
        ]
        listed, grepped, _read = results
        assert "bad\ufffd.txt" in listed.content and not listed.is_error
        assert "bad\ufffd.txt:1: a needle in a badly named file" in grepped.content
        replies = [c.args["text"] for c in rig.channel.of("reply")]
        assert replies and replies[-1].startswith("Listed and searched.")
