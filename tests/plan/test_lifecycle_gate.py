"""The plan gate with real paths: symlinks, ``..`` and absolute paths resolve first."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.plan.gate import GATE_TEXTS, PlanGateView, check_gate
from engine.plan.refusals import TEXTS


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    workspace = tmp_path / "ws"
    (workspace / "src").mkdir(parents=True)
    md = tmp_path / "home" / "session" / ".plangate_plan_s.md"
    md.parent.mkdir(parents=True)
    md.write_text("# T\n")
    return workspace, md


def post(md: Path) -> PlanGateView:
    return PlanGateView(state="post_init", md_path=md)


def test_gate_post_init_md_reached_through_dotdot_is_the_md(layout: tuple[Path, Path]) -> None:
    ws, md = layout
    detour = ws / "src" / ".." / ".." / "home" / "session" / md.name
    assert check_gate("write_file", {"path": str(detour)}, post(md), workspace=ws) is None
    relative = os.path.relpath(md, ws)
    assert relative.startswith("..")
    assert check_gate("edit_file", {"path": relative}, post(md), workspace=ws) is None


def test_gate_post_init_symlink_to_md_is_the_md(layout: tuple[Path, Path]) -> None:
    ws, md = layout
    link = ws / "plan.md"
    link.symlink_to(md)
    assert check_gate("write_file", {"path": "plan.md"}, post(md), workspace=ws) is None
    active = PlanGateView(state="active", md_path=md)
    assert (
        check_gate("write_file", {"path": "plan.md"}, active, workspace=ws)
        == GATE_TEXTS["gate-active-md-frozen"]
    )


def test_gate_post_init_symlink_to_project_file_is_denied(layout: tuple[Path, Path]) -> None:
    ws, md = layout
    (ws / "src" / "app.py").write_text("x")
    (ws / "plan-notes.md").symlink_to(ws / "src" / "app.py")
    assert (
        check_gate("write_file", {"path": "plan-notes.md"}, post(md), workspace=ws)
        == (GATE_TEXTS["gate-editing-write"])
    )


def test_gate_post_init_dotdot_escape_into_project_is_denied(layout: tuple[Path, Path]) -> None:
    ws, md = layout
    path = str(md.parent / ".." / ".." / ".." / "ws" / "src" / "app.py")
    assert (
        check_gate("write_file", {"path": path}, post(md), workspace=ws)
        == GATE_TEXTS["gate-editing-write"]
    )
    # A sibling whose name only starts like the .md is another file.
    assert check_gate("write_file", {"path": str(md) + ".bak"}, post(md), workspace=ws)


def test_gate_post_init_symlinked_workspace_folder(layout: tuple[Path, Path]) -> None:
    ws, md = layout
    (ws / "plans").symlink_to(md.parent, target_is_directory=True)
    assert check_gate("write_file", {"path": f"plans/{md.name}"}, post(md), workspace=ws) is None
    assert check_gate("write_file", {"path": "plans/other.md"}, post(md), workspace=ws)


def test_gate_missing_or_bad_path_is_denied_in_editing(layout: tuple[Path, Path]) -> None:
    ws, md = layout
    for args in ({}, {"path": ""}, {"path": 3}):
        assert (
            check_gate("write_file", args, post(md), workspace=ws)
            == GATE_TEXTS["gate-editing-write"]
        )


def test_gate_tables(layout: tuple[Path, Path]) -> None:
    ws, md = layout
    pre = PlanGateView(state="pre_init", md_path=md)
    active = PlanGateView(state="active", md_path=md)
    none = PlanGateView(state="none", md_path=md)
    rows = [
        (pre, "write_file", {"path": str(md)}, GATE_TEXTS["gate-pre-init-write"]),
        (pre, "bash", {"command": "rm -rf x"}, None),
        (pre, "plan", {"op": "init"}, None),
        (pre, "plan", {"op": "show"}, None),
        (pre, "plan", {"op": "add_tasks"}, TEXTS["pre-init-checklist-blocked"]),
        (post(md), "plan", {"op": "complete"}, TEXTS["editing-checklist-blocked"]),
        (post(md), "plan", {"op": "init"}, TEXTS["plan-live"]),
        (post(md), "plan", {"op": "submit"}, None),
        (post(md), "bash", {"command": "ls"}, GATE_TEXTS["gate-editing-bash"]),
        (post(md), "grep", {"pattern": "x"}, None),
        (post(md), "todo_write", {"todos": []}, None),
        (active, "bash", {"command": "ls"}, None),
        (active, "edit_file", {"path": "src/app.py"}, None),
        (active, "plan", {"op": "start"}, None),
        (none, "write_file", {"path": str(md)}, None),
    ]
    for view, tool, args, expected in rows:
        assert check_gate(tool, args, view, workspace=ws) == expected, (view.state, tool, args)
