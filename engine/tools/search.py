"""The workspace walk, and ``grep``'s search run as a separate process that can be killed.

A regular expression from the model can backtrack for longer than the universe lasts
(``^(a+)+$`` on forty ``a`` and a ``b``), and Python's ``re`` holds the interpreter while it
does: run in a thread it freezes every chat. So the search runs here, in a child interpreter
that the grep tool kills at its deadline. The child runs this file's text with
``python -I -S -B -c`` in ``/`` and a clean environment (``engine.tools.files``): this module
imports only the standard library, never the ``engine`` package, so nothing from the project's
folder or the bot's environment can be imported into it, and it starts in tens of milliseconds.

Only regular files are read: a FIFO, socket or device in the workspace is skipped by the walk,
and every file is opened ``O_NONBLOCK`` and checked with ``fstat`` before it is read (a FIFO
swapped in after the walk cannot block the open).

What may be seen is the boundary's decision (``engine.tools.boundary``): the request carries
its roots and hidden paths, and :func:`path_visible` is its rule. A hidden folder is not
walked, and every file opened is judged again by what the descriptor points at.

The child reads one JSON request on stdin and writes JSON lines: ``{"hit": ...}`` for each
match shown, then ``{"total": N}``; or ``{"error": ...}`` for a bad pattern.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import stat
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

# Folders nobody wants walked by list_files or grep.
SKIP_DIRS = frozenset({".git", ".hg", ".svn", ".venv", "venv", "node_modules", "__pycache__"})


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def path_visible(path: str, roots: Sequence[str], hidden: Sequence[str]) -> bool:
    """The boundary's visibility rule (``engine.tools.boundary``), kept here so that grep's
    child, which imports only the standard library, applies the very same one.

    The resolved ``path`` is visible when it lies in one of ``roots`` and in none of
    ``hidden``; a hidden path that strictly contains the root holding ``path`` (a workspace
    under plangate's home) does not count for that root.
    """
    inside = [root for root in roots if _inside(path, root)]
    if not inside:
        return False
    root = max(inside, key=len)
    return not any(
        _inside(path, secret) and not (root != secret and _inside(root, secret))
        for secret in hidden
    )


def walk_files(root: Path, roots: Sequence[str], hidden: Sequence[str] = ()) -> Iterator[Path]:
    """Regular files under ``root`` that :func:`path_visible` allows, sorted.

    Symlinked folders are not followed; a link is judged by what it resolves to (one out of
    the roots or into a hidden path is skipped), and anything not a regular file is skipped.
    A hidden folder is not walked at all.
    """
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(
            d
            for d in dirs
            if d not in SKIP_DIRS and path_visible(os.path.join(folder, d), roots, hidden)
        )
        for name in sorted(files):
            path = Path(folder) / name
            try:
                info = os.stat(path)  # follows a link: the target is what would be read
            except OSError:
                continue
            if not stat.S_ISREG(info.st_mode):
                continue
            real = os.path.realpath(path) if path.is_symlink() else str(path)
            if not path_visible(real, roots, hidden):
                continue
            yield path


def read_regular(
    path: Path, max_bytes: int, *, visible: Callable[[str], bool] | None = None
) -> bytes | None:
    """The file's bytes, or ``None`` when it is not a regular file, is over ``max_bytes``, or
    (with ``visible``) what was actually opened is not visible.

    Opened non-blocking and checked on the open descriptor, so a FIFO never blocks the caller
    and a link swapped in after the walk is judged by the file it opened.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        if visible is not None and not visible(os.readlink(f"/proc/self/fd/{fd}")):
            return None
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > max_bytes:
            return None
        chunks: list[bytes] = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def glob_match(rel: str, pattern: str) -> bool:
    """``pattern`` against a relative path; ``**/`` also matches zero folders."""
    # fnmatch's '*' already crosses '/', so '**/' only needs to also match zero folders.
    return fnmatch.fnmatch(rel, pattern) or fnmatch.fnmatch(rel, pattern.replace("**/", ""))


def _relative(path: Path, workspace: str) -> str:
    try:
        return str(path.relative_to(workspace)) or "."
    except ValueError:
        return str(path)


def search(request: dict[str, Any], emit: Any) -> None:
    """Run one grep request, calling ``emit`` with each JSON-able line of the answer."""
    try:
        regex = re.compile(request["pattern"])
    except (re.error, OverflowError, RecursionError) as exc:
        emit({"error": f"invalid regular expression: {exc}"})
        return
    root = Path(request["root"])
    workspace = os.path.realpath(request["workspace"])
    # What the boundary lets the agent see; without it, the workspace and nothing hidden.
    roots: list[str] = request.get("roots") or [workspace]
    hidden: list[str] = request.get("hidden") or []

    def visible(real: str) -> bool:
        return path_visible(real, roots, hidden)

    glob: str | None = request.get("glob")
    max_matches = int(request["max_matches"])
    line_chars = int(request["line_chars"])
    file_bytes = int(request["file_bytes"])
    files: Iterator[Path] = iter([root]) if root.is_file() else walk_files(root, roots, hidden)
    total = 0
    for path in files:
        rel = _relative(path, workspace)
        if glob and not (fnmatch.fnmatch(path.name, glob) or glob_match(rel, glob)):
            continue
        try:
            data = read_regular(path, file_bytes, visible=visible)
        except OSError:
            continue
        if data is None or b"\0" in data[:8192]:
            continue  # not a regular file, too big, or binary
        for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if regex.search(line):
                total += 1
                if total <= max_matches:
                    emit({"hit": f"{rel}:{number}: {line[:line_chars]}"})
    emit({"total": total})


def main() -> None:
    request = json.loads(sys.stdin.read())
    out = sys.stdout

    def emit(item: dict[str, Any]) -> None:
        # Flushed line by line: what was found before a kill at the deadline is still shown.
        out.write(json.dumps(item) + "\n")
        out.flush()

    search(request, emit)


if __name__ == "__main__":
    main()
