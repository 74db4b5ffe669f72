"""The no-progress detector: the pure judgement of a turn, and goals blocked by it for real."""

from __future__ import annotations

from pathlib import Path

from engine.events import (
    AssistantMessage,
    GoalChange,
    GoalRoundSource,
    HumanSource,
    PlanChanged,
    ProgressMade,
    SessionEvent,
    TodoItem,
    TodoWrite,
    ToolCall,
    ToolResult,
    TurnEnd,
    TurnStart,
    UserMessage,
    WorkspaceChanged,
)
from engine.goal.progress import idle_streak, turn_made_progress
from engine.goal.types import GoalSnapshot, GoalTombstone
from engine.model.script import ScriptStep, call, say
from tests.engine.helpers import OWNER
from tests.fakes.openai_server import FakeOpenAIServer
from tests.keys import chat
from tests.usage.test_usage_engine import Clock, rig_over, until_goal, write


def result(name: str, call_id: str = "c1", *, error: bool = False) -> list[SessionEvent]:
    args = {"op": "start"} if name == "plan" else {}
    return [
        ToolCall(call_id=call_id, name=name, arguments=args),
        ToolResult(call_id=call_id, name=name, content="x", is_error=error),
    ]


def test_what_counts_as_progress() -> None:
    # A round made progress when the agent logged it (engine.progress.rule decides each step):
    # the tool results themselves, a todo rewrite, a plan or goal event are not progress.
    assert not turn_made_progress([AssistantMessage(text="thinking")])
    assert not turn_made_progress(result("read_file") + result("bash") + result("grep"))
    assert not turn_made_progress(result("write_file") + result("plan"))
    assert not turn_made_progress([TodoWrite(todos=[TodoItem(content="a", status="pending")])])
    assert not turn_made_progress([PlanChanged(status="Active", revision=2)])
    tomb = GoalChange(tombstone=GoalTombstone(id="g", revision=2))
    assert not turn_made_progress([tomb])
    for kind in ("task", "workspace", "goal"):
        assert turn_made_progress([*result("write_file"), ProgressMade(kinds=[kind])])
    assert turn_made_progress([*result("bash"), WorkspaceChanged()])  # an older log's


def round_of(goal_id: str, n: int, body: list[SessionEvent]) -> list[SessionEvent]:
    source = GoalRoundSource(goal_id=goal_id, revision=1, round=n)
    return [
        TurnStart(turn_id=f"t{n}"),
        UserMessage(text="round", source=source),
        *body,
        TurnEnd(turn_id=f"t{n}", outcome="completed"),
    ]


def test_idle_streak_counts_idle_rounds_in_a_row_and_restarts_on_progress() -> None:
    idle: list[SessionEvent] = [AssistantMessage(text="hm")]
    events = [*round_of("g", 1, idle), *round_of("g", 2, idle)]
    assert idle_streak(events, "g") == 2
    assert idle_streak(events, "other") == 0
    events += round_of("g", 3, [*result("write_file"), ProgressMade(kinds=["workspace"])])
    assert idle_streak(events, "g") == 0
    events += round_of("g", 4, idle)
    assert idle_streak(events, "g") == 1
    # The owner speaks, or changes the goal between rounds: the count starts again.
    human = [UserMessage(text="try X", source=HumanSource())]
    assert idle_streak([*events, *human], "g") == 0
    snapshot = GoalSnapshot(id="g", revision=2, objective="o", phase="active", max_goal_rounds=9)
    assert idle_streak([*events, GoalChange(snapshot=snapshot)], "g") == 0


def talk(n: int) -> ScriptStep:
    return say(f"round {n}: still thinking")


async def test_a_goal_whose_rounds_change_nothing_is_blocked_after_the_limit_not_before(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.play([talk(n) for n in range(1, 6)])
    async with rig_over(
        tmp_path, fake_openai, Clock(), max_goal_rounds=5, goal_idle_rounds=2
    ) as rig:
        sid = await rig.engine.session_for_chat(chat(-100))
        await rig.engine.command(sid, "goal", "think hard", actor=OWNER)
        goal = await until_goal(rig, sid, lambda g: g.phase == "blocked")
        assert goal.blocked is not None and goal.blocked.code == "no-progress"
        assert "2 rounds in a row changed nothing" in goal.blocked.message
        # Round 1 alone did not block it: round 2 ran, and no third.
        assert goal.rounds_started == 2 and len(fake_openai.chat_requests) == 2


async def test_rounds_that_write_files_are_never_idle(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    # Limit 1: a single idle round would block the goal at once.
    script = [step for n in (1, 2, 3) for step in (write(f"f{n}.txt"), say(f"wrote {n}"))]
    fake_openai.play(script)
    async with rig_over(
        tmp_path, fake_openai, Clock(), max_goal_rounds=3, goal_idle_rounds=1
    ) as rig:
        sid = await rig.engine.session_for_chat(chat(-100))
        await rig.engine.command(sid, "goal", "write three files", actor=OWNER)
        goal = await until_goal(rig, sid, lambda g: g.phase == "blocked")
        assert goal.blocked is not None and goal.blocked.code == "round-limit"
        assert goal.rounds_started == 3
        assert sorted(p.name for p in rig.workspace.glob("f*.txt")) == [
            "f1.txt",
            "f2.txt",
            "f3.txt",
        ]


async def test_a_round_with_progress_resets_the_count(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.play([talk(1), write("f.txt"), say("wrote"), talk(3), talk(4), talk(5)])
    async with rig_over(
        tmp_path, fake_openai, Clock(), max_goal_rounds=5, goal_idle_rounds=2
    ) as rig:
        sid = await rig.engine.session_for_chat(chat(-100))
        await rig.engine.command(sid, "goal", "mixed", actor=OWNER)
        goal = await until_goal(rig, sid, lambda g: g.phase == "blocked")
        assert goal.blocked is not None and goal.blocked.code == "no-progress"
        assert goal.rounds_started == 4  # idle, progress, idle, idle


async def test_goal_rounds_that_only_rewrite_their_todo_list_are_idle(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    # Each round reads, rewrites its todo list (differently each time) and shows the plan:
    # busy, but no file, task status or goal changed, so the idle-rounds rule blocks the goal
    # after two rounds instead of running it to its cap.
    def churn(n: int) -> list[ScriptStep]:
        todos = [{"content": f"think about step {n}", "status": "in_progress"}]
        return [
            call("read_file", {"path": f"notes{n}.txt"}),
            call("todo_write", {"todos": todos}),
            call("plan", {"op": "show"}),
            say(f"round {n}: organised my thoughts"),
        ]

    fake_openai.play([step for n in range(1, 6) for step in churn(n)])
    async with rig_over(
        tmp_path, fake_openai, Clock(), max_goal_rounds=5, goal_idle_rounds=2
    ) as rig:
        sid = await rig.engine.session_for_chat(chat(-100))
        await rig.engine.command(sid, "goal", "get organised", actor=OWNER)
        goal = await until_goal(rig, sid, lambda g: g.phase == "blocked")
        assert goal.blocked is not None and goal.blocked.code == "no-progress"
        assert goal.rounds_started == 2
