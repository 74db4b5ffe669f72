"""Verified Done on real projects (docs/checks.md): what the Done card lists is what the plan
changed where its checks ran, files that decide what a check runs are named, and a plan whose
every task was carried over by a re-approval still runs its checks and is archived.

The real engine, real files, SQLite, git and bubblewrap; a scripted agent.
"""

from __future__ import annotations

import json
from pathlib import Path

from bot.telegram.cards import checks_proof
from engine.model.script import ScriptStep, call, say
from engine.model.scripted import ScriptedProvider
from engine.plan.types import PlanSidecar
from tests.checks.support import APP_PY, CHECK, TEST_PY
from tests.engine.helpers import OWNER, engine_rig, post_init, settle
from tests.keys import chat
from tests.projects.support import git, make_repo

NEW_TEST = "import app\n\nassert app.health() == 'ok'\n"


def _plan(steps: str, checks: str = "") -> str:
    return (
        "# Health\n\n## Context\n- **Problem:** `health()` says down.\n"
        "- **Target state:** it says ok.\n- **Intent:** A green suite.\n\n"
        f"## Implementation steps\n{steps}" + (f"\n## Checks\n- `{checks}`\n" if checks else "")
    )


def _archived(home: Path) -> dict:
    files = sorted(home.glob("projects/*/session/archive/*.json"))
    assert len(files) == 1, files
    return json.loads(files[0].read_text())


async def test_changed_tests_are_taken_in_the_worktree_with_the_same_files_both_times(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path / "work", {"app.py": APP_PY, "test_app.py": TEST_PY})
    # The owner's own uncommitted test in the main checkout: never the plan's change.
    (repo / "test_scratch.py").write_text("import unittest\n")
    plan = _plan("1. Fix health — return ok.\n   Done when: `python3 test_new.py` passes\n", CHECK)
    script: list[ScriptStep] = [
        call("plan", {"op": "start"}),
        call("read_file", {"path": "app.py"}),
        call("write_file", {"path": "test_new.py", "content": NEW_TEST}),
        call("edit_file", {"path": "app.py", "old_text": '"down"', "new_text": '"ok"'}),
        call("plan", {"op": "complete"}),
        say("Done.", expect="archived"),
    ]
    async with engine_rig(tmp_path, ScriptedProvider(script)) as rig:
        sid = await rig.engine.session_for_chat(chat(-1))
        await post_init(rig, sid, plan)
        await rig.engine.command(sid, "execute", "", actor=OWNER)
        await settle(rig.engine, sid, timeout_s=90)
        record = await rig.engine.worktrees.record(sid)
    assert record is not None and record.phase == "done"
    archived = _archived(rig.home)
    assert [t["status"] for t in archived["tasks"]] == ["completed"]
    # The new test named by the check is "added"; the old untouched test and the owner's
    # uncommitted one are not listed.
    assert archived["changed_tests"] == ["test_new.py"]
    assert git(repo, "status", "--porcelain") == "?? test_scratch.py"


async def test_a_unittest_py_that_makes_the_runner_pass_is_named_on_the_done_card(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "app.py").write_text(APP_PY)
    (work / "test_app.py").write_text(TEST_PY)
    plan = _plan(f"1. Fix health — return ok.\n   Done when: `{CHECK}` passes\n")
    script: list[ScriptStep] = [
        call("plan", {"op": "start"}),
        # Instead of fixing app.py, the agent shadows the test runner.
        call("write_file", {"path": "unittest.py", "content": "raise SystemExit(0)\n"}),
        call("plan", {"op": "complete"}),
        say("Done.", expect="archived"),
    ]
    async with engine_rig(tmp_path, ScriptedProvider(script)) as rig:
        sid = await rig.engine.session_for_chat(chat(-1))
        await post_init(rig, sid, plan)
        await rig.engine.command(sid, "execute", "", actor=OWNER)
        await settle(rig.engine, sid, timeout_s=90)
    archived = _archived(rig.home)
    assert archived["changed_tests"] == ["unittest.py"]
    proof = "\n".join(checks_proof(PlanSidecar.model_validate(archived)))
    assert "⚠️ changed what runs the checks: unittest.py" in proof


async def test_a_reapproval_that_carries_every_task_over_runs_the_plan_checks_and_archives(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path / "work", {"app.py": APP_PY, "test_app.py": TEST_PY})
    two_steps = _plan(
        "1. Fix health — return ok.\n   Done when: app.py says ok\n"
        "2. Document it — a README line.\n   Done when: the README says so\n",
        CHECK,
    )
    script: list[ScriptStep] = [
        call("plan", {"op": "start"}),
        call("edit_file", {"path": "app.py", "old_text": '"down"', "new_text": '"ok"'}),
        call("plan", {"op": "complete"}),
        say("Task 1 is done; the README next.", expect="Completed task 1"),
    ]
    async with engine_rig(tmp_path, ScriptedProvider(script)) as rig:
        engine, plans = rig.engine, rig.engine.plans
        sid = await engine.session_for_chat(chat(-1))
        await post_init(rig, sid, two_steps)
        await engine.command(sid, "execute", "", actor=OWNER)
        await settle(engine, sid, timeout_s=90)
        await engine.command(sid, "stop", "", actor=OWNER)
        # The owner drops step 2: step 1 is carried over as completed, nothing is left.
        assert (await plans.revise(sid)).ok
        path = await plans.md_path(sid)
        path.write_text(two_steps.split("2. Document")[0] + f"\n## Checks\n- `{CHECK}`\n")
        assert (await plans.md_written(sid)).ok
        await engine.command(sid, "execute", "", actor=OWNER)
        await settle(engine, sid, timeout_s=90)
        assert await plans.state(sid) == "none"
        record = await engine.worktrees.record(sid)
    # The plan's checks ran and passed, the plan is archived, the branch waits for Merge.
    assert record is not None and record.phase == "done"
    archived = _archived(rig.home)
    assert [t["status"] for t in archived["tasks"]] == ["completed"]
    assert [(r["command"], r["exit_code"]) for r in archived["check_results"]] == [(CHECK, 0)]
    proof = "\n".join(checks_proof(PlanSidecar.model_validate(archived)))
    assert "skipped" not in proof and f"✅ <code>{CHECK}</code>" in proof
    assert git(repo, "status", "--porcelain") == ""
