"""The plan gate: one pure decision the tool runtime makes before every tool call.

It reads what the call does (its declared effects, engine.tools.effects), never the tool's
name, and looks the effects up in the effect x plan-state table (``GATE_TABLE``): pre-init no
project writes and no sends, bash allowed, ``plan init`` allowed, other checklist ops denied;
post-init writes only to the session ``.md``, no bash, no network, no sends; Active the
``.md`` is frozen against writes; NoPlan is ungated. A goal round's column applies on top of
the plan state's. An undeclared effect is refused while a plan is being written and in goal
rounds. Paths are resolved (symlinks, ``..``, absolute paths) before the decision, so a link
or a detour to the ``.md`` is the ``.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engine.plan.digest import md_bytes, too_big_detail
from engine.plan.refusals import TEXTS
from engine.tools.effects import (
    ALLOW,
    BUILTIN,
    MD_FROZEN,
    MD_ONLY,
    Declaration,
    GateColumn,
    effects_of,
    gate_cells,
)
from engine.tools.plan_view import GATE_TEXTS as GATE_TEXTS
from engine.tools.plan_view import PlanGateView as PlanGateView
from engine.tools.workspace import real_path, resolve_path


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


def _size_after(args: Mapping[str, Any], view: PlanGateView) -> int:
    """The ``.md``'s size after this write: the whole ``content``, or an edit as if it
    replaced one occurrence of ``old_text``; the size now when the arguments say neither."""
    content = args.get("content")
    if isinstance(content, str):
        return md_bytes(content)
    old, new = args.get("old_text"), args.get("new_text")
    if not isinstance(old, str) or not isinstance(new, str):
        return view.md_bytes
    return view.md_bytes + md_bytes(new) - md_bytes(old)


def _text(code: str) -> str:
    return GATE_TEXTS.get(code) or TEXTS[code]


def _md_only(
    declared: Declaration | None, args: Mapping[str, Any], view: PlanGateView, workspace: Path
) -> str | None:
    """Post-init: a write is allowed when every path it writes is the session ``.md``."""
    names = declared.path_args("write") if declared is not None else ()
    if not names or not all(_is_md(args.get(name), view, workspace) for name in names):
        return GATE_TEXTS["gate-editing-write"]
    size = _size_after(args, view)
    if view.max_md_bytes is not None and size > view.max_md_bytes:
        return GATE_TEXTS["gate-plan-too-big"] + "\n- " + too_big_detail(size, view.max_md_bytes)
    return None


def check_gate(
    tool: Declaration | str | None,
    args: Mapping[str, Any],
    view: PlanGateView,
    *,
    workspace: Path,
    goal_round: bool = False,
) -> str | None:
    """``None`` to allow the call, else the fixed deny reason returned to the model.

    ``tool`` is the tool's declaration (a name looks plangate's own tools up in
    :data:`~engine.tools.effects.BUILTIN`; ``None``: undeclared). ``goal_round``: the call is
    in an autonomous goal round, whose column of the table applies too.
    """
    declared = BUILTIN.get(tool) if isinstance(tool, str) else tool
    effects = effects_of(declared, args)
    columns: list[GateColumn] = [view.state]
    if goal_round:
        columns.append("goal_round")
    for column in columns:
        for cell in gate_cells(effects, column):
            if cell == ALLOW:
                continue
            if cell == MD_ONLY:
                denied = _md_only(declared, args, view, workspace)
            elif cell == MD_FROZEN:
                names = declared.path_args("write") if declared is not None else ()
                frozen = any(_is_md(args.get(name), view, workspace) for name in names)
                denied = GATE_TEXTS["gate-active-md-frozen"] if frozen else None
            else:
                denied = _text(cell)
            if denied is not None:
                return denied
    return None
