"""The new-tool test: a writing tool under a fresh name, declared and nothing else.

``apply_patch`` exists only in this file. It declares that it writes the workspace through its
``path`` argument and how the file reads after a call, and checks nothing itself (it writes
``workspace / path`` blindly). Everything else comes from the declaration: the plan gate
refuses it while a plan is being written, approvals ask with a diff where writes are asked,
the boundary refuses a path outside the workspace, and the progress rule counts what it
changed (a goal round's outer bound does not stop it). Real PlanService on real files, the
real plan tool, the scripted model.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engine.agent.adapters import PlanServiceAdapter
from engine.agent.build import build_agent
from engine.agent.settings import AgentSettings
from engine.agent.testing import RecordingChannel
from engine.approval.policy import ApprovalView
from engine.approval.service import ToolApprovals
from engine.events import GoalRoundSource, ProgressMade, ToolResult
from engine.model.script import ScriptStep, call, say
from engine.model.scripted import ScriptedProvider
from engine.plan.gate import GATE_TEXTS
from engine.plan.service import PlanService
from engine.plan.tool import PlanTool
from engine.progress.stuck import StuckLimits
from engine.testing import InMemoryEventLog
from engine.tools.base import ToolContext, ToolOutcome
from engine.tools.effects import declare
from storage.plan_files import FilePlanStore, SessionLocation

SID = "s1"


def _patched(before: str, args: Mapping[str, Any]) -> str | None:
    old, new = args.get("find"), args.get("replace")
    if not isinstance(old, str) or not isinstance(new, str) or old not in before:
        return None
    return before.replace(old, new, 1)


class ApplyPatchTool:
    """A writing tool nobody else knows the name of; it trusts its caller entirely."""

    name = "apply_patch"
    description = "Replace the first occurrence of find with replace in a file."
    declaration = declare("write", paths={"path": "write"}, after=_patched)
    parameters: dict[str, Any] = {  # noqa: RUF012 - read-only schema
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "find": {"type": "string"},
            "replace": {"type": "string"},
        },
        "required": ["path", "find", "replace"],
    }

    def is_concurrency_safe(self, args: dict[str, Any]) -> object:
        return False

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        target = ctx.workspace / args["path"]
        before = target.read_text(encoding="utf-8") if target.exists() else ""
        target.write_text(_patched(before, args) or args["replace"], encoding="utf-8")
        return ToolOutcome(f"patched {args['path']}")


class Rig:
    def __init__(
        self,
        tmp_path: Path,
        script: list[ScriptStep],
        *,
        ask_writes: bool = False,
        goals: Any = None,
        settings: AgentSettings | None = None,
    ) -> None:
        self.ws = tmp_path / "ws"
        self.ws.mkdir()
        self.log = InMemoryEventLog()
        self.channel = RecordingChannel()

        async def locate(session_id: str) -> SessionLocation:
            return SessionLocation(workspace=str(self.ws))

        self.plans = PlanService(FilePlanStore(tmp_path / "home", locate), self.log)
        self.approvals = ToolApprovals(self.log, self.channel, ask_writes=ask_writes)

        async def workspace_for(session_id: str) -> Path:
            return self.ws

        self.registry = build_agent(
            log=self.log,
            model=ScriptedProvider(script),
            channel=self.channel,
            workspace_for=workspace_for,
            plan=PlanServiceAdapter(self.plans),
            extra_tools=[PlanTool(self.plans), ApplyPatchTool()],
            goals=goals,
            settings=settings or AgentSettings(),
            approvals=self.approvals,
        )

    async def results(self) -> list[ToolResult]:
        return [e.event for e in await self.log.read(SID) if isinstance(e.event, ToolResult)]


async def test_a_new_writing_tool_is_gated_while_a_plan_is_written(tmp_path: Path) -> None:
    script: list[ScriptStep] = [
        call("apply_patch", {"path": "a.py", "find": "", "replace": "early = 1\n"}),
        call("plan", {"op": "init", "title": "Ship it", "mode": "design"}),
        call("apply_patch", {"path": "a.py", "find": "", "replace": "early = 2\n"}),
        say("Planning."),
    ]
    rig = Rig(tmp_path, script)
    assert (await rig.plans.enter_pre_init(SID)).ok
    rig.registry.submit(SID, "plan it")
    await rig.registry.wait_idle(SID)
    got = [(r.name, r.is_error, r.content) for r in await rig.results()]
    assert got[0] == ("apply_patch", True, GATE_TEXTS["gate-pre-init-write"])
    assert got[1][:2] == ("plan", False)
    assert got[2] == ("apply_patch", True, GATE_TEXTS["gate-editing-write"])
    assert not (rig.ws / "a.py").exists()


async def test_a_new_writing_tool_is_path_checked_by_the_boundary(tmp_path: Path) -> None:
    script: list[ScriptStep] = [
        call("apply_patch", {"path": "../outside.txt", "find": "", "replace": "escaped"}),
        call("apply_patch", {"path": "inside.txt", "find": "", "replace": "fine"}),
        say("Done."),
    ]
    rig = Rig(tmp_path, script)
    rig.registry.submit(SID, "patch things")
    await rig.registry.wait_idle(SID)
    first, second = await rig.results()
    assert first.is_error and "outside" in first.content.lower()
    assert not (tmp_path / "outside.txt").exists()
    assert not second.is_error and (rig.ws / "inside.txt").read_text() == "fine"


async def test_a_new_writing_tool_is_asked_with_a_preview_where_writes_are_asked(
    tmp_path: Path,
) -> None:
    script: list[ScriptStep] = [
        call("apply_patch", {"path": "app.py", "find": "old", "replace": "new"}),
        say("Patched."),
    ]
    rig = Rig(tmp_path, script, ask_writes=True)
    (rig.ws / "app.py").write_text("print('old')\n", encoding="utf-8")
    rig.registry.submit(SID, "patch app.py")
    [asked] = await asyncio.wait_for(rig.channel.wait_for("approval_asked"), 10)
    view = asked.args["view"]
    assert isinstance(view, ApprovalView)
    assert view.tool == "apply_patch" and view.command == "apply_patch app.py"
    assert view.diff is not None
    assert "-print('old')" in view.diff and "+print('new')" in view.diff
    assert view.rule_text == "writes to app.py"
    assert (rig.ws / "app.py").read_text() == "print('old')\n"  # nothing ran yet
    answer = await rig.approvals.answer(SID, "once", view.short_id, actor=None)
    assert not answer.stale
    await rig.registry.wait_idle(SID)
    assert (rig.ws / "app.py").read_text() == "print('new')\n"


async def test_send_file_is_refused_while_a_plan_is_written(tmp_path: Path) -> None:
    script: list[ScriptStep] = [
        call("send_file", {"path": "notes.txt"}),
        call("plan", {"op": "init", "title": "Ship it", "mode": "design"}),
        call("send_file", {"path": "notes.txt"}),
        say("Planning."),
    ]
    rig = Rig(tmp_path, script)
    (rig.ws / "notes.txt").write_text("private notes\n", encoding="utf-8")
    assert (await rig.plans.enter_pre_init(SID)).ok
    rig.registry.submit(SID, "plan it")
    await rig.registry.wait_idle(SID)
    got = [(r.name, r.is_error, r.content) for r in await rig.results()]
    assert got[0] == ("send_file", True, GATE_TEXTS["gate-editing-send"])
    assert got[2] == ("send_file", True, GATE_TEXTS["gate-editing-send"])
    assert rig.channel.of("send_file") == []


class UndeclaredTool:
    """A tool that says nothing about what it does."""

    name = "mystery"
    description = "Does something."
    parameters: dict[str, Any] = {"type": "object", "properties": {}}  # noqa: RUF012

    def is_concurrency_safe(self, args: dict[str, Any]) -> object:
        return False

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        (ctx.workspace / "mystery.txt").write_text("ran", encoding="utf-8")
        return ToolOutcome("done")


async def test_an_undeclared_tool_is_refused_while_a_plan_is_written(tmp_path: Path) -> None:
    script: list[ScriptStep] = [call("mystery", {}), say("Tried.")]
    rig = Rig(tmp_path, script)
    rig.registry = build_agent(
        log=rig.log,
        model=ScriptedProvider(script),
        channel=rig.channel,
        workspace_for=rig.registry.deps.workspace_for,
        plan=PlanServiceAdapter(rig.plans),
        extra_tools=[PlanTool(rig.plans), UndeclaredTool()],
    )
    assert (await rig.plans.enter_pre_init(SID)).ok
    rig.registry.submit(SID, "plan it")
    await rig.registry.wait_idle(SID)
    [result] = await rig.results()
    assert result.is_error and result.content == GATE_TEXTS["gate-undeclared"]
    assert not (rig.ws / "mystery.txt").exists()


class RoundGoals:
    """A GoalPort whose round stays valid; records a block."""

    def __init__(self) -> None:
        self.blocked: list[str] = []

    async def validate_round(self, session_id: str, source: GoalRoundSource) -> bool:
        return True

    async def disarm(self, session_id: str) -> None:
        return None

    async def block_round(
        self, session_id: str, source: GoalRoundSource, *, code: str, message: str
    ) -> None:
        self.blocked.append(message)


async def test_a_new_writing_tool_counts_as_progress(tmp_path: Path) -> None:
    # An outer bound of 3 steps without progress: five patches in a row that each change the
    # file are work, so the goal round is not stopped, and each step is logged as progress.
    script: list[ScriptStep] = [
        call("apply_patch", {"path": "log.txt", "find": f"v{k}", "replace": f"v{k + 1}"})
        for k in range(5)
    ]
    script.append(say("Patched five times."))
    goals = RoundGoals()
    settings = AgentSettings(stuck=StuckLimits(progress_steps=3))
    rig = Rig(tmp_path, script, goals=goals, settings=settings)
    (rig.ws / "log.txt").write_text("v0\n", encoding="utf-8")
    round_source = GoalRoundSource(goal_id="g", revision=1, round=1)
    await rig.registry.submit_round(SID, "round 1 of 5", round_source)
    await rig.registry.wait_idle(SID)
    assert goals.blocked == []
    assert (rig.ws / "log.txt").read_text() == "v5\n"
    made = [e.event for e in await rig.log.read(SID) if isinstance(e.event, ProgressMade)]
    assert [m.kinds for m in made] == [["workspace"]] * 5
