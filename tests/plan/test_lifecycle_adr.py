"""One test per rule of docs/plan-lifecycle.md and docs/plan-json-spec.md.

Names: ``test_c1_*`` for the states, pre-init and the gates, ``test_c2_*`` for the session
``.md``, ``test_c3_*`` for the plan tool contract, ``test_verify_*`` for end-to-end checks.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from engine.events import PlanChanged, PlanMode
from engine.plan.checklist import render_show
from engine.plan.gate import GATE_TEXTS, check_gate
from engine.plan.refusals import TEXTS
from tests.plan.lifecycle_helpers import (
    SID,
    VALID_MD,
    checklist,
    design_written,
    make_harness,
)

REPO = Path(__file__).resolve().parents[2]
SPEC_DOC = REPO / "docs" / "plan-json-spec.md"


# --- C1 ------------------------------------------------------------------------------------


async def test_c1_project_writes_fail_in_post_init_editing(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    await h.tool(op="init", title="T")
    view = await h.plans.gate_view(SID)
    assert view.state == "post_init"
    for tool in ("write_file", "edit_file"):
        reason = check_gate(tool, {"path": "src/app.py"}, view, workspace=h.workspace)
        assert reason == GATE_TEXTS["gate-editing-write"]


async def test_c1_session_md_writes_succeed_in_post_init_editing(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    await h.tool(op="init", title="T")
    view = await h.plans.gate_view(SID)
    md = str(await h.plans.md_path(SID))
    assert (
        check_gate("write_file", {"path": md, "content": "x"}, view, workspace=h.workspace) is None
    )
    assert check_gate("edit_file", {"path": md}, view, workspace=h.workspace) is None
    await h.write_md(VALID_MD)
    assert h.raw()["description"] == VALID_MD


async def test_c1_other_plangate_home_writes_fail_in_post_init_editing(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    await h.tool(op="init", title="T")
    view = await h.plans.gate_view(SID)
    for target in (h.json_path(), h.home / "plangate.db", h.session_folder() / "other.md"):
        assert check_gate("write_file", {"path": str(target)}, view, workspace=h.workspace)


async def test_c1_active_blocks_md_writes_via_generic_tools(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    revision = await design_written(h)
    assert (await h.plans.approve(SID, revision=revision, actor="tg:1")).ok
    view = await h.plans.gate_view(SID)
    md = str(await h.plans.md_path(SID))
    for tool in ("write_file", "edit_file"):
        assert (
            check_gate(tool, {"path": md}, view, workspace=h.workspace)
            == GATE_TEXTS["gate-active-md-frozen"]
        )
    assert check_gate("write_file", {"path": "src/app.py"}, view, workspace=h.workspace) is None


async def test_c1_pre_init_denies_project_writes_allows_bash_and_plan_init(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    assert (await h.plans.enter_pre_init(SID)).ok
    view = await h.plans.gate_view(SID)
    assert view.state == "pre_init"
    ws = h.workspace
    assert (
        check_gate("write_file", {"path": "a.py"}, view, workspace=ws)
        == GATE_TEXTS["gate-pre-init-write"]
    )
    assert check_gate("edit_file", {"path": "a.py"}, view, workspace=ws) is not None
    assert check_gate("bash", {"command": "ls"}, view, workspace=ws) is None
    assert check_gate("plan", {"op": "init", "title": "x"}, view, workspace=ws) is None
    assert (
        check_gate("plan", {"op": "start"}, view, workspace=ws)
        == TEXTS["pre-init-checklist-blocked"]
    )
    out = await h.tool(op="init", title="T")
    assert not out.is_error


async def test_c1_durable_pre_init_api_survives_new_service(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    await h.plans.enter_pre_init(SID)
    raw = h.raw()
    assert raw["pre_init_editing"] is True and raw["status"] == "Editing" and raw["tasks"] == []
    assert not h.md_path().exists()
    again = h.fresh()
    assert await again.plans.state(SID) == "pre_init"
    assert (await again.plans.discard(SID)).ok
    assert await again.fresh().plans.state(SID) == "none"


async def test_c1_legacy_json_loads_and_maps(tmp_path: Path) -> None:
    # The seven-status table is covered per status in test_lifecycle_legacy.py; here one of each.
    h = make_harness(tmp_path)
    folder = h.session_folder()
    folder.mkdir(parents=True)
    for sid, status in (("a", "PendingApproval"), ("b", "InProgress")):
        data = {"id": sid, "session_id": sid, "title": "T", "status": status, "tasks": []}
        (folder / f".plangate_plan_{sid}.json").write_text(json.dumps(data))
    assert await h.plans.state("a") == "post_init"
    assert await h.plans.state("b") == "active"


async def test_c1_completed_archives_silently(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    folder = h.session_folder()
    folder.mkdir(parents=True)
    data = {"id": "p", "session_id": SID, "title": "T", "status": "Completed", "tasks": []}
    h.json_path().write_text(json.dumps(data))
    assert await h.plans.state(SID) == "none"
    assert h.plans.take_notices(SID) == []
    assert not h.json_path().exists()
    archived = [json.loads(p.read_text()) for p in h.archived() if p.suffix == ".json"]
    assert [a["archive_reason"] for a in archived] == ["completed"]


async def test_c1_status_writes_canonical_editing_and_active_strings(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    folder = h.session_folder()
    folder.mkdir(parents=True)
    data = {
        "id": "p",
        "session_id": SID,
        "title": "T",
        "status": "Approved",
        "tasks": [
            {"id": "1", "title": "a", "status": "Pending"},
            {"id": "2", "title": "b", "status": "Pending"},
        ],
    }
    h.json_path().write_text(json.dumps(data))
    await h.tool(op="start")
    assert h.raw()["status"] == "Active"
    assert h.raw()["tasks"][0]["status"] == "in_progress"
    h2 = make_harness(tmp_path / "other")
    await h2.tool(op="init", title="T")
    assert h2.raw()["status"] == "Editing"


async def test_c1_approved_at_preserved_on_struct(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    folder = h.session_folder()
    folder.mkdir(parents=True)
    data = {
        "id": "p",
        "session_id": SID,
        "title": "T",
        "status": "InProgress",
        "approved_at": "2026-01-01T00:00:00Z",
        "tasks": [{"id": "1", "title": "a"}, {"id": "2", "title": "b"}],
    }
    h.json_path().write_text(json.dumps(data))
    await h.tool(op="start")
    await h.tool(op="complete")
    assert h.raw()["approved_at"] == "2026-01-01T00:00:00Z"


async def test_c1_front_end_reads_do_not_clear_editing_or_delete_idle_active(
    tmp_path: Path,
) -> None:
    # The TUI match-arm bugs: reads on every message / reload must not clear Editing nor delete
    # an idle Active plan whose seed produced no tasks.
    h = make_harness(tmp_path)
    empty_steps = VALID_MD.split("## Implementation steps")[0] + "## Implementation steps\n1. x\n"
    revision = await design_written(h, empty_steps)
    await h.plans.state(SID)
    assert await h.fresh().plans.state(SID) == "post_init"
    result = await h.plans.approve(SID, revision=revision, actor="tg:1")
    assert result.ok
    raw = h.raw()
    raw["tasks"] = []
    h.json_path().write_text(json.dumps(raw))
    for _ in range(3):
        restarted = h.fresh()
        assert await restarted.plans.state(SID) == "active"
        assert (await restarted.plans.current(SID)) is not None
    assert h.json_path().exists()


async def test_c1_editing_texts_never_tell_the_agent_to_plan_start(tmp_path: Path) -> None:
    # The compaction-stub bullet: nothing shown to the agent in Editing says "plan start".
    h = make_harness(tmp_path)
    await h.plans.enter_pre_init(SID)
    assert "start" not in (await h.plans.show(SID)).text
    out = await h.tool(op="init", title="T")
    assert "plan start" not in out.content
    show = (await h.tool(op="show")).content
    assert "plan start" not in show and "Editing" in show
    sidecar = await h.plans.current(SID)
    assert "plan start" not in render_show(sidecar, "x", "/p.md")


# --- C2 ------------------------------------------------------------------------------------


async def test_c2_md_edits_update_description_and_fire_events(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    await h.tool(op="init", title="T")
    before = await h.plans.revision(SID)
    await h.write_md("# T\n\nfirst\n")
    await h.write_md("# T\n\nsecond\n")
    assert h.raw()["description"] == "# T\n\nsecond\n"
    assert await h.plans.revision(SID) == before + 2
    changed = [e for e in await h.plan_events() if isinstance(e, PlanChanged)]
    assert [e.reason for e in changed[-2:]] == ["md", "md"]
    assert changed[-1].revision == before + 2


async def test_c2_editing_cannot_persist_a_checklist(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    await h.tool(op="init", title="T")
    out = await h.tool(op="add_tasks", tasks=[{"title": "x"}])
    assert out.is_error and "editing-checklist-blocked" in out.content
    # A hand-edited sidecar with tasks while Editing: the next mirror writes tasks back empty.
    raw = h.raw()
    raw["tasks"] = [{"id": "9", "title": "sneaky"}]
    h.json_path().write_text(json.dumps(raw))
    fresh = h.fresh()
    assert (await fresh.plans.current(SID)).tasks == []  # type: ignore[union-attr]
    await fresh.write_md("# T\nchanged\n")
    assert fresh.raw()["tasks"] == []


async def test_c2_template_sections_documented_and_visible_to_prompts(tmp_path: Path) -> None:
    doc = SPEC_DOC.read_text()
    for heading in (
        "## Context",
        "**Problem:**",
        "**Target state:**",
        "**Intent:**",
        "## Implementation steps",
        "Done when:",
    ):
        assert heading in doc
    h = make_harness(tmp_path)
    out = await h.tool(op="init", title="T")
    assert "template B" in out.content and "## Context" in out.content
    assert "## Implementation steps" in h.md_path().read_text()


# --- C3 ------------------------------------------------------------------------------------


async def test_c3_editing_blocks_checklist_operations(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    await h.tool(op="init", title="T")
    for args in (
        {"op": "add_tasks", "tasks": [{"title": "a"}]},
        {"op": "add_task", "title": "a"},
        {"op": "start"},
        {"op": "complete"},
        {"op": "skip", "reason": "r"},
    ):
        out = await h.tool(**args)
        assert out.is_error and out.content == TEXTS["editing-checklist-blocked"], args


async def test_c3_checklist_and_import_reach_active(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    await checklist(h, "a", "b")
    assert await h.plans.state(SID) == "active"
    (h.workspace / "tasks.json").write_text(json.dumps({"tasks": [{"title": "x"}]}))
    out = await h.tool("s2", op="init", title="Imported", file_path="tasks.json")
    assert not out.is_error, out.content
    assert await h.plans.state("s2") == "active"
    assert h.raw("s2")["mode"] == "import"


async def test_c3_empty_import_is_refused(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    (h.workspace / "empty.json").write_text(json.dumps({"tasks": []}))
    out = await h.tool(op="init", title="I", file_path="empty.json")
    assert out.is_error and out.content == TEXTS["import-empty"]
    assert await h.plans.state(SID) == "none"


async def test_c3_active_appends_via_add_tasks_and_alias_works(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    await checklist(h, "a")
    out = await h.tool(op="add_tasks", tasks=[{"title": "b"}, {"title": "c"}])
    assert not out.is_error
    out = await h.tool(op="add_task", title="d", acceptance_criteria=["d works"])
    assert not out.is_error
    tasks = h.raw()["tasks"]
    assert [t["title"] for t in tasks] == ["a", "b", "c", "d"]
    assert [t["id"] for t in tasks] == ["1", "2", "3", "4"]
    assert [t["source"] for t in tasks] == ["plan", "agent", "agent", "agent"]


async def test_c3_completing_last_task_archives_to_noplan(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    await checklist(h, "a", "b")
    await h.tool(op="start")
    await h.tool(op="complete", evidence="done a")
    await h.tool(op="start")
    out = await h.tool(op="complete")
    assert "archived" in out.content
    assert await h.plans.state(SID) == "none"
    assert not h.json_path().exists()
    archived = [json.loads(p.read_text()) for p in h.archived()]
    assert archived[0]["archive_reason"] == "completed"
    assert archived[0]["tasks"][0]["evidence"] == "done a"
    events = await h.plan_events()
    assert isinstance(events[-1], PlanChanged) and events[-1].status == "none"


async def test_c3_criteria_set_and_clear_goals(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    out = await h.tool(
        op="init",
        title="C",
        tasks=[
            {"title": "a", "acceptance_criteria": ["tests pass"]},
            {"title": "b"},
            {"title": "c", "acceptance_criteria": ["docs built"]},
        ],
    )
    assert not out.is_error
    await h.tool(op="start")
    assert h.sink.calls == [("set", (SID, "1", "a", ["tests pass"]))]
    await h.tool(op="complete")
    assert h.sink.calls[-1] == ("clear", SID)
    await h.tool(op="start")  # b: no criteria, no goal
    assert h.sink.calls[-1] == ("clear", SID)
    await h.tool(op="skip", reason="not needed")
    await h.tool(op="start")
    assert h.sink.calls[-1] == ("set", (SID, "3", "c", ["docs built"]))
    await h.plans.discard(SID)
    assert h.sink.calls[-1] == ("clear", SID)


async def test_c3_first_start_does_not_auto_approve(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    await checklist(h, "a", "b")
    await h.tool(op="start")
    assert h.raw()["approved_at"] is None
    h2 = make_harness(tmp_path / "design")
    await design_written(h2)
    out = await h2.tool(op="start")
    assert out.is_error and h2.raw()["approved_at"] is None and h2.raw()["status"] == "Editing"


def test_c3_docs_list_every_refusal_code_and_text() -> None:
    doc = SPEC_DOC.read_text()
    for code, text in {**TEXTS, **GATE_TEXTS}.items():
        assert f"`{code}`" in doc, code
        assert text in doc, code


# --- Verification --------------------------------------------------------------------------


async def test_verify_c1_bash_denied_post_init(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    await h.tool(op="init", title="T")
    view = await h.plans.gate_view(SID)
    assert (
        check_gate("bash", {"command": "echo hi"}, view, workspace=h.workspace)
        == GATE_TEXTS["gate-editing-bash"]
    )
    assert check_gate("read_file", {"path": "a"}, view, workspace=h.workspace) is None


async def test_verify_c1_noplan_is_ungated(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    view = await h.plans.gate_view(SID)
    for tool in ("write_file", "edit_file", "bash"):
        assert check_gate(tool, {"path": "a", "command": "ls"}, view, workspace=h.workspace) is None


async def test_verify_c2_mirror_events_fire_and_plan_mode_recorded(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    await h.plans.enter_pre_init(SID)
    await h.tool(op="init", title="T")
    await h.write_md("# T\n")
    events = await h.plan_events()
    assert isinstance(events[0], PlanMode) and events[0].active
    assert [e.reason for e in events if isinstance(e, PlanChanged)] == [
        "pre_init",
        "init_design",
        "md",
    ]


async def test_verify_c3_init_is_an_ordinary_exclusive_tool_call(tmp_path: Path) -> None:
    from engine.plan.tool import PlanTool

    h = make_harness(tmp_path)
    tool = PlanTool(h.plans)
    assert tool.is_concurrency_safe({"op": "init"}) is False
    assert tool.parameters["properties"]["op"]["enum"][:3] == ["init", "add_tasks", "add_task"]


async def test_verify_c3_design_checklist_disambiguation(tmp_path: Path) -> None:
    cases = [
        ({"title": "T"}, None, "post_init"),
        ({"title": "T", "mode": "design"}, None, "post_init"),
        ({"title": "T", "tasks": [{"title": "a"}]}, None, "active"),
        ({"title": "T", "mode": "checklist", "tasks": [{"title": "a"}]}, None, "active"),
        ({"title": "T", "mode": "design", "tasks": [{"title": "a"}]}, "design-with-tasks", "none"),
        ({"title": "T", "mode": "checklist"}, "checklist-empty", "none"),
        ({"title": "T", "mode": "checklist", "tasks": []}, "checklist-empty", "none"),
        ({"title": "T", "mode": "plan"}, "bad-mode", "none"),
        ({"title": " "}, "title-required", "none"),
    ]
    for i, (args, code, state) in enumerate(cases):
        h = make_harness(tmp_path / str(i))
        out = await h.tool(op="init", **args)
        if code is None:
            assert not out.is_error, (args, out.content)
        else:
            assert out.is_error and out.content == TEXTS[code], args
        assert await h.plans.state(SID) == state, args


async def test_verify_c3_import_equals_active_without_discard_from_pre_init(
    tmp_path: Path,
) -> None:
    h = make_harness(tmp_path)
    await h.plans.enter_pre_init(SID)
    (h.workspace / "plan.md").write_text(VALID_MD)
    out = await h.tool(op="init", title="Imported", file_path="plan.md")
    assert not out.is_error, out.content
    assert await h.plans.state(SID) == "active"
    assert [t["title"] for t in h.raw()["tasks"]] == [
        "Write the parser",
        "Wire the CLI",
        "Document it",
    ]
    assert h.archived() == []  # replaced, not discarded


async def test_verify_c3_import_with_file_path_ignores_mode(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    (h.workspace / "t.json").write_text(json.dumps([{"title": "x"}]))
    out = await h.tool(op="init", title="I", mode="design", file_path="t.json")
    assert not out.is_error and await h.plans.state(SID) == "active"


async def test_verify_c3_no_sqlite_plan_path(tmp_path: Path) -> None:
    # SQLite migrate-or-retire: the plan's only live store is the JSON sidecar.
    for module in ("engine/plan/service.py", "engine/plan/machine.py", "storage/plan_files.py"):
        text = (REPO / module).read_text()
        assert not re.search(r"sqlite", text, re.I), module
    h = make_harness(tmp_path)
    await checklist(h, "a")
    files = sorted(p.name for p in h.session_folder().iterdir())
    assert files == [f".plangate_plan_{SID}.json"]


async def test_verify_c3_no_auto_approve_anywhere_but_approve(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    await checklist(h, "a", "b")
    for args in (
        {"op": "start"},
        {"op": "complete"},
        {"op": "add_task", "title": "c"},
        {"op": "start"},
        {"op": "skip", "reason": "r"},
    ):
        out = await h.tool(**args)
        assert not out.is_error, (args, out.content)
        assert h.raw()["approved_at"] is None


def test_verify_c3_plan_json_spec_documents_tool_contract(tmp_path: Path) -> None:
    from engine.plan.tool import OPS, PlanTool

    doc = SPEC_DOC.read_text()
    for op in OPS:
        assert f"| `{op}` |" in doc, op
    schema_args = PlanTool(make_harness(tmp_path).plans).parameters["properties"]
    for arg in schema_args:
        assert f"`{arg}" in doc, arg
    for section in ("Legacy status load map", "Canonical write table", "Template B"):
        assert section in doc
