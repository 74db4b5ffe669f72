"""The effect x plan-state table: the gate reads declarations, and the docs carry the tables."""

from __future__ import annotations

from pathlib import Path

from engine.plan.gate import GATE_TEXTS, PlanGateView, check_gate
from engine.plan.refusals import TEXTS
from engine.tools.effects import BUILTIN, GATE_TABLE, declare, effects_table, gate_table

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
