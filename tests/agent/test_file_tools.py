"""File tools: workspace confinement (incl. symlink escape and ../x), edit rules, caps."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from engine.events import HumanSource
from engine.tools.base import ToolContext
from engine.tools.files import (
    SEARCH_CHILD_TAG,
    EditFileTool,
    FileLimits,
    GrepTool,
    ListFilesTool,
    ReadFileTool,
    WriteFileTool,
    file_tools,
)
from engine.tools.search import read_regular


class MdHooks:
    """The plan service's .md hooks, recording md_written calls."""

    def __init__(self, md: Path) -> None:
        self.md = md
        self.written: list[str] = []

    async def session_md_path(self, session_id: str) -> Path | None:
        return self.md

    async def md_written(self, session_id: str) -> None:
        self.written.append(session_id)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text("one\ntwo\nthree\n")
    (root / "src").mkdir()
    (root / "src" / "m.py").write_text("def f():\n    return 1\n")
    return root


def ctx(ws: Path) -> ToolContext:
    return ToolContext(session_id="s1", workspace=ws, turn_id="t1", source=HumanSource())


async def test_read_file_numbers_lines_and_pages(ws: Path) -> None:
    out = await ReadFileTool().run({"path": "a.txt", "offset": 2, "limit": 1}, ctx(ws))
    assert not out.is_error
    assert out.content.startswith("2\ttwo")
    assert "offset=3" in out.content


async def test_read_outside_workspace_is_refused(ws: Path, tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("s")
    out = await ReadFileTool().run({"path": "../secret.txt"}, ctx(ws))
    assert out.is_error and "outside the workspace" in out.content
    out = await ReadFileTool().run({"path": str(tmp_path / "secret.txt")}, ctx(ws))
    assert out.is_error and "outside the workspace" in out.content


async def test_write_dotdot_is_refused_and_nothing_written(ws: Path, tmp_path: Path) -> None:
    out = await WriteFileTool().run({"path": "../x", "content": "no"}, ctx(ws))
    assert out.is_error and "outside the workspace" in out.content
    assert not (tmp_path / "x").exists()
    out = await WriteFileTool().run({"path": "src/../../x", "content": "no"}, ctx(ws))
    assert out.is_error
    assert not (tmp_path / "x").exists()


async def test_symlink_escape_is_refused(ws: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text("outside")
    (ws / "link").symlink_to(outside)
    out = await WriteFileTool().run({"path": "link/f.txt", "content": "pwned"}, ctx(ws))
    assert out.is_error and "outside the workspace" in out.content
    assert (outside / "f.txt").read_text() == "outside"
    out = await ReadFileTool().run({"path": "link/f.txt"}, ctx(ws))
    assert out.is_error
    out = await EditFileTool().run(
        {"path": "link/f.txt", "old_text": "outside", "new_text": "x"}, ctx(ws)
    )
    assert out.is_error
    assert (outside / "f.txt").read_text() == "outside"


async def test_session_md_outside_workspace_is_allowed_and_hooked(ws: Path, tmp_path: Path) -> None:
    md = tmp_path / "home" / "session" / ".plangate_plan_s1.md"
    md.parent.mkdir(parents=True)
    hooks = MdHooks(md)
    tools = {t.name: t for t in file_tools(hooks=hooks)}
    out = await tools["write_file"].run({"path": str(md), "content": "# Plan\n"}, ctx(ws))
    assert not out.is_error, out.content
    assert md.read_text() == "# Plan\n"
    assert hooks.written == ["s1"]
    out = await tools["edit_file"].run(
        {"path": str(md), "old_text": "# Plan", "new_text": "# Better"}, ctx(ws)
    )
    assert not out.is_error
    assert hooks.written == ["s1", "s1"]
    # A sibling of the .md is still outside.
    out = await tools["write_file"].run(
        {"path": str(md.parent / "other.md"), "content": "x"}, ctx(ws)
    )
    assert out.is_error
    # A project write does not call the hook.
    await tools["write_file"].run({"path": "b.txt", "content": "b"}, ctx(ws))
    assert hooks.written == ["s1", "s1"]


async def test_write_creates_parents(ws: Path) -> None:
    out = await WriteFileTool().run({"path": "new/deep/f.txt", "content": "hi"}, ctx(ws))
    assert not out.is_error
    assert (ws / "new" / "deep" / "f.txt").read_text() == "hi"


async def test_edit_file_missing_and_not_unique(ws: Path) -> None:
    tool = EditFileTool()
    (ws / "d.txt").write_text("x = 1\nx = 1\n")
    out = await tool.run({"path": "d.txt", "old_text": "y = 2", "new_text": "z"}, ctx(ws))
    assert out.is_error and "not found" in out.content
    out = await tool.run({"path": "d.txt", "old_text": "x = 1", "new_text": "x = 2"}, ctx(ws))
    assert out.is_error and "2 times" in out.content
    assert (ws / "d.txt").read_text() == "x = 1\nx = 1\n"
    out = await tool.run(
        {"path": "d.txt", "old_text": "x = 1", "new_text": "x = 2", "replace_all": True},
        ctx(ws),
    )
    assert not out.is_error
    assert (ws / "d.txt").read_text() == "x = 2\nx = 2\n"
    out = await tool.run({"path": "a.txt", "old_text": "two", "new_text": "2"}, ctx(ws))
    assert not out.is_error
    assert (ws / "a.txt").read_text() == "one\n2\nthree\n"


async def test_list_files_and_pattern(ws: Path) -> None:
    (ws / ".git").mkdir()
    (ws / ".git" / "HEAD").write_text("ref")
    out = await ListFilesTool().run({}, ctx(ws))
    assert out.content.splitlines() == ["a.txt", "src/m.py"]
    out = await ListFilesTool().run({"pattern": "*.py"}, ctx(ws))
    assert out.content == "src/m.py"
    out = await ListFilesTool().run({"path": ".."}, ctx(ws))
    assert out.is_error


async def test_grep_with_glob_and_cap(ws: Path) -> None:
    out = await GrepTool().run({"pattern": r"return \d"}, ctx(ws))
    assert out.content == "src/m.py:2:     return 1"
    out = await GrepTool().run({"pattern": "[ef]", "glob": "*.py"}, ctx(ws))
    assert out.content.count("src/m.py") == 2
    assert all(line.startswith("src/m.py") for line in out.content.splitlines())
    (ws / "many.txt").write_text("hit\n" * 50)
    capped = GrepTool(limits=FileLimits(grep_matches=5))
    out = await capped.run({"pattern": "hit"}, ctx(ws))
    assert out.content.count("many.txt:") == 5
    assert "45 more not shown" in out.content
    out = await GrepTool().run({"pattern": "("}, ctx(ws))
    assert out.is_error


async def test_read_output_is_cut_with_a_note(ws: Path) -> None:
    (ws / "big.txt").write_text("x" * 500)
    out = await ReadFileTool(limits=FileLimits(read_chars=100)).run({"path": "big.txt"}, ctx(ws))
    assert "[output cut:" in out.content
    assert len(out.content) < 200


def test_concurrency_answers() -> None:
    tools = {t.name: t for t in file_tools()}
    assert tools["read_file"].is_concurrency_safe({}) is True
    assert tools["list_files"].is_concurrency_safe({}) is True
    assert tools["grep"].is_concurrency_safe({}) is True
    assert tools["write_file"].is_concurrency_safe({}) is not True
    assert tools["edit_file"].is_concurrency_safe({}) is not True


async def test_grep_and_list_do_not_follow_links_out_of_the_workspace(
    ws: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("password=hunter2\n")
    (ws / "innocent.txt").symlink_to(secret)
    outside_dir = tmp_path / "odir"
    outside_dir.mkdir()
    (outside_dir / "s.txt").write_text("password=x\n")
    (ws / "dirlink").symlink_to(outside_dir)
    out = await GrepTool().run({"pattern": "password"}, ctx(ws))
    assert out.content == "(no matches)"
    listed = await ListFilesTool().run({}, ctx(ws))
    assert "innocent.txt" not in listed.content and "s.txt" not in listed.content


async def test_read_file_past_the_end_and_empty(ws: Path) -> None:
    (ws / "e.txt").write_text("")
    assert (await ReadFileTool().run({"path": "e.txt"}, ctx(ws))).content == "(e.txt is empty)"
    out = await ReadFileTool().run({"path": "a.txt", "offset": 10}, ctx(ws))
    assert "past the end" in out.content and "3 lines" in out.content


async def test_grep_with_a_runaway_pattern_is_stopped_with_a_clear_result(ws: Path) -> None:
    # Forty a's and a b: Python's re would backtrack for ever; the child is killed instead.
    (ws / "a.txt").write_text("aaa\n" + "a" * 40 + "b\n")
    tool = GrepTool(limits=FileLimits(grep_timeout_s=1.0))
    out = await asyncio.wait_for(tool.run({"pattern": "^(a+)+$|^aaa$"}, ctx(ws)), 20)
    assert out.is_error
    assert "grep stopped after 1 s" in out.content
    assert "a.txt:1: aaa" in out.content  # what was found before the deadline is kept


async def test_grep_cancelled_kills_its_search(ws: Path) -> None:
    (ws / "a.txt").write_text("a" * 40 + "b\n")
    task = asyncio.create_task(GrepTool().run({"pattern": "^(a+)+$"}, ctx(ws)))
    # The search child is running before the cancel (else its absence after proves nothing).
    for _ in range(3000):
        if _search_children():
            break
        await asyncio.sleep(0.01)
    assert _search_children()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)
    assert not _search_children()


async def test_the_search_child_is_isolated_from_the_project_and_the_secrets(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ws)
    monkeypatch.setenv("PLANGATE_TELEGRAM_TOKEN", "123:secret-token")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("PYTHONPATH", str(ws))
    (ws / "a.txt").write_text("a" * 40 + "b\n")
    task = asyncio.create_task(GrepTool().run({"pattern": "^(a+)+$"}, ctx(ws)))
    try:
        pids: list[int] = []
        for _ in range(3000):
            if pids := _search_child_pids():
                break
            await asyncio.sleep(0.01)
        assert pids
        pid = pids[0]
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        cwd = os.readlink(f"/proc/{pid}/cwd")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    names = sorted(e.split(b"=", 1)[0].decode() for e in environ if e)
    assert names == ["LANG", "PATH"]
    assert cwd == "/"
    assert argv[1:5] == [b"-I", b"-S", b"-B", b"-c"]


def _search_child_pids() -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid() and SEARCH_CHILD_TAG in cmd:
            pids.append(int(entry.name))
    return pids


def _search_children() -> list[str]:
    """Command lines of this process's children running the grep search."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == os.getpid() and SEARCH_CHILD_TAG in cmd:
            found.append(cmd)
    return found


async def test_non_regular_files_are_refused_or_skipped(ws: Path) -> None:
    os.mkfifo(ws / "pipe")
    (ws / "src" / "link").symlink_to(ws / "pipe")
    out = await asyncio.wait_for(ReadFileTool().run({"path": "pipe"}, ctx(ws)), 10)
    assert out.is_error and "'pipe' is not a file" in out.content
    out = await asyncio.wait_for(GrepTool().run({"pattern": "x", "path": "pipe"}, ctx(ws)), 10)
    assert out.is_error and "not a regular file" in out.content
    out = await asyncio.wait_for(GrepTool().run({"pattern": "one|return"}, ctx(ws)), 10)
    assert out.content.splitlines() == ["a.txt:1: one", "src/m.py:2:     return 1"]
    out = await asyncio.wait_for(ListFilesTool().run({}, ctx(ws)), 10)
    assert out.content.splitlines() == ["a.txt", "src/m.py"]


def test_a_fifo_swapped_in_after_the_check_does_not_block_the_read(ws: Path) -> None:
    # The walk's stat and the open are two steps: the open itself must not wait for a writer.
    os.mkfifo(ws / "late")
    assert read_regular(ws / "late", 1_000) is None


async def test_writes_and_edits_land_while_the_default_thread_pool_is_busy(ws: Path) -> None:
    # The loop's default pool (asyncio.to_thread) cut to one thread, and that thread held:
    # a write that needed it would wait for the hold; the file tools' own pool does not.
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(max_workers=1))
    release = threading.Event()
    held = asyncio.create_task(asyncio.to_thread(release.wait, 10))
    try:
        await asyncio.sleep(0)  # the held task's first step submits its job
        wrote = await asyncio.wait_for(
            WriteFileTool().run({"path": "new/b.txt", "content": "héllo\n"}, ctx(ws)), 5
        )
        assert (wrote.content, wrote.is_error) == ("wrote 6 characters to new/b.txt", False)
        assert (ws / "new" / "b.txt").read_text() == "héllo\n"
        edited = await asyncio.wait_for(
            EditFileTool().run({"path": "a.txt", "old_text": "two", "new_text": "2"}, ctx(ws)),
            5,
        )
        assert (edited.content, edited.is_error) == ("replaced 1 occurrence(s) in a.txt", False)
        assert (ws / "a.txt").read_text() == "one\n2\nthree\n"
        assert not held.done()  # the default pool's one thread was busy all along
    finally:
        release.set()
        assert await asyncio.wait_for(held, 5)
