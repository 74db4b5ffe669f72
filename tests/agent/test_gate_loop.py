"""The plan gate through the loop, and an approval that arrives while a batch runs.

Real PlanService on real files, the real plan tool, the scripted model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.agent.adapters import PlanServiceAdapter
from engine.agent.controller import AgentRegistry
from engine.agent.settings import AgentSettings
from engine.events import SeedSource, ToolResult, TurnEnd, UserMessage
from engine.model.script import ScriptedCall, ScriptStep, call, say
from engine.plan.gate import GATE_TEXTS
from engine.plan.service import PlanService
from engine.plan.tool import PlanTool
from engine.testing import InMemoryEventLog
from engine.tools.base import ToolContext, ToolOutcome
from engine.tools.effects import declare
from storage.plan_files import FilePlanStore, SessionLocation
from tests.agent.harness import SID, make_agent

PLAN_MD = """\
# Ship the widget
## Context
- **Problem:** there is no widget
- **Target state:** widget.py exists
- **Intent:** the team asked for it
## Implementation steps
1. Write the widget — create widget.py
"""


def plan_service(tmp_path: Path, workspace: Path, log: InMemoryEventLog) -> PlanService:
    async def locate(session_id: str) -> SessionLocation:
        return SessionLocation(workspace=str(workspace))

    return PlanService(FilePlanStore(tmp_path / "home", locate), log)


def results(events: list[Any]) -> list[ToolResult]:
    return [e for e in events if isinstance(e, ToolResult)]


async def test_gates_in_editing_then_project_write_after_approval(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    log = InMemoryEventLog()
    plans = plan_service(tmp_path, ws, log)
    assert (await plans.enter_pre_init(SID)).ok
    script = [
        call("plan", {"op": "init", "title": "Ship the widget", "mode": "design"}),
        call("write_file", {"path": "{plan_md}", "content": PLAN_MD}),
        call("bash", {"command": "touch sneaky"}),
        call("write_file", {"path": "../x", "content": "escape"}),
        call("write_file", {"path": "widget.py", "content": "early"}),
        call("plan", {"op": "submit"}),
        say("The plan is ready for review."),
        # The execution turn queued by the approval:
        call("write_file", {"path": "widget.py", "content": "WIDGET = 1\n"}, expect="approved"),
        say("Done."),
    ]
    agent = make_agent(
        ws, script, plan=PlanServiceAdapter(plans), extra_tools=[PlanTool(plans)], log=log
    )
    agent.registry.submit(SID, "plan a widget", message_id="7")
    await agent.registry.wait_idle(SID)

    got = results(await agent.events())
    by_name = [(r.name, r.is_error) for r in got]
    assert by_name == [
        ("plan", False),
        ("write_file", False),
        ("bash", True),
        ("write_file", True),
        ("write_file", True),
        ("plan", False),
    ]
    assert got[2].content == GATE_TEXTS["gate-editing-bash"]
    assert got[3].content == GATE_TEXTS["gate-editing-write"]
    assert got[4].content == GATE_TEXTS["gate-editing-write"]
    assert not (ws / "sneaky").exists()
    assert not (tmp_path / "x").exists()
    assert not (ws / "widget.py").exists()
    assert await plans.state(SID) == "post_init"
    assert (await plans.md_text(SID)) == PLAN_MD
    # Editing: the plan policy section (template B) is in the system prompt.
    assert "Template B" in agent.scripted.requests[1][0]["content"]

    revision = await plans.revision(SID)
    controller = agent.registry.controller(SID)
    assert await controller.request_approval(revision=revision, actor="tg:1") == "committed"
    await agent.registry.wait_idle(SID)
    assert await plans.state(SID) == "active"
    assert (ws / "widget.py").read_text() == "WIDGET = 1\n"
    events = await agent.events()
    seeds = [e for e in events if isinstance(e, UserMessage) and isinstance(e.source, SeedSource)]
    # The approval runs the checklist on by itself; with no task progress (the script only
    # writes a file) the run stops when the finished script only talks: a monologue.
    run = controller.checklist
    assert seeds and not run.armed and run.paused is not None
    assert run.paused.pattern == "monologue"
    assert len(seeds) <= AgentSettings().stuck.monologue
    assert not results(events)[0].is_error
    # Active: no plan policy section any more, the checklist is in the state section.
    system = agent.scripted.last_messages[0]["content"]
    assert "Template B" not in system
    assert "Write the widget" in system


class ApproveProbe:
    """A tool whose run is the owner's Approve press arriving mid-batch."""

    name = "probe"
    description = "test probe"
    # It only reads the plan (the press is the owner's): allowed while the plan is designed.
    declaration = declare("read")

    def __init__(self, plans: PlanService) -> None:
        self.plans = plans
        self.registry: AgentRegistry | None = None
        self.answers: list[str] = []

    @property
    def parameters(self) -> dict[str, Any]:
        return {"type": "object", "properties": {}}

    def is_concurrency_safe(self, args: dict[str, Any]) -> object:
        return False

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        assert self.registry is not None
        revision = await self.plans.revision(ctx.session_id)
        controller = self.registry.controller(ctx.session_id)
        self.answers.append(await controller.request_approval(revision=revision, actor="tg:1"))
        return ToolOutcome("approved by the owner")


async def test_approve_while_busy_commits_at_the_next_step(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    log = InMemoryEventLog()
    plans = plan_service(tmp_path, ws, log)
    assert (await plans.enter_pre_init(SID)).ok
    init = await plans.init(SID, title="Ship the widget", mode="design", tasks=[], workspace=ws)
    assert init.ok, init
    md = await plans.md_path(SID)
    md.write_text(PLAN_MD)
    await plans.md_written(SID)
    assert await plans.state(SID) == "post_init"
    probe = ApproveProbe(plans)
    batch = ScriptStep(
        tool_calls=(
            ScriptedCall("probe"),
            ScriptedCall("write_file", {"path": "widget.py", "content": "in batch"}),
        )
    )
    script = [
        batch,
        call("write_file", {"path": "widget.py", "content": "next step"}),
        say("Built."),
    ]
    agent = make_agent(
        ws,
        script,
        plan=PlanServiceAdapter(plans),
        extra_tools=[PlanTool(plans), probe],
        log=log,
    )
    probe.registry = agent.registry
    agent.registry.submit(SID, "go on")
    await agent.registry.wait_idle(SID)

    assert probe.answers == ["pending"]
    got = results(await agent.events())
    # The batch in flight stayed under Editing rules...
    assert (got[1].name, got[1].content) == ("write_file", GATE_TEXTS["gate-editing-write"])
    # ...and the next step ran Active.
    assert (got[2].name, got[2].is_error) == ("write_file", False)
    assert (ws / "widget.py").read_text() == "next step"
    assert await plans.state(SID) == "active"
    ends = [e for e in await agent.events() if isinstance(e, TurnEnd)]
    # The approval committed mid-turn: that turn ended, then the checklist ran on by itself
    # (continuation turns, seed-sourced) until it was stuck (the finished script's talk).
    assert ends[0].outcome == "completed" and len(ends) > 1
    seeds = [
        e
        for e in await agent.events()
        if isinstance(e, UserMessage) and isinstance(e.source, SeedSource)
    ]
    assert len(seeds) == len(ends) - 1
    assert agent.registry.controller(SID).pending_approval is None
    assert agent.registry.controller(SID).checklist.paused is not None


async def test_stale_pending_approval_returns_the_card_to_review(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    log = InMemoryEventLog()
    plans = plan_service(tmp_path, ws, log)
    assert (await plans.enter_pre_init(SID)).ok
    assert (await plans.init(SID, title="W", mode="design", tasks=[], workspace=ws)).ok
    md = await plans.md_path(SID)
    md.write_text(PLAN_MD)
    await plans.md_written(SID)
    probe = ApproveProbe(plans)
    # The probe approves the current revision, then the same batch edits the .md: stale.
    batch = ScriptStep(
        tool_calls=(
            ScriptedCall("probe"),
            ScriptedCall(
                "edit_file",
                {"path": str(md), "old_text": "create widget.py", "new_text": "make widget.py"},
            ),
        )
    )
    agent = make_agent(
        ws,
        [batch, say("ok")],
        plan=PlanServiceAdapter(plans),
        extra_tools=[probe],
        log=log,
    )
    probe.registry = agent.registry
    agent.registry.submit(SID, "tweak")
    await agent.registry.wait_idle(SID)
    assert probe.answers == ["pending"]
    assert not results(await agent.events())[1].is_error
    assert await plans.state(SID) == "post_init"
    notices = [c.args["text"] for c in agent.channel.of("notice")]
    assert any("approval lapsed" in n for n in notices)
