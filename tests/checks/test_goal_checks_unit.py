"""Goal checks as pure parts: the /goal parser, the fold's rules, the round prompt."""

from __future__ import annotations

from engine.checks.types import CheckResult, CheckRun
from engine.events import GoalCheck
from engine.goal.commands import parse_goal_command
from engine.goal.driver import round_prompt
from engine.goal.fold import (
    CheckedComplete,
    CreateGoal,
    EditGoal,
    GoalRefusal,
    GoalStep,
    apply_goal_event,
    decide,
    empty_goal_state,
    fold_goal,
)

KW = {"session_id": "s", "now": 1.0, "default_max_rounds": 5}


def _created(checks: tuple[str, ...] = ("pytest -q",)) -> GoalStep:
    step = decide(empty_goal_state(), CreateGoal(objective="green", checks=checks), **KW)
    assert isinstance(step, GoalStep)
    return step


def _run(*codes: int, commands: tuple[str, ...] = ("pytest -q",)) -> CheckRun:
    results = [
        CheckResult(command=c, exit_code=code, duration_s=0.1, output_tail=f"exit {code}")
        for c, code in zip(commands, codes, strict=False)
    ]
    return CheckRun(results=results, not_run=list(commands[len(codes) :]))


def test_the_parser_takes_repeatable_checks_and_the_check_subcommands() -> None:
    spec = parse_goal_command('ship it --check "python3 -m unittest -q" --check=make --tokens 5k')
    assert spec.action == "set" and spec.objective == "ship it"
    assert spec.checks == ("python3 -m unittest -q", "make") and spec.token_budget == 5000
    assert parse_goal_command("check add 'pytest -q'").checks == ("pytest -q",)
    assert parse_goal_command("check list").action == "check_list"
    assert parse_goal_command("check clear").action == "check_clear"
    # An objective that starts with the word, and the mistakes.
    assert parse_goal_command("check the logs").objective == "check the logs"
    assert parse_goal_command("--check x").error == "--check needs an objective before it"
    assert parse_goal_command("pause --check x").error == "--check goes with an objective"
    assert parse_goal_command('fix --check ""').error == "--check needs a command"
    assert parse_goal_command("fix the --checkout flag").checks is None


def test_checks_are_part_of_the_snapshot_and_an_edit_is_a_revision() -> None:
    step = _created()
    goal = step.goal
    assert goal is not None and goal.checks == ("pytest -q",) and goal.revision == 1
    edited = decide(step.state, EditGoal(ref=goal.ref, checks=("make test",)), **KW)
    assert isinstance(edited, GoalStep) and edited.goal is not None
    assert edited.goal.checks == ("make test",) and edited.goal.revision == 2
    # A stale ref changes nothing (compare-and-set holds for checks too).
    stale = decide(edited.state, EditGoal(ref=goal.ref, checks=()), **KW)
    assert isinstance(stale, GoalRefusal) and stale.code == "stale-revision"
    bad = decide(edited.state, EditGoal(ref=edited.goal.ref, checks=("a\nb",)), **KW)
    assert isinstance(bad, GoalRefusal) and bad.code == "invalid-checks"
    too_many = CreateGoal(objective="x", checks=tuple(f"c{n}" for n in range(21)))
    refused = decide(empty_goal_state(), too_many, **KW)
    assert isinstance(refused, GoalRefusal) and refused.code == "invalid-checks"


def test_a_failed_run_is_recorded_without_a_revision_and_a_passing_one_completes() -> None:
    step = _created()
    goal = step.goal
    assert goal is not None
    failed = decide(step.state, CheckedComplete(ref=goal.ref, run=_run(1)), **KW)
    assert isinstance(failed, GoalStep) and failed.goal == goal  # same revision, still active
    assert [type(e) for e in failed.events] == [GoalCheck]
    assert failed.state.last_check is not None and not failed.state.last_check.passed
    passed = decide(failed.state, CheckedComplete(ref=goal.ref, run=_run(0)), **KW)
    assert isinstance(passed, GoalStep) and passed.goal is not None
    assert passed.goal.phase == "complete" and passed.goal.revision == 2
    # Replay of the whole log gives the same state.
    events = [*step.events, *failed.events, *passed.events]
    assert fold_goal(events) == passed.state


def test_a_run_of_other_commands_never_completes() -> None:
    step = _created(("pytest -q", "ruff check ."))
    goal = step.goal
    assert goal is not None
    partial = _run(0, commands=("pytest -q",))  # the second check missing from the run
    out = decide(step.state, CheckedComplete(ref=goal.ref, run=partial), **KW)
    assert isinstance(out, GoalStep) and out.goal is not None and out.goal.phase == "active"
    assert out.state.last_check is not None and not out.state.last_check.passed


def test_a_late_run_of_a_replaced_goal_is_ignored_and_the_prompt_carries_a_failure() -> None:
    step = _created()
    goal = step.goal
    assert goal is not None
    late = GoalCheck(goal_id="other", revision=1, run=_run(1), passed=False)
    assert apply_goal_event(step.state, late) == step.state
    failed = decide(step.state, CheckedComplete(ref=goal.ref, run=_run(1)), **KW)
    assert isinstance(failed, GoalStep)
    text = round_prompt(goal, 2, failed.state.last_check)
    assert "`pytest -q`" in text and "its checks failed" in text and "exit 1" in text
    assert "failed" not in round_prompt(goal, 1, None)
