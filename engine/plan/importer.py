"""Reading a ``plan init file_path=...`` import (inside the workspace only, docs/plan-json-spec.md).

A JSON file gives tasks as a list, or as an object with a ``tasks`` list (an OpenCrabs plan
JSON works). Any other text is read as Markdown and its work items become the tasks.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from engine.plan.machine import TaskSpec
from engine.tools.workspace import OutsideWorkspace, resolve_in_workspace


def parse_task_spec(raw: object) -> TaskSpec | None:
    """One task argument ``{title, description?, acceptance_criteria?, dependencies?}``."""
    if not isinstance(raw, dict):
        return None
    title = raw.get("title")
    description = raw.get("description") or ""
    criteria = raw.get("acceptance_criteria") or []
    deps = raw.get("dependencies") or []
    if isinstance(criteria, str):
        criteria = [criteria]
    if not isinstance(title, str) or not title.strip() or not isinstance(description, str):
        return None
    if not isinstance(criteria, list) or not all(isinstance(c, str) for c in criteria):
        return None
    if not isinstance(deps, list) or not all(isinstance(d, str | int) for d in deps):
        return None
    return TaskSpec(
        title=title.strip(),
        description=description,
        acceptance_criteria=tuple(c for c in criteria if c.strip()),
        dependencies=tuple(str(d) for d in deps),
    )


def parse_task_specs(raw: object) -> tuple[TaskSpec, ...] | None:
    """A list of task arguments, or ``None`` when any of them is malformed."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        return None
    specs = [parse_task_spec(item) for item in raw]
    if any(spec is None for spec in specs):
        return None
    return tuple(spec for spec in specs if spec is not None)


def read_import(
    file_path: str, workspace: Path, *, extract: Callable[[str], Sequence[Any]]
) -> tuple[TaskSpec, ...] | str:
    """The import's tasks, or a refusal code (outside workspace, unreadable, bad task)."""
    try:
        target = resolve_in_workspace(file_path, workspace)
    except OutsideWorkspace:
        return "import-outside-workspace"
    text = _read_regular_file(target)
    if text is None:
        return "import-unreadable"
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        data = data.get("tasks", [])
    if isinstance(data, list):
        specs = parse_task_specs(data)
        return "bad-task" if specs is None else specs
    items = extract(text)
    return tuple(
        TaskSpec(
            title=item.title,
            description=item.description,
            acceptance_criteria=tuple(item.acceptance_criteria),
            # A Markdown import keeps its checks: they only ever add gates (docs/checks.md).
            checks=tuple(getattr(item, "checks", ())),
        )
        for item in items
        if item.title.strip()
    )


# An import is a task list or a plan, never more than this; a larger file is refused.
MAX_IMPORT_BYTES = 1_000_000


def _read_regular_file(path: Path) -> str | None:
    """The UTF-8 text of a regular file, or ``None``.

    Opened non-blocking and checked on the open descriptor, so a FIFO or device swapped in by a
    concurrent command cannot block the event loop, and the size is capped.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_IMPORT_BYTES:
            return None
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(MAX_IMPORT_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > MAX_IMPORT_BYTES:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None
