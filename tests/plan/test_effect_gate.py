"""The effect x plan-state table: the gate reads declarations, and the docs carry the tables."""

from __future__ import annotations

from pathlib import Path

from engine.agent.build import build_agent
from engine.agent.testing import RecordingChannel
from engine.goal.service import GoalService
from engine.goal.tools import goal_tools
from engine.model.scripted import ScriptedProvider
from engine.plan.gate import GATE_TEXTS, PlanGateView, check_gate
from engine.plan.refusals import TEXTS
from engine.plan.service import PlanService
from engine.plan.tool import PlanTool
from engine.testing import InMemoryEventLog
from engine.todo.tool import TodoWriteTool
from engine.tools.effects import BUILTIN, GATE_TABLE, declare, effects_table, gate_table
from storage.plan_files import FilePlanStore, SessionLocation

DOCS = Path(__file__).resolve().parents[2] / "docs"


def view(state: str) -> PlanGateView:
    return PlanGateView(state=state)  # type: ignore[arg-type]


def test_send_file_is_gated_like_a_channel_send(tmp_path: Path) -> None:
    args = {"path": "report.txt"}
    for state in ("pre_init", "post_init"):
        got = check_gate("send_file", args, view(state), workspace=tmp_path)
        assert got == GATE_TEXTS["gate-editing-send"], state
    for state in ("none", "active"):
        assert check_gate("send_file", args, view(state), workspace=tmp_path) is None


def test_undeclared_tools_and_ops_are_refused_while_planning_and_in_goal_rounds(
    tmp_path: Path,
) -> None:
    refused = GATE_TEXTS["gate-undeclared"]
    for state in ("pre_init", "post_init"):
        assert check_gate(None, {}, view(state), workspace=tmp_path) == refused
        odd = {"op": "frobnicate"}
        assert check_gate("plan", odd, view(state), workspace=tmp_path) == refused
    assert check_gate(None, {}, view("none"), workspace=tmp_path, goal_round=True) == refused
    assert check_gate(None, {}, view("none"), workspace=tmp_path) is None
    assert check_gate(None, {}, view("active"), workspace=tmp_path) is None


def test_goal_rounds_cannot_ask_and_keep_the_plan_states_rules(tmp_path: Path) -> None:
    asks = declare("ask")
    got = check_gate(asks, {"question": "?"}, view("none"), workspace=tmp_path, goal_round=True)
    assert got == GATE_TEXTS["gate-round-ask"]
    md = tmp_path / "plan.md"
    active = PlanGateView(state="active", md_path=md)
    frozen = check_gate(
        "write_file", {"path": str(md)}, active, workspace=tmp_path, goal_round=True
    )
    assert frozen == GATE_TEXTS["gate-active-md-frozen"]


def test_plan_ops_follow_their_declared_effects(tmp_path: Path) -> None:
    show = {"op": "show"}
    for state in ("pre_init", "post_init", "active", "none"):
        assert check_gate("plan", show, view(state), workspace=tmp_path) is None
    start = {"op": "start"}
    assert (
        check_gate("plan", start, view("pre_init"), workspace=tmp_path)
        == TEXTS["pre-init-checklist-blocked"]
    )
    assert (
        check_gate("plan", start, view("post_init"), workspace=tmp_path)
        == TEXTS["editing-checklist-blocked"]
    )
    net = {"command": "curl x", "network": True}
    assert check_gate("bash", net, view("post_init"), workspace=tmp_path) is not None


def test_every_denial_code_of_the_table_has_a_text() -> None:
    for effect, row in GATE_TABLE.items():
        for column, cell in row.items():
            if cell not in ("allow", "md-only", "md-frozen"):
                assert cell in GATE_TEXTS or cell in TEXTS, (effect, column, cell)


def test_the_docs_carry_the_declarations_and_the_gate_table() -> None:
    security = (DOCS / "security.md").read_text(encoding="utf-8")
    assert effects_table(BUILTIN) in security
    assert gate_table() in security
    assert gate_table() in (DOCS / "agent.md").read_text(encoding="utf-8")


def test_every_tool_the_agent_gets_declares_itself_in_terms_of_its_own_arguments(
    tmp_path: Path,
) -> None:
    # The one list of tools as the engine composes it: each declares what it does (no tool of
    # plangate's is undeclared), its path arguments are arguments its schema has, and the
    # plan tool declares every op its schema offers.
    log = InMemoryEventLog()

    async def locate(session_id: str) -> SessionLocation:
        return SessionLocation(workspace=str(tmp_path))

    async def workspace_for(session_id: str) -> Path:
        return tmp_path

    plans = PlanService(FilePlanStore(tmp_path / "home", locate), log)
    extra = [PlanTool(plans), TodoWriteTool(log), *goal_tools(GoalService(log))]
    agent = build_agent(
        log=log,
        model=ScriptedProvider([]),
        channel=RecordingChannel(),
        workspace_for=workspace_for,
        extra_tools=extra,
    )
    registry = agent.runtime.registry
    assert sorted(registry.names()) == sorted(BUILTIN)
    for tool in registry:
        declared = registry.declaration(tool.name)
        assert declared is BUILTIN[tool.name], tool.name
        properties = tool.parameters.get("properties", {})
        assert set(declared.paths) <= set(properties), tool.name
        assert set(declared.flags) <= set(properties), tool.name
        if declared.ops:
            assert set(declared.ops) == set(properties[declared.op_key]["enum"]), tool.name
