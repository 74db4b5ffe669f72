"""Checks gate a task's completion: the real engine, real files and SQLite, real bubblewrap,
a scripted agent (docs/checks.md)."""

from __future__ import annotations

import json
from pathlib import Path

from engine.checks.runner import SandboxChecks
from engine.events import ApprovalDecided, ApprovalRequested, ToolResult
from engine.model.script import call, say
from engine.model.scripted import ScriptedProvider
from engine.tools.bash import BashTool
from tests.checks.support import (
    ALLOW_CHECK,
    CHECK,
    CHECKED_PLAN,
    FIXED_APP_PY,
    execution,
    make_project,
)
from tests.engine.helpers import OWNER, engine_rig, post_init, settle
from tests.keys import chat
from tests.telegram.live import until


def _archived(home: Path) -> dict:
    files = sorted(home.glob("projects/*/session/archive/*.json"))
    assert len(files) == 1, files
    return json.loads(files[0].read_text())


async def test_complete_runs_the_check_refuses_a_failure_and_records_the_pass(
    tmp_path: Path,
) -> None:
    make_project(tmp_path / "work")
    model = ScriptedProvider(execution())
    async with engine_rig(tmp_path, model, allow_bash=ALLOW_CHECK) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-1))
        await post_init(rig, sid, CHECKED_PLAN)
        await engine.command(sid, "execute", "", actor=OWNER)
        await settle(engine, sid, timeout_s=60)
        assert await engine.plans.state(sid) == "none"
        results = [
            s.event for s in await rig.storage.log.read(sid) if isinstance(s.event, ToolResult)
        ]
    refused = next(r for r in results if "checks-failed" in r.content)
    assert refused.is_error and "AssertionError" in refused.content and CHECK in refused.content
    assert (rig.workspace / "app.py").read_text() == FIXED_APP_PY
    archived = _archived(rig.home)
    task = archived["tasks"][0]
    assert task["status"] == "completed"
    assert task["checks"] == [CHECK]
    [result] = task["check_results"]
    assert result["command"] == CHECK and result["exit_code"] == 0
    assert "OK" in result["output_tail"] and result["duration_s"] > 0
    # The evidence is plangate's, not the model's "all green".
    assert "run by plangate" in task["evidence"] and "all green" not in task["evidence"]
    assert archived["changed_tests"] == ["test_app.py"]


async def test_a_check_cannot_write_the_workspace_and_a_missing_command_fails(
    tmp_path: Path,
) -> None:
    plan = CHECKED_PLAN.replace(f"`{CHECK}` passes", "`touch made.txt` passes")
    plan += "\n## Checks\n- `nosuchcommand --version`\n"
    script = [
        call("plan", {"op": "start"}),
        call("plan", {"op": "complete"}),
        say("The check cannot write.", expect="Read-only file system"),
    ]
    make_project(tmp_path / "work")
    async with engine_rig(tmp_path, ScriptedProvider(script)) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-1))
        await post_init(rig, sid, plan)
        await engine.command(sid, "execute", "", actor=OWNER)
        await settle(engine, sid, timeout_s=60)
        sidecar = await engine.plans.current(sid)
        assert sidecar is not None and sidecar.checks == ["nosuchcommand --version"]
        assert [t.status for t in sidecar.tasks] == ["in_progress"]
        assert not (rig.workspace / "made.txt").exists()
        results = [
            s.event for s in await rig.storage.log.read(sid) if isinstance(s.event, ToolResult)
        ]
        # The plan's check was not run after the task's own failed.
        assert "Not run after the failure: `nosuchcommand --version`" in results[-1].content
        # Alone, the missing command fails with the shell's own error.
        run = await SandboxChecks(BashTool()).run(
            ["nosuchcommand --version"], session_id=sid, workspace=rig.workspace
        )
        assert not run.passed and run.results[0].exit_code == 127
        assert "command not found" in run.results[0].output_tail


async def test_skip_of_a_checked_task_in_the_approved_run_waits_and_a_timeout_pauses_it(
    tmp_path: Path,
) -> None:
    # The approved run is attended (the owner armed it): the skip waits for the owner; with
    # nobody answering within the timeout it is denied and the run pauses on it.
    script = [
        call("plan", {"op": "start"}),
        call("plan", {"op": "skip", "reason": "the test is flaky"}),
        say("I could not skip it.", expect="skip-needs-owner"),
    ]
    make_project(tmp_path / "work")
    async with engine_rig(tmp_path, ScriptedProvider(script), approval_timeout_s=0.3) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-1))
        await post_init(rig, sid, CHECKED_PLAN)
        await engine.command(sid, "execute", "", actor=OWNER)
        await settle(engine, sid, timeout_s=60)
        sidecar = await engine.plans.current(sid)
        assert sidecar is not None and [t.status for t in sidecar.tasks] == ["in_progress"]
        paused = engine.agents.controller(sid).checklist.paused
        assert paused is not None and paused.kind == "approval-timeout"
        assert "skip task 1" in paused.evidence
        events = [s.event for s in await rig.storage.log.read(sid)]
    asked = [e for e in events if isinstance(e, ApprovalRequested)]
    assert len(asked) == 1 and asked[0].tool == "plan skip" and not asked[0].unattended
    assert "skip task 1" in asked[0].command and CHECK in asked[0].command
    decided = [e for e in events if isinstance(e, ApprovalDecided)]
    assert [d.decision for d in decided] == ["timeout"]


async def test_skip_of_a_checked_task_in_a_goal_round_is_denied_and_blocks_the_goal(
    tmp_path: Path,
) -> None:
    # A goal round is unattended: the skip's approval request is denied at once (nobody to
    # ask), the task stays in progress and the goal waits for the owner.
    script = [
        call("plan", {"op": "start"}),
        call("plan", {"op": "skip", "reason": "the test is flaky"}),
        say("I could not skip it.", expect="skip-needs-owner"),
    ]
    make_project(tmp_path / "work")
    async with engine_rig(tmp_path, ScriptedProvider(script)) as rig:
        engine, plans = rig.engine, rig.engine.plans
        sid = await engine.session_for_chat(chat(-1))
        await post_init(rig, sid, CHECKED_PLAN)
        assert (await plans.approve(sid, revision=await plans.revision(sid), actor=OWNER)).ok
        await engine.command(sid, "goal", "finish the plan", actor=OWNER)

        async def blocked() -> bool:
            goal = await engine.goals.get(sid)
            return goal is not None and goal.phase == "blocked"

        await until(blocked, timeout_s=60)
        await settle(engine, sid, timeout_s=60)
        sidecar = await plans.current(sid)
        assert sidecar is not None and [t.status for t in sidecar.tasks] == ["in_progress"]
        goal = await engine.goals.get(sid)
        events = [s.event for s in await rig.storage.log.read(sid)]
    assert goal is not None and goal.blocked is not None
    assert goal.blocked.code == "needs-approval" and "skip task 1" in goal.blocked.message
    asked = [e for e in events if isinstance(e, ApprovalRequested)]
    assert len(asked) == 1 and asked[0].tool == "plan skip" and asked[0].unattended
    assert "skip task 1" in asked[0].command and CHECK in asked[0].command
    decided = [e for e in events if isinstance(e, ApprovalDecided)]
    assert [d.decision for d in decided] == ["unattended"]


async def test_a_checked_skip_in_the_run_the_owner_armed_waits_for_the_answer(
    tmp_path: Path,
) -> None:
    script = [
        call("plan", {"op": "start"}),
        call("plan", {"op": "skip", "reason": "the monitor is retired"}),
        say("Skipped with the owner's approval.", expect="Skipped (deferred)"),
    ]
    make_project(tmp_path / "work")
    async with engine_rig(tmp_path, ScriptedProvider(script)) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-1))
        await post_init(rig, sid, CHECKED_PLAN)
        await engine.command(sid, "execute", "", actor=OWNER)

        async def waiting() -> bool:
            return engine.pending_approval(sid) is not None

        await until(waiting, timeout_s=60)
        view = engine.pending_approval(sid)
        assert view is not None and view.tool == "plan skip" and not view.unattended
        sidecar = await engine.plans.current(sid)
        assert sidecar is not None and [t.status for t in sidecar.tasks] == ["in_progress"]
        answered = await engine.approvals.answer(sid, "once", view.short_id, actor=OWNER)
        assert answered.text == "Allowed once."
        await settle(engine, sid, timeout_s=60)
        assert await engine.plans.state(sid) == "none"
    task = _archived(rig.home)["tasks"][0]
    assert task["status"] == "deferred" and task["reason"] == "the monitor is retired"
