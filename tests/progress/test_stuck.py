"""The stuck detector's patterns and its outer bound, on plain step lists (no IO)."""

from __future__ import annotations

from engine.progress.rule import changes_goal, may_change_files, step_progress, tasks_moved
from engine.progress.stuck import (
    Step,
    StuckLimits,
    StuckWatch,
    call_record,
    canonical_args,
    describe_call,
    detect,
)
from engine.tools.effects import BUILTIN, Effect, effects_of

LIMITS = StuckLimits()


def read(path: str, result: str = "text", *, error: bool = False) -> Step:
    return Step(calls=(call_record("read_file", {"path": path}, result, is_error=error),))


def talk() -> Step:
    return Step()


def test_canonical_arguments_ignore_key_order_and_the_card_names_the_main_argument() -> None:
    assert canonical_args({"b": 1, "a": [2]}) == canonical_args({"a": [2], "b": 1})
    assert describe_call("read_file", {"path": "README.md", "limit": 5}) == "read_file README.md"
    assert describe_call("todo_write", {"todos": []}) == "todo_write"
    assert describe_call("bash", {"command": "x" * 200}).endswith("…")


def test_the_same_call_and_result_four_times_is_a_repeat_three_is_not() -> None:
    assert detect([read("README.md")] * 3, LIMITS) is None
    verdict = detect([read("README.md")] * 4, LIMITS)
    assert verdict is not None and verdict.pattern == "repeat"
    assert verdict.text == "`read_file README.md` 4 times with the same result"


def test_a_changed_result_or_argument_breaks_the_repeat() -> None:
    steps = [read("README.md"), read("README.md"), read("README.md", "new"), read("README.md")]
    assert detect(steps, LIMITS) is None
    assert detect([read(f"f{k}") for k in range(40)], LIMITS) is None


def test_the_same_error_three_times_stops_a_different_error_does_not() -> None:
    failing = [read("gone", "no such file", error=True)] * 3
    verdict = detect(failing, LIMITS)
    assert verdict is not None and verdict.pattern == "error"
    assert verdict.text == "`read_file gone` failed 3 times with the same error"
    mixed = [read("gone", f"error {k}", error=True) for k in range(3)]
    assert detect(mixed, LIMITS) is None


def test_three_replies_without_a_tool_call_are_a_monologue() -> None:
    assert detect([talk(), talk()], LIMITS) is None
    verdict = detect([read("a"), talk(), talk(), talk()], LIMITS)
    assert verdict is not None and verdict.pattern == "monologue"


def test_a_b_a_b_a_b_is_an_alternation_and_a_b_a_b_is_not_yet() -> None:
    a, b = read("a.txt"), read("b.txt")
    assert detect([a, b, a, b], LIMITS) is None
    verdict = detect([a, b, a, b, a, b], LIMITS)
    assert verdict is not None and verdict.pattern == "alternation"
    assert verdict.text == "`read_file a.txt` and `read_file b.txt` in turn for 6 steps"
    assert detect([a, b, a, b, a, read("c")], LIMITS) is None


def test_compaction_ten_times_without_progress_is_a_loop_progress_breaks_it() -> None:
    squeezed = [Step(calls=read(f"big{k}").calls, compacted=True) for k in range(10)]
    verdict = detect(squeezed, LIMITS)
    assert verdict is not None and verdict.pattern == "compaction"
    squeezed[5] = Step(calls=squeezed[5].calls, compacted=True, progress=True)
    assert detect(squeezed, LIMITS) is None


def test_the_outer_bound_counts_steps_without_progress_not_steps() -> None:
    watch = StuckWatch(StuckLimits(progress_steps=60))
    watch.reset(now=0.0)
    for k in range(59):
        assert watch.observe(read(f"f{k}"), now=float(k)) is None
    # A write (progress) puts the count back to zero: 59 more reads are fine.
    assert watch.observe(Step(progress=True, calls=read("w").calls), now=60.0) is None
    for k in range(59):
        assert watch.observe(read(f"g{k}"), now=61.0 + k) is None
    verdict = watch.observe(read("last"), now=200.0)
    assert verdict is not None and verdict.pattern == "no-progress"
    assert verdict.text == "no task or workspace change in 60 steps"


def test_the_outer_bound_in_time_thirty_minutes() -> None:
    watch = StuckWatch(StuckLimits())
    watch.reset(now=1000.0)
    assert watch.observe(read("a"), now=1000.0 + 29 * 60) is None
    verdict = watch.observe(read("b"), now=1000.0 + 30 * 60)
    assert verdict is not None and verdict.text == "no task or workspace change in 30 minutes"


def test_the_task_token_budget_counts_from_the_task_start() -> None:
    watch = StuckWatch(StuckLimits(task_tokens=1000))
    watch.reset(now=0.0)
    assert watch.observe(read("a"), now=1.0, task_id="1", tokens=900) is None
    # The next task starts: its count starts at zero.
    assert watch.observe(read("b"), now=2.0, task_id="2", tokens=900) is None
    verdict = watch.observe(read("c"), now=3.0, task_id="2", tokens=200)
    assert verdict is not None and verdict.pattern == "task-tokens"
    assert "1,100 tokens" in verdict.text


def test_reset_starts_every_count_afresh() -> None:
    watch = StuckWatch(StuckLimits())
    watch.reset(now=0.0)
    for _ in range(3):
        assert watch.observe(read("README.md"), now=1.0) is None
    watch.reset(now=2.0)
    for _ in range(3):
        assert watch.observe(read("README.md"), now=3.0) is None
    assert watch.observe(read("README.md"), now=4.0) is not None


def test_progress_is_work_by_declared_effects_and_task_statuses() -> None:
    def effects(name: str, args: dict[str, object]) -> frozenset[Effect]:
        return effects_of(BUILTIN.get(name), args)

    # A call that may change files is judged by the snapshot after it, whatever its name.
    assert may_change_files(effects("write_file", {"path": "a"}))
    assert may_change_files(effects("bash", {"command": "touch x"}))
    for name, args in (
        ("todo_write", {"todos": []}),
        ("read_file", {"path": "a"}),
        ("plan", {"op": "show"}),
        ("plan", {"op": "add_tasks"}),
        ("get_goal", {}),
    ):
        assert not may_change_files(effects(name, args)), name
        assert not changes_goal(effects(name, args), is_error=False), name
    assert changes_goal(effects("update_goal", {"status": "complete"}), is_error=False)
    assert not changes_goal(effects("update_goal", {"status": "complete"}), is_error=True)
    # A task's status, or a task gone (the plan archived): progress; new tasks alone: not.
    before = (("t1", "pending"),)
    assert not tasks_moved(before, before)
    assert not tasks_moved(before, (("t1", "pending"), ("t2", "pending")))
    assert tasks_moved(before, (("t1", "in_progress"),))
    assert tasks_moved(before, ())
    assert not tasks_moved(None, before)
    assert step_progress(task=False, workspace=False, goal=False) == ()
    assert step_progress(task=True, workspace=True, goal=False) == ("task", "workspace")
