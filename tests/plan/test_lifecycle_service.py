"""PlanService flows: pre-init upgrade/replace, approve, revise, re-approve, discard, events."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from engine.events import GoalRoundSource, PlanChanged, PlanMode
from engine.plan.refusals import TEXTS
from engine.plan.tool import PlanTool
from engine.plan.types import PlanFlow
from engine.tools.base import ToolContext
from tests.plan.lifecycle_helpers import (
    SID,
    VALID_MD,
    checklist,
    design_written,
    make_harness,
)


async def test_pre_init_then_design_init_upgrades_keeping_the_plan_id(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    await h.plans.enter_pre_init(SID)
    plan_id = h.raw()["id"]
    out = await h.tool(op="init", title="Design")
    assert not out.is_error
    assert str(h.md_path()) in out.content
    raw = h.raw()
    assert raw["id"] == plan_id and raw["pre_init_editing"] is False
    assert raw["status"] == "Editing" and raw["mode"] == "design"
    assert h.md_path().read_text().startswith("# Design\n")
    assert h.archived() == []


async def test_pre_init_then_checklist_init_replaces_without_discard(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    await h.plans.enter_pre_init(SID)
    plan_id = h.raw()["id"]
    await checklist(h, "a", "b")
    raw = h.raw()
    assert raw["status"] == "Active" and raw["id"] != plan_id and raw["pre_init_editing"] is False
    assert h.archived() == []
    events = await h.plan_events()
    assert [e.active for e in events if isinstance(e, PlanMode)] == [True, False]


async def test_second_init_is_refused_once_live(tmp_path: Path) -> None:
    for setup in ("design", "checklist"):
        h = make_harness(tmp_path / setup)
        if setup == "design":
            await h.tool(op="init", title="T")
        else:
            await checklist(h, "a")
        for args in ({"title": "again"}, {"title": "x", "tasks": [{"title": "y"}]}):
            out = await h.tool(op="init", **args)
            assert out.is_error and out.content == TEXTS["plan-live"]
        (h.workspace / "t.json").write_text('[{"title": "z"}]')
        out = await h.tool(op="init", title="i", file_path="t.json")
        assert out.is_error and out.content == TEXTS["plan-live"]


async def test_enter_pre_init_refusals(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    assert (await h.plans.enter_pre_init(SID)).ok
    assert (await h.plans.enter_pre_init(SID)).code == "pre-init-already"
    await h.tool(op="init", title="T")
    assert (await h.plans.enter_pre_init(SID)).code == "pre-init-already"
    h2 = make_harness(tmp_path / "b")
    await checklist(h2, "a")
    assert (await h2.plans.enter_pre_init(SID)).code == "plan-active-revise"


async def test_submit_validates_template_b(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    out = await h.tool(op="submit")
    assert out.is_error and out.content == TEXTS["submit-nothing-written"]
    await h.tool(op="init", title="T")
    out = await h.tool(op="submit")
    assert out.is_error and out.content.startswith(TEXTS["template-incomplete"])
    assert "Problem" in out.content
    revision = await h.plans.revision(SID)
    await h.write_md(VALID_MD)
    out = await h.tool(op="submit")
    assert not out.is_error and out.content == "sent for review; end your turn"
    assert await h.plans.revision(SID) == revision + 1  # the .md write, not the submit
    last = (await h.plan_events())[-1]
    assert isinstance(last, PlanChanged) and last.reason == "submitted"
    assert h.raw()["submitted_revision"] == revision + 1
    await h.write_md(VALID_MD + "\nmore\n")
    assert h.raw()["submitted_revision"] != h.raw()["revision"]


async def test_approve_seeds_checklist_from_md(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    revision = await design_written(h)
    result = await h.plans.approve(SID, revision=revision, actor="tg:42")
    assert result.ok and result.seeded == 3 and result.state == "active"
    raw = h.raw()
    assert raw["status"] == "Active" and raw["approved_at"]
    assert [a["user_id"] for a in raw["approved_by"]] == ["tg:42"]
    assert [t["title"] for t in raw["tasks"]] == ["Write the parser", "Wire the CLI", "Document it"]
    assert raw["tasks"][0]["acceptance_criteria"] == ["parser tests pass"]
    assert all(t["source"] == "plan" and t["plan_identity"] for t in raw["tasks"])
    events = await h.plan_events()
    assert isinstance(events[-2], PlanMode) and not events[-2].active
    assert isinstance(events[-1], PlanChanged) and events[-1].reason == "approve"


async def test_approve_refusals(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    assert (await h.plans.approve(SID, revision=0, actor="tg:1")).code == "approve-no-plan"
    await h.plans.enter_pre_init(SID)
    assert (await h.plans.approve(SID, revision=1, actor="tg:1")).code == "approve-pre-init"
    await h.tool(op="init", title="T")
    revision = await h.plans.revision(SID)
    bad = await h.plans.approve(SID, revision=revision, actor="tg:1")
    assert bad.code == "approve-template" and "Intent" in bad.text
    await h.write_md(VALID_MD)
    assert (await h.plans.approve(SID, revision=revision, actor="tg:1")).code == "approve-stale"
    good = await h.plans.approve(SID, revision=revision + 1, actor="tg:1")
    assert good.ok
    assert (
        await h.plans.approve(SID, revision=good.revision, actor="tg:1")
    ).code == "approve-active"


async def test_approve_with_no_work_items_keeps_empty_active(tmp_path: Path) -> None:
    # Context-only plan whose steps are not extractable: Active with empty tasks, kept.
    calls: list[str] = []
    from engine.plan.seeding import Seeding, default_seeding

    real = default_seeding()
    h = make_harness(
        tmp_path,
        seeding=Seeding(
            extract=lambda text: calls.append("extract") or [],
            validate=real.validate,
            seed=real.seed,
            reconcile=real.reconcile,
        ),
    )
    revision = await design_written(h)
    result = await h.plans.approve(SID, revision=revision, actor="tg:1")
    assert result.ok and result.seeded == 0 and calls == ["extract"]
    assert await h.fresh().plans.state(SID) == "active"
    out = await h.tool(op="add_tasks", tasks=[{"title": "seeded by the model"}])
    assert not out.is_error


async def test_revise_and_reapprove_reconciles_and_mints_new_plan_id(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    revision = await design_written(h)
    await h.plans.approve(SID, revision=revision, actor="tg:1")
    first = h.raw()
    await h.tool(op="start")
    await h.tool(op="complete", evidence="parser done")
    await h.tool(op="add_task", title="agent chore")
    result = await h.plans.revise(SID)
    assert result.ok and result.state == "post_init"
    raw = h.raw()
    assert raw["tasks"] == [] and raw["revising"]["plan_id"] == first["id"]
    assert ("clear", SID) in h.sink.calls
    out = await h.tool(op="start")
    assert out.is_error and out.content == TEXTS["editing-checklist-blocked"]
    await h.write_md(VALID_MD.replace("3. Document it — README section", "3. Document it — docs/"))
    again = await h.plans.approve(SID, revision=await h.plans.revision(SID), actor="tg:1")
    assert again.ok
    raw = h.raw()
    assert raw["id"] != first["id"] and raw["revising"] is None
    assert raw["approved_at"] >= first["approved_at"]
    by_title = {t["title"]: t for t in raw["tasks"]}
    assert by_title["Write the parser"]["status"] == "completed"
    assert by_title["Write the parser"]["evidence"] == "parser done"
    assert by_title["Write the parser"]["plan_provenance"]["plan_id"] == first["id"]
    assert by_title["Document it"]["status"] == "pending"
    assert by_title["agent chore"]["source"] == "agent"
    ids = [t["id"] for t in raw["tasks"]]
    assert len(ids) == len(set(ids))


async def test_discard_during_revision_restores_the_active_plan(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    revision = await design_written(h)
    await h.plans.approve(SID, revision=revision, actor="tg:1")
    await h.tool(op="start")
    before = h.raw()
    await h.plans.revise(SID)
    await h.write_md("# Rewritten\n")
    result = await h.plans.discard(SID)
    assert result.ok and result.state == "active"
    raw = h.raw()
    assert raw["tasks"] == before["tasks"] and raw["id"] == before["id"]
    assert raw["approved_at"] == before["approved_at"]
    assert h.md_path().read_text() == VALID_MD
    assert h.archived() == []


async def test_revise_refused_for_checklist_plans_and_when_not_active(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    assert (await h.plans.revise(SID)).code == "revise-not-active"
    await checklist(h, "a")
    assert (await h.plans.revise(SID)).code == "revise-checklist"


async def test_discard_pre_init_clears_flag_and_nothing_to_discard(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    assert (await h.plans.discard(SID)).code == "discard-nothing"
    await h.plans.enter_pre_init(SID)
    result = await h.plans.discard(SID)
    assert result.ok and result.state == "none"
    assert not h.json_path().exists() and h.archived() == []
    events = await h.plan_events()
    assert [e.active for e in events if isinstance(e, PlanMode)] == [True, False]


async def test_set_flow_persists_without_revision_bump(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    await checklist(h, "a")
    revision = await h.plans.revision(SID)
    n_events = len(await h.plan_events())
    await h.plans.set_flow(
        SID, PlanFlow(chat_id="tg:5", thread_id=None, card_id="77", review_ids=["1", "2"])
    )
    assert h.raw()["flow"] == {
        "chat_id": "tg:5",
        "thread_id": None,
        "card_id": "77",
        "review_ids": ["1", "2"],
    }
    assert await h.plans.revision(SID) == revision
    assert len(await h.plan_events()) == n_events
    assert (await h.fresh().plans.current(SID)).flow.card_id == "77"  # type: ignore[union-attr]


async def test_plan_mode_repair_on_load_sidecar_wins(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    await h.plans.enter_pre_init(SID)
    h.json_path().unlink()  # the sidecar is gone behind the service's back
    fresh = h.fresh()
    assert await fresh.plans.state(SID) == "none"
    last = (await fresh.plan_events())[-1]
    assert isinstance(last, PlanMode) and last.active is False
    n = len(await fresh.plan_events())
    assert await fresh.fresh().plans.state(SID) == "none"
    assert len(await fresh.plan_events()) == n  # agreeing log: no second repair


async def test_start_order_dependencies_and_refusals(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    out = await h.tool(
        op="init",
        title="deps",
        tasks=[
            {"title": "a", "dependencies": ["2"]},
            {"title": "b"},
            {"title": "c", "dependencies": ["1"]},
        ],
    )
    assert not out.is_error, out.content
    assert (await h.tool(op="start", task_id="1")).content == TEXTS["dependencies-unmet"]
    assert (await h.tool(op="start", task_id="9")).content == TEXTS["unknown-task"]
    out = await h.tool(op="start")
    assert "task 2" in out.content
    assert (await h.tool(op="start")).content == TEXTS["task-in-progress"]
    assert (await h.tool(op="complete", task_id="3")).content == TEXTS["task-in-progress"]
    await h.tool(op="complete")
    assert (await h.tool(op="complete", task_id="2")).content == TEXTS["task-finished"]
    assert (await h.tool(op="start", task_id="2")).content == TEXTS["task-not-pending"]
    assert (await h.tool(op="complete")).content == TEXTS["no-task-in-progress"]
    assert (await h.tool(op="skip")).content == TEXTS["reason-required"]
    assert "task 1" in (await h.tool(op="start")).content
    await h.tool(op="skip", reason="obsolete")
    assert h.raw()["tasks"][0]["status"] == "deferred"
    assert h.raw()["tasks"][0]["reason"] == "obsolete"
    assert "task 3" in (await h.tool(op="start")).content


async def test_no_startable_task(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    await h.tool(
        op="init",
        title="x",
        tasks=[{"title": "a", "dependencies": ["2"]}, {"title": "b", "dependencies": ["1"]}],
    )
    assert (await h.tool(op="start")).content == TEXTS["no-startable-task"]


async def test_tool_argument_refusals(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    assert (await h.tool(op="fly")).content == TEXTS["unknown-op"]
    assert (await h.tool(op="start")).content == TEXTS["no-plan"]
    assert (await h.tool(op="init", title="x", tasks=[{"description": "no title"}])).content == (
        TEXTS["bad-task"]
    )
    assert (await h.tool(op="init", title="x", tasks="nope")).content == TEXTS["bad-task"]
    out = await h.tool(op="init", title="x", tasks=[{"title": "a", "dependencies": ["5"]}])
    assert out.content == TEXTS["unknown-dependency"]
    await checklist(h, "a")
    assert (await h.tool(op="add_tasks", tasks=[])).content == TEXTS["tasks-required"]
    assert (await h.tool(op="add_task")).content == TEXTS["bad-task"]
    await h.plans.enter_pre_init("s2")
    assert (await h.tool("s2", op="add_task", title="x")).content == TEXTS[
        "pre-init-checklist-blocked"
    ]
    assert await h.plans.state(SID) == "active"


async def test_import_reads_only_inside_the_workspace(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    outside = tmp_path / "outside.json"
    outside.write_text('[{"title": "x"}]')
    for path in (str(outside), "../outside.json"):
        out = await h.tool(op="init", title="i", file_path=path)
        assert out.content == TEXTS["import-outside-workspace"], path
    (h.workspace / "link.json").symlink_to(outside)
    assert (await h.tool(op="init", title="i", file_path="link.json")).content == TEXTS[
        "import-outside-workspace"
    ]
    assert (await h.tool(op="init", title="i", file_path="missing.json")).content == TEXTS[
        "import-unreadable"
    ]
    crabs = {"id": "p", "status": "Approved", "tasks": [{"title": "from crabs", "extra": 1}]}
    (h.workspace / "crabs.json").write_text(json.dumps(crabs))
    out = await h.tool(op="init", title="i", file_path="crabs.json")
    assert not out.is_error and h.raw()["tasks"][0]["title"] == "from crabs"


async def test_goal_round_cannot_open_a_design_plan(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    ctx = ToolContext(
        session_id=SID,
        workspace=h.workspace,
        turn_id="t",
        source=GoalRoundSource(goal_id="g", revision=1, round=1),
    )
    tool = PlanTool(h.plans)
    out = await tool.run({"op": "init", "title": "x"}, ctx)
    assert out.is_error and out.content == TEXTS["design-autonomous"]
    out = await tool.run({"op": "init", "title": "x", "tasks": [{"title": "a"}]}, ctx)
    assert not out.is_error


async def test_concurrent_ops_are_serialised_per_session(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    await checklist(h, "a")
    results = await asyncio.gather(*(h.tool(op="add_task", title=f"t{i}") for i in range(10)))
    assert not any(r.is_error for r in results)
    ids = [t["id"] for t in h.raw()["tasks"]]
    assert ids == [str(i) for i in range(1, 12)]
    starts = await asyncio.gather(*(h.tool(op="start") for _ in range(4)))
    assert sum(not r.is_error for r in starts) == 1


async def test_show_renders_each_state(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    assert (await h.tool(op="show")).content == "No plan in this session."
    await h.tool(op="init", title="Design")
    assert str(h.md_path()) in (await h.tool(op="show")).content
    h2 = make_harness(tmp_path / "b")
    await h2.tool(
        op="init", title="L", tasks=[{"title": "a"}, {"title": "b", "dependencies": ["1"]}]
    )
    await h2.tool(op="start")
    text = (await h2.tool(op="show")).content
    assert "[>] 1. a" in text and "[ ] 2. b (after 1)" in text
