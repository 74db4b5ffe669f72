"""Properties of reconciliation over generated checklists and generated plans."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.plan.extract import WorkItem, extract_work_items
from engine.plan.reconcile import reconcile_tasks, seed_tasks
from engine.plan.types import PlanIdentity, PlanTask
from tests.plan.plangen import plan_lines

_SETTINGS = settings(max_examples=200, deadline=None)
_BODIES = ["a", "b", "c", "d"]
_PATHS = [("S",), ("S", "T"), ("U",)]
_STATUSES = ["pending", "in_progress", "completed", "deferred"]


@st.composite
def _previous(draw: st.DrawFn) -> list[PlanTask]:
    n = draw(st.integers(0, 8))
    tasks: list[PlanTask] = []
    for k in range(n):
        kind = draw(st.sampled_from(["plan", "plan", "legacy", "agent"]))
        status = draw(st.sampled_from(_STATUSES))
        ident = (
            PlanIdentity(
                heading_path=list(draw(st.sampled_from(_PATHS))),
                work_body=draw(st.sampled_from(_BODIES)),
            )
            if kind == "plan"
            else None
        )
        deps = draw(st.lists(st.sampled_from([str(i) for i in range(1, n + 1)]), max_size=3))
        tasks.append(
            PlanTask(
                id=str(k + 1),
                title=f"t{k}",
                source="agent" if kind == "agent" else "plan",
                plan_identity=ident,
                status=status,
                evidence=f"ev{k}" if status == "completed" else None,
                reason=f"r{k}" if status == "deferred" else None,
                dependencies=deps,
            )
        )
    return tasks


_items = st.lists(
    st.builds(
        lambda p, b: WorkItem(list(p), b, b, "", []),
        st.sampled_from(_PATHS),
        st.sampled_from(_BODIES),
    ),
    max_size=8,
)


def _key(path: list[str], body: str) -> tuple[tuple[str, ...], str]:
    return (tuple(path), body)


@_SETTINGS
@given(_previous(), _items)
def test_reconciliation_never_carries_state_across_an_ambiguous_match(
    previous: list[PlanTask], items: list[WorkItem]
) -> None:
    out, _nxt = reconcile_tasks(
        previous=previous, previous_plan_id="old", items=items, next_task_id=len(previous) + 1
    )
    prev_keys = Counter(
        _key(t.plan_identity.heading_path, t.plan_identity.work_body)
        for t in previous
        if t.source == "plan" and t.plan_identity is not None
    )
    item_keys = Counter(_key(i.heading_path, i.work_body) for i in items)
    by_id = {t.id: t for t in previous}
    plan_out = [t for t in out if t.source == "plan"]
    assert len(plan_out) == len(items)
    for task, item in zip(plan_out, items, strict=True):
        key = _key(item.heading_path, item.work_body)
        one_to_one = prev_keys[key] == 1 and item_keys[key] == 1
        if task.id in by_id:
            # Only a one-to-one match keeps an id, and only from the task it matched.
            assert one_to_one
            old = by_id[task.id]
            assert old.plan_identity is not None
            assert _key(old.plan_identity.heading_path, old.plan_identity.work_body) == key
        if task.status != "pending" or task.evidence or task.reason or task.plan_provenance:
            assert one_to_one
            old = by_id[task.id]
            assert old.status in ("completed", "deferred")
            assert (task.status, task.evidence, task.reason) == (
                old.status,
                old.evidence,
                old.reason,
            )
            assert task.plan_provenance is not None
            assert task.plan_provenance.task_id == old.id
            assert task.plan_provenance.plan_id == "old"


@_SETTINGS
@given(_previous(), _items)
def test_ids_are_unique_and_never_reused(previous: list[PlanTask], items: list[WorkItem]) -> None:
    out, nxt = reconcile_tasks(
        previous=previous, previous_plan_id="p", items=items, next_task_id=len(previous) + 1
    )
    ids = [t.id for t in out]
    assert len(ids) == len(set(ids))
    kept_plan = {t.id for t in out if t.source == "plan"} & {t.id for t in previous}
    removed = {t.id for t in previous if t.source == "plan"} - kept_plan
    assert not removed & set(ids)
    assert all(int(i) < nxt for i in ids if int(i) > len(previous))


@_SETTINGS
@given(_previous(), _items)
def test_agent_tasks_stay_in_order_and_only_lose_removed_dependencies(
    previous: list[PlanTask], items: list[WorkItem]
) -> None:
    out, _ = reconcile_tasks(
        previous=previous, previous_plan_id="p", items=items, next_task_id=len(previous) + 1
    )
    agents_in = [t for t in previous if t.source == "agent"]
    agents_out = out[len(items) :]
    assert [t.id for t in agents_out] == [t.id for t in agents_in]
    surviving = {t.id for t in out}
    for before, after in zip(agents_in, agents_out, strict=True):
        assert after.dependencies == [d for d in before.dependencies if d in surviving]
        assert after.status == before.status
    assert [t.order for t in out] == list(range(1, len(out) + 1))


@settings(max_examples=100, deadline=None)
@given(plan_lines(done_when=True))
def test_reapproving_an_unchanged_plan_carries_every_unique_finished_task(md: str) -> None:
    items = extract_work_items(md)
    seeded, nxt = seed_tasks(items, next_task_id=1)
    done = [t.model_copy(update={"status": "completed", "evidence": "e"}) for t in seeded]
    out, _ = reconcile_tasks(previous=done, previous_plan_id="p", items=items, next_task_id=nxt)
    counts = Counter(_key(i.heading_path, i.work_body) for i in items)
    for task, item in zip(out, items, strict=True):
        unique = counts[_key(item.heading_path, item.work_body)] == 1
        assert (task.status == "completed") == unique
