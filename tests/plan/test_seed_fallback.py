"""Seed fallback (docs/review-fixes.md): tasks added to an empty Active design plan: plan tasks."""

from __future__ import annotations

from pathlib import Path

from engine.plan.seeding import Seeding, default_seeding
from tests.plan.lifecycle_helpers import SID, design_written, make_harness


async def test_seed_retry_tasks_are_plan_tasks_replaced_on_reapproval(tmp_path: Path) -> None:
    real = default_seeding()
    # The first approval extracts nothing: Active with no tasks, the seed-retry state.
    extracting = False
    seeding = Seeding(
        extract=lambda text: real.extract(text) if extracting else [],
        validate=real.validate,
        seed=real.seed,
        reconcile=real.reconcile,
    )
    h = make_harness(tmp_path, seeding=seeding)
    revision = await design_written(h)
    assert (await h.plans.approve(SID, revision=revision, actor="tg:1")).ok
    out = await h.tool(op="add_tasks", tasks=[{"title": "seeded by the model"}])
    assert not out.is_error, out.content
    seeded = h.raw()["tasks"]
    assert [(t["source"], t.get("plan_identity")) for t in seeded] == [("plan", None)]
    # Once the checklist has tasks, add_tasks makes agent tasks again.
    out = await h.tool(op="add_task", title="agent chore")
    assert not out.is_error, out.content
    assert [t["source"] for t in h.raw()["tasks"]] == ["plan", "agent"]

    extracting = True
    assert (await h.plans.revise(SID)).ok
    again = await h.plans.approve(SID, revision=await h.plans.revision(SID), actor="tg:1")
    assert again.ok
    titles = [(t["title"], t["source"]) for t in h.raw()["tasks"]]
    assert ("seeded by the model", "agent") not in titles
    assert all(title != "seeded by the model" for title, _ in titles)
    assert ("agent chore", "agent") in titles
    assert ("Write the parser", "plan") in titles
