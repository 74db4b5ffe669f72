"""Context building: turns, synthetic results, cuts, the summary, the state section."""

from __future__ import annotations

from engine.agent.context import ELIDED_TEXT, build_messages
from engine.agent.ports import PlanPromptView
from engine.agent.prompt import PromptInputs, build_system_prompt
from engine.agent.settings import AgentSettings
from engine.events import (
    AssistantMessage,
    GoalChange,
    SessionEvent,
    TodoItem,
    ToolCall,
    ToolResult,
    TurnEnd,
    TurnStart,
    UserMessage,
)
from engine.goal.types import GoalSnapshot
from engine.plan.types import PlanTask
from engine.projections import fold_session


def turn(n: int, answer: str, *, tool_text: str | None = None) -> list[SessionEvent]:
    events: list[SessionEvent] = [TurnStart(turn_id=f"t{n}"), UserMessage(text=f"ask {n}")]
    if tool_text is not None:
        events += [
            AssistantMessage(text=""),
            ToolCall(call_id=f"c{n}", name="read_file", arguments={"path": "a"}),
            ToolResult(call_id=f"c{n}", name="read_file", content=tool_text),
        ]
    events += [AssistantMessage(text=answer), TurnEnd(turn_id=f"t{n}", outcome="completed")]
    return events


def test_calls_get_results_and_orphans_are_dropped() -> None:
    events: list[SessionEvent] = [
        TurnStart(turn_id="t1"),
        UserMessage(text="go"),
        AssistantMessage(text="working"),
        ToolCall(call_id="a", name="bash", arguments={"command": "x"}),
        ToolCall(call_id="b", name="bash", arguments={"command": "y"}),
        ToolResult(call_id="a", name="bash", content="ok"),
        ToolResult(call_id="zzz", name="bash", content="orphan"),
        TurnEnd(turn_id="t1", outcome="interrupted"),
        TurnStart(turn_id="t2"),
        UserMessage(text="again"),
    ]
    messages = build_messages(events, system_prompt="SYS", settings=AgentSettings())
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "tool", "user"]
    assert [c["id"] for c in messages[2]["tool_calls"]] == ["a", "b"]
    assert messages[4]["tool_call_id"] == "b" and "interrupted" in messages[4]["content"]
    assert "orphan" not in str(messages)
    assert messages[5]["content"].startswith("[note: the previous turn ended early (interrupted)]")


def test_long_tool_result_is_cut_with_a_note() -> None:
    events = turn(1, "done", tool_text="x" * 1000)
    messages = build_messages(
        events, system_prompt="SYS", settings=AgentSettings(tool_result_cap_chars=100)
    )
    tool = next(m for m in messages if m["role"] == "tool")
    assert tool["content"].startswith("x" * 100)
    assert "[tool result cut: 900 more characters not shown]" in tool["content"]


def test_old_turns_become_a_deterministic_summary() -> None:
    events: list[SessionEvent] = []
    for n in range(1, 11):
        events += turn(n, f"answer {n}", tool_text="y" * 300)
    settings = AgentSettings(context_budget_chars=1000, summary_budget_chars=10_000)
    first = build_messages(events, system_prompt="SYS", settings=settings)
    again = build_messages(events, system_prompt="SYS", settings=settings)
    assert first == again
    system = first[0]["content"]
    assert "Summary of earlier turns" in system
    assert "- user: ask 1 | tools: read_file x1 | agent: answer 1" in system
    users = [m["content"] for m in first if m["role"] == "user"]
    assert users[-1] == "ask 10"
    assert "ask 1" not in users
    assert sum(len(str(m.get("content") or "")) for m in first[1:]) <= 1000


def test_summary_drops_its_oldest_lines_when_over_its_own_budget() -> None:
    events: list[SessionEvent] = []
    for n in range(1, 30):
        events += turn(n, f"answer {n}")
    settings = AgentSettings(context_budget_chars=50, summary_budget_chars=200)
    system = build_messages(events, system_prompt="SYS", settings=settings)[0]["content"]
    assert "earlier turns not shown" in system
    assert "ask 26" in system and "- user: ask 1 |" not in system


def test_an_oversized_current_turn_elides_its_oldest_results() -> None:
    events: list[SessionEvent] = [TurnStart(turn_id="t"), UserMessage(text="big")]
    for n in range(5):
        events += [
            AssistantMessage(text=""),
            ToolCall(call_id=f"c{n}", name="read_file", arguments={}),
            ToolResult(call_id=f"c{n}", name="read_file", content=str(n) * 500),
        ]
    messages = build_messages(
        events, system_prompt="SYS", settings=AgentSettings(context_budget_chars=1200)
    )
    tools = [m["content"] for m in messages if m["role"] == "tool"]
    assert tools[0] == ELIDED_TEXT
    assert tools[-1] == "4" * 500


def test_state_comes_from_projections_not_from_history() -> None:
    goal = GoalSnapshot(
        id="g1",
        revision=3,
        objective='ship "it"',
        phase="active",
        max_goal_rounds=5,
        rounds_started=2,
    )
    events: list[SessionEvent] = [GoalChange(snapshot=goal)]
    projections = fold_session(events)
    prompt = build_system_prompt(
        PromptInputs(
            workspace="/w",
            plan=PlanPromptView(
                phase="active",
                title="Widget",
                revision=4,
                tasks=(
                    PlanTask(id="1", title="Write it", status="completed"),
                    PlanTask(id="2", order=1, title="Test it"),
                ),
            ),
            goal=projections.goal,
            todos=(TodoItem(content="look around", status="in_progress"),),
        )
    )
    assert 'Goal (user): "ship \\"it\\"", active, rounds 2/5.' in prompt
    assert "[x] 1. Write it" in prompt and "[ ] 2. Test it" in prompt
    assert "[~] look around" in prompt
    assert "Plan mode (Editing)" not in prompt


def test_plan_policy_only_while_editing() -> None:
    def prompt(phase: str) -> str:
        view = PlanPromptView(phase=phase, md_path="/h/.plangate_plan_s.md")  # type: ignore[arg-type]
        return build_system_prompt(PromptInputs(workspace="/w", plan=view))

    assert "Template B" in prompt("pre_init") and "plan with op=init" in prompt("pre_init")
    assert "Template B" in prompt("post_init") and "/h/.plangate_plan_s.md" in prompt("post_init")
    assert "Template B" not in prompt("none")
    assert "Template B" not in prompt("active")
    # Sections are ordered: identity, workspace, plan policy, state.
    text = prompt("post_init")
    assert text.index("Workspace:") < text.index("Plan mode") < text.index("Current state")
