"""File tools: read_file, list_files, grep (parallel), write_file, edit_file (exclusive).

Every path is the boundary's answer (``engine.tools.boundary``): resolved against the
session's workspace with symlinks and ``..`` resolved first, refused with a clear result when
it is outside the workspace and the read-only roots (except the session's plan ``.md``), when
it is hidden (plangate's home, the plan folder, the settings file, the secrets), or, for a
write, when the phase keeps the workspace read-only. Walks leave hidden entries out. A
successful write to that ``.md`` calls the plan service's ``md_written`` hook. Writes hold the
workspace lock (shared with ``bash``) and resolve their path under it. Output is capped with a
note saying it was cut. Errors are results (``is_error``), never exceptions.

The read side never blocks the bot: files are read only when regular (a FIFO or device is
refused or skipped, checked on a non-blocking descriptor), reads, walks and writes run on this
module's own small thread pool (so tools cannot exhaust the pool other code uses, nor wait on
it), and ``grep``'s search
runs in a child process killed at ``FileLimits.grep_timeout_s`` (see ``engine.tools.search``).
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import json
import logging
import os
import stat
from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol, TypeVar

from engine.tools import search as _search_module
from engine.tools.base import Tool, ToolContext, ToolOutcome
from engine.tools.boundary import Boundary, BoundaryPolicy, NotVisible
from engine.tools.effects import BUILTIN
from engine.tools.host import INSTALL
from engine.tools.reading import Window, read_window
from engine.tools.sandbox import helper_env
from engine.tools.search import glob_match, walk_files
from engine.tools.workspace import (
    FileTooBig,
    OutsideWorkspace,
    WorkspaceLocks,
    cut,
    display_path,
    read_text_nofollow,
    replace_file,
)

_log = logging.getLogger("plangate.tools.files")
_T = TypeVar("_T")

# The file tools' own threads, for reads, walks and writes: a slow disk or a stuck read or
# write ties up these, never the default pool that the event loop's other users (DNS lookups,
# anything on asyncio.to_thread) rely on, and a busy default pool never holds up a tool.
_FILES_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="plangate-files")

# The search child runs this text, read once at start, with the interpreter resolved at start
# (``engine.tools.host.INSTALL``, never ``sys.executable`` again) and ``-I -S -B -c``: isolated
# mode puts neither its working folder nor PYTHONPATH nor the user's site on the import path,
# and ``-S`` skips site-packages, so only the standard library can be imported; no file of
# the project (a planted ``re.py`` or ``engine/__init__.py``) can run outside the sandbox. A
# workspace that holds the interpreter, its standard library or plangate's own files is
# refused at start (``engine.tools.host.install_refusal``), so none of those is the agent's
# to swap either. The first line names it in ``ps``.
SEARCH_CHILD_TAG = "# plangate grep search"
_SEARCH_CODE = SEARCH_CHILD_TAG + "\n" + Path(_search_module.__file__).read_text(encoding="utf-8")


async def _in_pool(fn: Callable[..., _T], *args: Any) -> _T:
    return await asyncio.get_running_loop().run_in_executor(_FILES_POOL, fn, *args)


class SessionMdHooks(Protocol):
    """The plan service's side of the session ``.md``."""

    async def session_md_path(self, session_id: str) -> Path | None: ...

    async def md_written(self, session_id: str) -> None: ...


@dataclass(frozen=True, slots=True)
class FileLimits:
    read_lines: int = 2_000
    read_chars: int = 60_000
    # read_file keeps at most this much of one line (a minified file's one line may fill most
    # of the window; the rest leaves room for the notes), and reads at most this much of a
    # file (bytes): memory and time stay bounded whatever the file (engine.tools.reading).
    read_line_chars: int = 50_000
    read_scan_bytes: int = 64 << 20
    # edit_file reads the whole file: one over this is refused (bash's sed edits any size).
    edit_bytes: int = 16 << 20
    list_entries: int = 1_000
    grep_matches: int = 300
    grep_line_chars: int = 300
    grep_file_bytes: int = 2_000_000
    # A search still running after this is killed; the model is told, with what it found.
    grep_timeout_s: float = 10.0


def _error(text: str) -> ToolOutcome:
    return ToolOutcome(content=text, is_error=True)


def _str_arg(args: dict[str, Any], name: str, *, required: bool = True) -> str | None:
    value = args.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise ValueError(f"error: argument {name!r} must be a string")
    return value


def _int_arg(args: dict[str, Any], name: str) -> int | None:
    value = args.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"error: argument {name!r} must be an integer")
    return value


class _FileTool(ABC):
    """Shared plumbing: every path is the boundary's answer (``engine.tools.boundary``)."""

    name = ""
    description = ""
    # Read tools may also read the context's read roots (the session inbox); writes never
    # (the boundary refuses a write there: it is a read-only root).
    reads_only = False

    def __init__(
        self,
        *,
        hooks: SessionMdHooks | None = None,
        locks: WorkspaceLocks | None = None,
        limits: FileLimits | None = None,
        boundary: BoundaryPolicy | None = None,
    ) -> None:
        """``boundary`` decides what may be seen and written; without one, the workspace
        with nothing hidden in NoPlan, and the ``.md`` the ``hooks`` name."""
        self._hooks = hooks
        self._locks = locks or WorkspaceLocks()
        self._limits = limits or FileLimits()
        self._policy = boundary or BoundaryPolicy(
            md_source=hooks.session_md_path if hooks is not None else None
        )

    async def _readable(self, raw: str, ctx: ToolContext) -> tuple[Path, Boundary]:
        # Resolving follows links (file system calls): off the event loop, like the IO after.
        boundary = await self._policy.for_call(ctx)
        return await _in_pool(boundary.readable, raw), boundary

    async def _writable(self, raw: str, ctx: ToolContext) -> tuple[Path, Boundary]:
        boundary = await self._policy.for_call(ctx)
        return await _in_pool(boundary.writable_path, raw), boundary

    @property
    @abstractmethod
    def parameters(self) -> dict[str, Any]:
        """The JSON schema of the tool's arguments."""

    def is_concurrency_safe(self, args: dict[str, Any]) -> object:
        return False

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        try:
            return await self._run(args, ctx)
        except OutsideWorkspace as exc:
            return _error(exc.result_text(ctx.workspace))
        except ValueError as exc:
            return _error(str(exc))
        except OSError as exc:
            return _error(f"error: {type(exc).__name__}: {exc.strerror or exc}")

    @abstractmethod
    async def _run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        """The tool's work; path mistakes raise and ``run`` turns them into results."""


class ReadFileTool(_FileTool):
    reads_only = True
    name = "read_file"
    declaration = BUILTIN["read_file"]
    description = (
        "Read a text file in the workspace. Lines are numbered from 1 (the numbers are not part "
        "of the file). offset is the first line to show (1-based), limit the number of lines."
    )

    @property
    def parameters(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "file path, relative to the workspace"},
                "offset": {"type": "integer", "minimum": 1},
                "limit": {"type": "integer", "minimum": 1},
            },
            "required": ["path"],
            "additionalProperties": False,
        }

    def is_concurrency_safe(self, args: dict[str, Any]) -> object:
        return True

    async def _run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        raw = _str_arg(args, "path")
        assert raw is not None
        offset = _int_arg(args, "offset") or 1
        limit = _int_arg(args, "limit") or self._limits.read_lines
        path, boundary = await self._readable(raw, ctx)
        if not await _in_pool(path.is_file):
            return _error(f"error: {raw!r} is not a file")
        limit = min(limit, self._limits.read_lines)
        start = max(offset, 1) - 1
        read = await _in_pool(_read_lines, path, start, limit, boundary, self._limits)
        if read is None:
            return _error(f"error: {raw!r} is not a regular file (a FIFO, socket or device)")
        return ToolOutcome(content=cut(_shown(raw, offset, start, read), self._limits.read_chars))


def _read_lines(
    path: Path, start: int, limit: int, boundary: Boundary, limits: FileLimits | None = None
) -> Window | None:
    """Lines ``start..start+limit`` in bounded memory and time (engine.tools.reading);
    ``None`` when ``path`` is not a regular file (checked on the open, non-blocking fd).

    What the descriptor opened is judged by the boundary again: a link swapped in after the
    path was checked is refused, not followed into a hidden file.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        opened = Path(os.readlink(f"/proc/self/fd/{fd}"))
        if opened != path and not boundary.visible(opened):
            raise NotVisible(str(path), opened)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        limits = limits or FileLimits()
        return read_window(
            fd,
            start,
            limit,
            line_chars=limits.read_line_chars,
            max_chars=limits.read_chars,
            scan_bytes=limits.read_scan_bytes,
        )
    finally:
        os.close(fd)


def _shown(raw: str, offset: int, start: int, window: Window) -> str:
    """read_file's text: numbered lines, the cut ones marked, and where to read on."""
    if window.total == 0:
        return f"({raw} is empty)"
    mb = f"{window.scanned / (1 << 20):,.0f} MB"
    if not window.lines:
        if window.total is None:
            return (
                f"(offset {offset} is past what read_file reads of {raw}: its first {mb} hold "
                f"{window.seen:,} lines; use grep, or bash with sed -n or tail, for the rest)"
            )
        return f"(offset {offset} is past the end: {raw} has {window.total} lines)"
    shown = []
    for i, line in enumerate(window.lines):
        number = start + i
        text = f"{number + 1}\t{line}"
        if number in window.cut:
            text += f" [line cut: about {window.cut[number]:,} characters in all]"
        shown.append(text)
    body = "\n".join(shown)
    after = start + len(window.lines) + 1
    if window.total is None:
        body += (
            f"\n[read_file read the first {mb} of this {_size(window.size)} file; more lines "
            f"may follow: read on with offset={after}, or use grep or bash for the rest]"
        )
    elif window.total > after - 1:
        body += f"\n[{window.total - after + 1} more lines; read on with offset={after}]"
    return body


def _size(size: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:,.1f} {unit}"
    return f"{size} bytes"


class ListFilesTool(_FileTool):
    reads_only = True
    name = "list_files"
    declaration = BUILTIN["list_files"]
    description = (
        "List files under a folder of the workspace (default: the workspace), recursively, "
        "skipping .git, virtualenvs and node_modules. pattern is a glob on the relative path "
        "or the file name, e.g. '*.py' or 'src/**/test_*.py'."
    )

    @property
    def parameters(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {"path": {"type": "string"}, "pattern": {"type": "string"}},
            "additionalProperties": False,
        }

    def is_concurrency_safe(self, args: dict[str, Any]) -> object:
        return True

    async def _run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        raw = _str_arg(args, "path", required=False) or "."
        pattern = _str_arg(args, "pattern", required=False)
        root, boundary = await self._readable(raw, ctx)
        if not await _in_pool(root.is_dir):
            return _error(f"error: {raw!r} is not a folder")
        return await _in_pool(self._list, root, pattern, boundary)

    def _list(self, root: Path, pattern: str | None, boundary: Boundary) -> ToolOutcome:
        found: list[str] = []
        total = 0
        workspace = boundary.workspace
        for path in walk_files(root, *boundary.search_scope()):
            rel = display_path(path, workspace)
            if pattern and not (glob_match(rel, pattern) or fnmatch.fnmatch(path.name, pattern)):
                continue
            total += 1
            if len(found) < self._limits.list_entries:
                found.append(rel)
        if not found:
            return ToolOutcome(content="(no files)")
        body = "\n".join(found)
        if total > len(found):
            body += f"\n[list cut: {total - len(found)} more files not shown]"
        return ToolOutcome(content=body)


class GrepTool(_FileTool):
    reads_only = True
    name = "grep"
    declaration = BUILTIN["grep"]
    description = (
        "Search file contents with a Python regular expression. path is a file or folder "
        "(default: the workspace); glob filters file names, e.g. '*.py'. Returns path:line: text. "
        "A search that runs too long is stopped (keep patterns simple: no nested repeats)."
    )

    @property
    def parameters(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {
                "pattern": {"type": "string"},
                "path": {"type": "string"},
                "glob": {"type": "string"},
            },
            "required": ["pattern"],
            "additionalProperties": False,
        }

    def is_concurrency_safe(self, args: dict[str, Any]) -> object:
        return True

    async def _run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        pattern = _str_arg(args, "pattern")
        assert pattern is not None
        raw = _str_arg(args, "path", required=False) or "."
        glob = _str_arg(args, "glob", required=False)
        root, boundary = await self._readable(raw, ctx)
        if not await _in_pool(root.exists):
            return _error(f"error: {raw!r} does not exist")
        if not await _in_pool(lambda: root.is_dir() or root.is_file()):
            return _error(f"error: {raw!r} is not a regular file (a FIFO, socket or device)")
        limits = self._limits
        roots, hidden = boundary.search_scope()
        request = {
            "pattern": pattern,
            "root": str(root),
            "workspace": str(boundary.workspace),
            "roots": roots,
            "hidden": hidden,
            "glob": glob,
            "max_matches": limits.grep_matches,
            "line_chars": limits.grep_line_chars,
            "file_bytes": limits.grep_file_bytes,
        }
        return await _search(request, limits.grep_timeout_s)


async def _search(request: dict[str, Any], timeout_s: float) -> ToolOutcome:
    """Run one search in a child interpreter; kill it at ``timeout_s`` (or on cancel).

    The child is plangate's own code isolated from the project: the interpreter taken at
    start, ``-I -S -B`` with the module's text, started in ``/`` with :func:`helper_env` (no
    secret, no PYTHONPATH).
    """
    try:
        child = await asyncio.create_subprocess_exec(
            str(INSTALL.interpreter),
            "-I",
            "-S",
            "-B",
            "-c",
            _SEARCH_CODE,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            cwd="/",
            env=helper_env(),
        )
    except OSError as exc:
        return _error(f"error: grep could not start its search process: {exc.strerror or exc}")
    assert child.stdin is not None and child.stdout is not None
    hits: list[str] = []
    total: int | None = None
    problem: str | None = None

    async def collect(stdout: asyncio.StreamReader) -> None:
        nonlocal total, problem
        while line := await stdout.readline():
            item = json.loads(line)
            if "hit" in item:
                hits.append(str(item["hit"]))
            elif "total" in item:
                total = int(item["total"])
            elif "error" in item:
                problem = str(item["error"])

    timed_out = finished = False
    try:
        child.stdin.write(json.dumps(request).encode("utf-8"))
        with contextlib.suppress(ConnectionError):
            await child.stdin.drain()
        child.stdin.close()
        try:
            await asyncio.wait_for(collect(child.stdout), timeout_s)
            finished = True
        except TimeoutError:
            timed_out = True
    finally:
        # Not after a normal end: kill() polls, and reaping the child there leaves asyncio's
        # watcher an unknown pid (a spurious warning and exit code 255).
        if not finished and child.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                child.kill()
        await child.wait()
    if problem is not None:
        return _error(f"error: {problem}")
    if timed_out:
        _log.info("plangate.tools.grep.timeout pattern=%r", request["pattern"][:80])
        found = "\n".join(hits) if hits else "(no matches before it was stopped)"
        return _error(
            f"error: grep stopped after {timeout_s:g} s without finishing (a pattern with "
            "nested repeats such as (a+)+ can take forever; simplify it or narrow path/glob). "
            f"Matches found so far:\n{found}"
        )
    if total is None:
        return _error(f"error: grep's search process failed (exit code {child.returncode})")
    if not hits:
        return ToolOutcome(content="(no matches)")
    body = "\n".join(hits)
    if total > len(hits):
        body += f"\n[matches cut: {total - len(hits)} more not shown]"
    return ToolOutcome(content=body)


class _WriteTool(_FileTool):
    async def _after_write(self, path: Path, boundary: Boundary, ctx: ToolContext) -> None:
        if self._hooks is not None and path == boundary.plan_md:
            await self._hooks.md_written(ctx.session_id)


class WriteFileTool(_WriteTool):
    name = "write_file"
    declaration = BUILTIN["write_file"]
    description = (
        "Create or overwrite a file in the workspace with content (parent folders are created)."
    )

    @property
    def parameters(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"],
            "additionalProperties": False,
        }

    async def _run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        raw = _str_arg(args, "path")
        content = _str_arg(args, "content")
        assert raw is not None and content is not None
        # Resolved under the lock: a bash holding it could swap a folder for a link out of the
        # workspace while this write waits.
        async with self._locks.lock_for(ctx.workspace):
            path, boundary = await self._writable(raw, ctx)
            if await _in_pool(path.is_dir):  # a stat, off the loop like the write itself
                return _error(f"error: {raw!r} is a folder")
            await _in_pool(_write, path, content)
            await self._after_write(path, boundary, ctx)
        return ToolOutcome(content=f"wrote {len(content)} characters to {raw}")


def _write(path: Path, content: str) -> None:
    replace_file(path, content.encode("utf-8"))


class EditFileTool(_WriteTool):
    name = "edit_file"
    declaration = BUILTIN["edit_file"]
    description = (
        "Replace old_text with new_text in a file. old_text must match the file exactly "
        "(whitespace included) and be unique, unless replace_all is true."
    )

    @property
    def parameters(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "old_text": {"type": "string"},
                "new_text": {"type": "string"},
                "replace_all": {"type": "boolean"},
            },
            "required": ["path", "old_text", "new_text"],
            "additionalProperties": False,
        }

    async def _run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        raw = _str_arg(args, "path")
        old = _str_arg(args, "old_text")
        new = _str_arg(args, "new_text")
        assert raw is not None and old is not None and new is not None
        replace_all = args.get("replace_all", False) is True
        if not old:
            return _error("error: old_text is empty; use write_file to create a file")
        # Resolved under the lock, as in write_file.
        async with self._locks.lock_for(ctx.workspace):
            path, boundary = await self._writable(raw, ctx)
            if not await _in_pool(path.is_file):
                return _error(f"error: {raw!r} is not a file")
            try:
                text = await _in_pool(
                    partial(read_text_nofollow, path, max_bytes=self._limits.edit_bytes)
                )
            except FileTooBig as exc:
                return _error(
                    f"error: {raw!r} is {exc.size:,} bytes; edit_file edits files up to "
                    f"{self._limits.edit_bytes >> 20} MB. Edit a bigger file with bash "
                    "(sed -i, or a script)"
                )
            count = text.count(old)
            if count == 0:
                return _error(f"error: old_text was not found in {raw}; read the file first")
            if count > 1 and not replace_all:
                return _error(
                    f"error: old_text occurs {count} times in {raw}; give more context to make "
                    "it unique, or set replace_all"
                )
            updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)
            await _in_pool(_write, path, updated)
            await self._after_write(path, boundary, ctx)
        replaced = count if replace_all else 1
        return ToolOutcome(content=f"replaced {replaced} occurrence(s) in {raw}")


def file_tools(
    *,
    hooks: SessionMdHooks | None = None,
    locks: WorkspaceLocks | None = None,
    limits: FileLimits | None = None,
    boundary: BoundaryPolicy | None = None,
) -> list[Tool]:
    """The five file tools sharing one set of hooks, locks, limits and one boundary."""
    shared_locks = locks or WorkspaceLocks()
    kinds: tuple[type[_FileTool], ...] = (
        ReadFileTool,
        ListFilesTool,
        GrepTool,
        WriteFileTool,
        EditFileTool,
    )
    return [
        kind(hooks=hooks, locks=shared_locks, limits=limits, boundary=boundary) for kind in kinds
    ]


__all__ = [
    "EditFileTool",
    "FileLimits",
    "GrepTool",
    "ListFilesTool",
    "ReadFileTool",
    "SessionMdHooks",
    "WriteFileTool",
    "file_tools",
]
