"""What a file write would change, for an approval message: a unified diff.

Read-only and best effort: a file that is missing, not text or too large gets no diff (the
message shows the path alone); the tool itself decides later whether the write works.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from engine.tools.effects import BUILTIN, Declaration
from engine.tools.search import read_regular
from engine.tools.workspace import (
    OutsideWorkspace,
    display_path,
    real_path,
    resolve_in_workspace,
)

# Files larger than this are not read for a diff.
MAX_PREVIEW_BYTES = 1_000_000


def write_target(
    workspace: Path, args: Mapping[str, Any], paths: Sequence[str] = ("path",)
) -> str | None:
    """The workspace-relative path a write names (the first of ``paths``, the arguments its
    tool declares it writes, that is given); ``None`` when it is outside the workspace (the
    boundary refuses those, or it is the plan ``.md``, which the plan gate rules)."""
    given = [args.get(name) for name in paths if args.get(name) is not None]
    raw = given[0] if given else None
    if not isinstance(raw, str) or not raw.strip():
        return None
    try:
        resolved = resolve_in_workspace(raw, workspace)
    except OutsideWorkspace:
        return None
    return display_path(resolved, workspace)


def write_diff(
    workspace: Path, tool: str | Declaration | None, args: Mapping[str, Any], target: str
) -> str | None:
    """The unified diff a writing tool's call would make (a new file: from ``/dev/null``),
    from the file's text after the call as the tool declares it (``Declaration.after``; a
    name: plangate's own tool); ``None`` when the file is not readable text, the write would
    not apply, or the tool declares no way to tell."""
    declared = BUILTIN.get(tool) if isinstance(tool, str) else tool
    after_of = declared.after if declared is not None else None
    if after_of is None:
        return None
    path = real_path(workspace) / target
    fromfile = f"a/{target}"
    try:
        if not path.exists():
            before, fromfile = "", "/dev/null"  # a new file: all of it is added
        else:
            # Regular files only, opened non-blocking (a FIFO never blocks the thread).
            data = read_regular(path, MAX_PREVIEW_BYTES)
            if data is None:
                return None
            before = data.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    after = after_of(before, args)
    if after is None:
        return None
    lines = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        fromfile=fromfile,
        tofile=f"b/{target}",
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


__all__ = ["MAX_PREVIEW_BYTES", "write_diff", "write_target"]
