"""What a file write would change, for an approval message: a unified diff.

Read-only and best effort: a file that is missing, not text or too large gets no diff (the
message shows the path alone); the tool itself decides later whether the write works.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engine.tools.search import read_regular
from engine.tools.workspace import (
    OutsideWorkspace,
    display_path,
    real_path,
    resolve_in_workspace,
)

# Files larger than this are not read for a diff.
MAX_PREVIEW_BYTES = 1_000_000


def write_target(workspace: Path, args: Mapping[str, Any]) -> str | None:
    """The workspace-relative path a write names; ``None`` when it is outside the workspace
    (the file tools refuse those, or it is the plan ``.md``, which the plan gate rules)."""
    raw = args.get("path")
    if not isinstance(raw, str) or not raw.strip():
        return None
    try:
        resolved = resolve_in_workspace(raw, workspace)
    except OutsideWorkspace:
        return None
    return display_path(resolved, workspace)


def write_diff(workspace: Path, tool: str, args: Mapping[str, Any], target: str) -> str | None:
    """The unified diff a ``write_file``/``edit_file`` would make (a new file: from
    ``/dev/null``); ``None`` when the file is not readable text or the edit would not apply."""
    path = real_path(workspace) / target
    fromfile = f"a/{target}"
    try:
        if not path.exists() and tool == "write_file":
            before, fromfile = "", "/dev/null"  # a new file: all of it is added
        else:
            # Regular files only, opened non-blocking (a FIFO never blocks the thread).
            data = read_regular(path, MAX_PREVIEW_BYTES)
            if data is None:
                return None
            before = data.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    after = _after(tool, args, before)
    if after is None:
        return None
    lines = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        fromfile=fromfile,
        tofile=f"b/{target}",
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def _after(tool: str, args: Mapping[str, Any], before: str) -> str | None:
    if tool == "write_file":
        content = args.get("content")
        return content if isinstance(content, str) else None
    old, new = args.get("old_text"), args.get("new_text")
    if not isinstance(old, str) or not isinstance(new, str) or not old:
        return None
    count = before.count(old)
    if args.get("replace_all") is True and count:
        return before.replace(old, new)
    return before.replace(old, new, 1) if count == 1 else None


__all__ = ["MAX_PREVIEW_BYTES", "write_diff", "write_target"]
