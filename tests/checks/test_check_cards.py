"""The cards show checks: the review lists what must pass, the Done card the proof."""

from __future__ import annotations

from bot.telegram.cards import build_plan_card
from engine.checks.types import CheckResult
from engine.plan.types import PlanSidecar, PlanTask
from tests.checks.support import CHECK, CHECKED_PLAN


def _plan(**kw: object) -> PlanSidecar:
    return PlanSidecar(id="p" * 32, session_id="s", title="Health check", revision=3, **kw)


def test_the_review_card_shows_each_check_with_its_step() -> None:
    plan = CHECKED_PLAN + "\n## Checks\n- `python3 check.py`\n"
    view = build_plan_card(_plan(status="Editing"), "review", markdown=plan)
    assert f"🧪 <code>{CHECK}</code> · step 1" in view.text
    assert "🧪 <code>python3 check.py</code> · whole plan" in view.text
    # Too long for one message: the steps list carries the checks under their step.
    listed = build_plan_card(_plan(status="Editing"), "review", markdown=plan, attached=True)
    assert f"   🧪 <code>{CHECK}</code>" in listed.text
    assert "🧪 <code>python3 check.py</code> · whole plan" in listed.text


def test_a_plan_without_checks_shows_no_check_block() -> None:
    plain = CHECKED_PLAN.replace(f"`{CHECK}` passes", "the test passes")
    view = build_plan_card(_plan(status="Editing"), "review", markdown=plain)
    assert "🧪" not in view.text


def test_the_done_card_lists_every_check_result_and_the_changed_tests() -> None:
    passed = CheckResult(command=CHECK, exit_code=0, duration_s=1.25, output_tail="OK")
    whole = CheckResult(command="python3 check.py", exit_code=0, duration_s=0.5)
    tasks = [
        PlanTask(id="1", order=1, title="Fix", status="completed", checks=[CHECK],
                 check_results=[passed]),
        PlanTask(id="2", order=2, title="Lint", status="deferred", checks=["ruff check ."]),
        PlanTask(id="3", order=3, title="Docs", status="completed"),
    ]  # fmt: skip
    sidecar = _plan(
        status="Active",
        tasks=tasks,
        checks=["python3 check.py"],
        check_results=[whole],
        changed_tests=["test_app.py"],
    )
    text = build_plan_card(sidecar, "done").text
    assert f"✅ <code>{CHECK}</code> exit 0 in 1.2s · task 1" in text
    assert "⏭ <code>ruff check .</code> skipped · task 2" in text
    assert "✅ <code>python3 check.py</code> exit 0 in 0.5s · whole plan" in text
    assert "✏️ changed tests: test_app.py" in text
    assert "1. Fix 🧪" in text
    # Not done: no proof block yet.
    assert "changed tests" not in build_plan_card(sidecar, "active").text


def test_the_goal_card_shows_the_checks_and_the_last_run() -> None:
    from bot.telegram.cards import build_goal_card
    from engine.checks.types import CheckRun
    from engine.events import GoalCheck
    from engine.goal.types import GoalSnapshot

    goal = GoalSnapshot(
        id="g" * 32, revision=1, objective="green", phase="active", max_goal_rounds=5,
        checks=(CHECK,),
    )  # fmt: skip
    never = build_goal_card(goal, armed=True).text
    assert f"🧪 Checks: <code>{CHECK}</code>" in never and "Not run yet" in never
    failed = CheckResult(command=CHECK, exit_code=1, duration_s=2.5, at="2026-12-02T00:05:07+00:00")
    run = CheckRun(results=[failed])
    last = GoalCheck(goal_id=goal.id, revision=1, run=run, passed=False)
    text = build_goal_card(goal, armed=True, last_check=last).text
    assert f"❌ Checks failed 00:05 UTC · 2.5s: <code>{CHECK}</code> exit 1 in 2.5s" in text
    ok = last.model_copy(update={"passed": True})
    assert (
        "✅ Checks passed 00:05 UTC · 2.5s" in build_goal_card(goal, armed=True, last_check=ok).text
    )


def test_plan_checks_not_run_show_as_skipped_on_the_done_card() -> None:
    tasks = [PlanTask(id="1", order=1, title="Fix", status="deferred", reason="retired")]
    sidecar = _plan(status="Active", tasks=tasks, checks=["python3 check.py"])
    text = build_plan_card(sidecar, "done").text
    assert "⏭ <code>python3 check.py</code> skipped · whole plan" in text
