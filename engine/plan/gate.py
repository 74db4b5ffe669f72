"""The plan gate: one pure decision the tool runtime makes before every tool call.

Pre-init: no project writes, bash allowed, ``plan init`` allowed, other checklist ops denied.
Post-init: writes only to the session ``.md``, no bash. Active: the ``.md`` is frozen against
the generic write tools. NoPlan is ungated. Paths are resolved (symlinks, ``..``, absolute
paths) before the decision, so a link or a detour to the ``.md`` is the ``.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.plan.digest import md_bytes, too_big_detail
from engine.plan.refusals import TEXTS
from engine.plan.types import PlanState
from engine.tools.workspace import real_path, resolve_path

WRITE_TOOLS = frozenset({"write_file", "edit_file"})
SHELL_TOOLS = frozenset({"bash"})
CHECKLIST_OPS = frozenset({"add_tasks", "add_task", "start", "complete", "skip"})

GATE_TEXTS: dict[str, str] = {
    "gate-pre-init-write": (
        "Denied (gate-pre-init-write): plan mode is on and no plan exists yet, so project "
        "files cannot change. Explore with read_file, grep or bash, then call plan init."
    ),
    "gate-editing-write": (
        "Denied (gate-editing-write): while the plan is being designed only the session plan "
        ".md (the path plan init returned) can be written. Write the plan there."
    ),
    "gate-editing-bash": (
        "Denied (gate-editing-bash): bash is off while the plan is being designed. Use "
        "read_file, list_files and grep; write only the plan .md."
    ),
    "gate-plan-too-big": (
        "Denied (gate-plan-too-big): the plan .md would be over the size limit "
        "(PLANGATE_MAX_PLAN_KB). Keep the plan short: steps, not code or logs; put long "
        "material in project files the steps name."
    ),
    "gate-active-md-frozen": (
        "Denied (gate-active-md-frozen): the approved plan .md is frozen while the checklist "
        "runs. Record progress with plan complete or plan skip; the owner can Revise the plan."
    ),
}


@dataclass(frozen=True, slots=True)
class PlanGateView:
    """What the gate needs to know: the derived state and the session ``.md``'s path."""

    state: PlanState
    md_path: Path | None = None
    # The plan text's size limit, and the live .md's size now (post-init), both in bytes.
    max_md_bytes: int | None = None
    md_bytes: int = 0


def resolve_tool_path(raw: object, workspace: Path) -> Path | None:
    """The absolute, symlink-free path a tool argument names (relative to ``workspace``)."""
    if not isinstance(raw, str) or not raw.strip():
        return None
    return resolve_path(raw, workspace)


def _is_md(raw: object, view: PlanGateView, workspace: Path) -> bool:
    target = resolve_tool_path(raw, workspace)
    if target is None or view.md_path is None:
        return False
    return target == real_path(view.md_path)


def _size_after(tool_name: str, args: Mapping[str, Any], view: PlanGateView) -> int:
    """The ``.md``'s size after this write (an edit: as if it replaced one occurrence)."""
    if tool_name == "write_file":
        content = args.get("content")
        return md_bytes(content) if isinstance(content, str) else 0
    old, new = args.get("old_text"), args.get("new_text")
    if not isinstance(old, str) or not isinstance(new, str):
        return view.md_bytes
    return view.md_bytes + md_bytes(new) - md_bytes(old)


def check_gate(
    tool_name: str, args: Mapping[str, Any], view: PlanGateView, *, workspace: Path
) -> str | None:
    """``None`` to allow the call, else the fixed deny reason returned to the model."""
    state = view.state
    if state == "none":
        return None
    if tool_name == "plan":
        op = args.get("op")
        if state == "pre_init" and op in CHECKLIST_OPS:
            return TEXTS["pre-init-checklist-blocked"]
        if state == "post_init" and op in CHECKLIST_OPS:
            return TEXTS["editing-checklist-blocked"]
        if state == "post_init" and op == "init":
            return TEXTS["plan-live"]
        return None
    if tool_name in WRITE_TOOLS:
        is_md = _is_md(args.get("path"), view, workspace)
        if state == "pre_init":
            return GATE_TEXTS["gate-pre-init-write"]
        if state == "post_init":
            if not is_md:
                return GATE_TEXTS["gate-editing-write"]
            size = _size_after(tool_name, args, view)
            if view.max_md_bytes is not None and size > view.max_md_bytes:
                return (
                    GATE_TEXTS["gate-plan-too-big"]
                    + "\n- "
                    + too_big_detail(size, view.max_md_bytes)
                )
            return None
        if state == "active" and is_md:
            return GATE_TEXTS["gate-active-md-frozen"]
        return None
    if tool_name in SHELL_TOOLS and state == "post_init":
        return GATE_TEXTS["gate-editing-bash"]
    return None
