"""No shortcut: a task with checks completes only by plangate's passing run (docs/checks.md)."""

from __future__ import annotations

from pathlib import Path

from engine.checks.types import CheckResult, CheckRun
from engine.events import HumanSource
from engine.model.scripted import ScriptedProvider
from engine.plan import checklist
from engine.plan.machine import Context
from engine.plan.refusals import Refusal
from engine.todo.tool import TodoWriteTool
from engine.tools.base import ToolContext
from engine.tools.files import file_tools
from tests.checks.support import CHECK, CHECKED_PLAN, make_project
from tests.engine.helpers import OWNER, engine_rig, post_init
from tests.keys import chat


async def test_the_todo_list_the_file_tools_and_a_bare_complete_cannot_finish_it(
    tmp_path: Path,
) -> None:
    make_project(tmp_path / "work")
    async with engine_rig(tmp_path, ScriptedProvider([])) as rig:
        engine, plans = rig.engine, rig.engine.plans
        sid = await engine.session_for_chat(chat(-1))
        await post_init(rig, sid, CHECKED_PLAN)
        assert (await plans.approve(sid, revision=await plans.revision(sid), actor=OWNER)).ok
        assert (await plans.start(sid)).ok
        ctx = ToolContext(sid, rig.workspace, "t", HumanSource(user_id=OWNER))

        # The todo list is the agent's own notes: a "completed" item touches no plan task.
        todo = TodoWriteTool(rig.storage.log)
        done = await todo.run({"todos": [{"content": "Fix health", "status": "completed"}]}, ctx)
        assert not done.is_error

        # The sidecar is outside the workspace: the file tools cannot write it.
        sidecar_path = await rig.storage.plan_store.json_path(sid)
        before = sidecar_path.read_text()
        tools = {t.name: t for t in file_tools()}
        forged = before.replace('"in_progress"', '"completed"')
        wrote = await tools["write_file"].run({"path": str(sidecar_path), "content": forged}, ctx)
        assert wrote.is_error and sidecar_path.read_text() == before

        # A complete with no workspace to run the checks in, and the pure transition with no
        # run, with a run of other commands, and with a failed run: all refused.
        bare = await plans.complete(sid, evidence="trust me")
        assert bare.code == "checks-unavailable"
        live = await plans.current(sid)
        assert live is not None and [t.status for t in live.tasks] == ["in_progress"]
        now = Context(session_id=sid, now="2026-12-02T00:00:00+00:00", new_plan_id="x")
        ok = CheckResult(command="true", exit_code=0, duration_s=0.0)
        failed = CheckResult(command=CHECK, exit_code=1, duration_s=0.1, output_tail="FAILED")
        for run, code in (
            (None, "checks-unavailable"),
            (CheckRun(results=[ok]), "checks-changed"),
            (CheckRun(results=[failed]), "checks-failed"),
        ):
            out = checklist.complete(live, None, None, "done", now, run=run)
            assert isinstance(out, Refusal) and out.code == code
        # A skip without the owner, and a fresh init (a re-plan) while Active.
        skipped = await plans.skip(sid, reason="flaky")
        assert skipped.code == "skip-needs-owner"
        replan = await plans.init(sid, title="Other", workspace=rig.workspace)
        assert replan.code == "plan-live"
        live = await plans.current(sid)
        assert live is not None and [t.status for t in live.tasks] == ["in_progress"]
