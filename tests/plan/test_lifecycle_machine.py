"""The pure transitions, without IO, plus a property over random tool-op sequences."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.plan import checklist, machine
from engine.plan.machine import (
    ClearCriteria,
    Context,
    InitInput,
    SetCriteria,
    TaskSpec,
    Transition,
)
from engine.plan.refusals import TEXTS, Refusal
from engine.plan.types import PlanSidecar

CTX = Context(session_id="s", now="2026-01-01T00:00:00+00:00", new_plan_id="p2", md_path="/m.md")


def active(*titles: str, criteria: tuple[str, ...] = ()) -> PlanSidecar:
    t = machine.init(
        None,
        None,
        InitInput(
            title="T",
            mode=None,
            tasks=tuple(TaskSpec(title=x, acceptance_criteria=criteria) for x in titles),
        ),
        CTX,
    )
    assert isinstance(t, Transition) and t.sidecar is not None
    return t.sidecar


def test_init_design_from_noplan_writes_skeleton_md() -> None:
    t = machine.init(None, None, InitInput(title="Plan", mode=None, tasks=()), CTX)
    assert isinstance(t, Transition) and t.sidecar is not None
    assert t.md is not None and t.md.startswith("# Plan\n") and "## Context" in t.md
    assert t.sidecar.status == "Editing" and t.sidecar.description == t.md
    assert "/m.md" in t.text
    assert machine.state_of(t.sidecar, t.md) == "post_init"


def test_start_sets_criteria_and_complete_clears() -> None:
    sc = active("a", "b", criteria=("ok",))
    t = checklist.start(sc, None, None, CTX)
    assert isinstance(t, Transition) and t.criteria == SetCriteria("1", "a", ("ok",))
    assert t.sidecar is not None and t.sidecar.revision == sc.revision + 1
    t2 = checklist.complete(t.sidecar, None, None, "ev", CTX)
    assert isinstance(t2, Transition) and t2.criteria == ClearCriteria() and t2.archive is None
    t3 = checklist.skip(t2.sidecar, None, "2", "later", CTX)
    assert isinstance(t3, Transition) and t3.archive == "completed"


def test_refusal_texts_are_fixed() -> None:
    r = checklist.start(None, None, None, CTX)
    assert isinstance(r, Refusal) and r.code == "no-plan" and r.text == TEXTS["no-plan"]
    r2 = machine.submit(active("a"), None, [], CTX)
    assert isinstance(r2, Refusal) and r2.code == "submit-active"


def test_md_written_is_a_noop_outside_post_init_and_when_unchanged() -> None:
    assert machine.md_written(None, "x", CTX) is None
    assert machine.md_written(active("a"), "x", CTX) is None
    t = machine.init(None, None, InitInput(title="P", mode="design", tasks=()), CTX)
    assert isinstance(t, Transition)
    assert machine.md_written(t.sidecar, t.md, CTX) is None
    changed = machine.md_written(t.sidecar, "new", CTX)
    assert isinstance(changed, Transition) and changed.sidecar is not None
    assert changed.sidecar.description == "new"


OPS = st.sampled_from(
    [
        ("add", None),
        ("start", None),
        ("start", "1"),
        ("start", "3"),
        ("complete", None),
        ("complete", "2"),
        ("skip", None),
        ("skip", "4"),
    ]
)


@settings(max_examples=60, deadline=None)
@given(st.lists(OPS, max_size=25), st.integers(min_value=1, max_value=4))
def test_property_checklist_invariants(ops: list[tuple[str, str | None]], n: int) -> None:
    """Never two tasks in progress, ids unique, revision strictly rising, archive at the end."""
    sc: PlanSidecar | None = active(*[f"t{i}" for i in range(n)])
    for op, task_id in ops:
        if sc is None:
            break
        before = sc.revision
        if op == "add":
            r = checklist.add_tasks(sc, None, [TaskSpec(title="x")], CTX)
        elif op == "start":
            r = checklist.start(sc, None, task_id, CTX)
        elif op == "complete":
            r = checklist.complete(sc, None, task_id, None, CTX)
        else:
            r = checklist.skip(sc, None, task_id, "r", CTX)
        if isinstance(r, Refusal):
            assert r.text == TEXTS[r.code]
            continue
        assert r.sidecar is not None and r.sidecar.revision == before + 1
        tasks = r.sidecar.tasks
        assert sum(t.status == "in_progress" for t in tasks) <= 1
        assert len({t.id for t in tasks}) == len(tasks)
        assert r.sidecar.approved_at is None
        open_left = any(t.status in ("pending", "in_progress") for t in tasks)
        assert (r.archive == "completed") == (not open_left)
        sc = None if r.archive else r.sidecar
