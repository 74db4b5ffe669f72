"""The plan gate: one pure decision the tool runtime makes before every tool call.

Pre-init: no project writes, bash allowed, ``plan init`` allowed, other checklist ops denied.
Post-init: writes only to the session ``.md``, no bash. Active: the ``.md`` is frozen against
the generic write tools. NoPlan is ungated. Paths are resolved (symlinks, ``..``, absolute
paths) before the decision, so a link or a detour to the ``.md`` is the ``.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engine.plan.digest import md_bytes, too_big_detail
from engine.plan.refusals import TEXTS
from engine.tools.plan_view import GATE_TEXTS as GATE_TEXTS
from engine.tools.plan_view import PlanGateView as PlanGateView
from engine.tools.workspace import real_path, resolve_path

WRITE_TOOLS = frozenset({"write_file", "edit_file"})
SHELL_TOOLS = frozenset({"bash"})
CHECKLIST_OPS = frozenset({"add_tasks", "add_task", "start", "complete", "skip"})


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
