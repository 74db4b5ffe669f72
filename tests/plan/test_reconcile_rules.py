"""One test per reconciliation rule of docs/extraction.md."""

from __future__ import annotations

import pytest

from engine.plan.extract import WorkItem, extract_work_items
from engine.plan.reconcile import reconcile_tasks, seed_tasks
from engine.plan.types import PlanIdentity, PlanProvenance, PlanSidecar, PlanTask


def _item(body: str, path: tuple[str, ...] = ("Steps",), title: str | None = None) -> WorkItem:
    return WorkItem(
        heading_path=list(path),
        work_body=body,
        title=title or body,
        description="",
        acceptance_criteria=[],
    )


def _done(task: PlanTask, status: str = "completed") -> PlanTask:
    return task.model_copy(update={"status": status, "evidence": "ev", "reason": "why"})


def _seed(*bodies: str, next_id: int = 1) -> list[PlanTask]:
    tasks, _ = seed_tasks([_item(b) for b in bodies], next_task_id=next_id)
    return tasks


def _agent(task_id: str, deps: list[str] | None = None, order: int = 99) -> PlanTask:
    return PlanTask(
        id=task_id, title=f"agent {task_id}", source="agent", dependencies=deps or [], order=order
    )


# --- seeding ---------------------------------------------------------------------------------


def test_each_seeded_plan_task_persists_a_version_one_identity() -> None:
    tasks, nxt = seed_tasks([_item("a", ("X", "Y"))], next_task_id=5)
    assert nxt == 6
    (t,) = tasks
    assert t.source == "plan"
    assert t.plan_identity == PlanIdentity(version=1, heading_path=["X", "Y"], work_body="a")
    assert t.id == "5"
    assert t.status == "pending"


def test_seeded_tasks_take_title_description_and_criteria_from_the_item() -> None:
    item = WorkItem(["S"], "body", "T", "D", ["c1", "c2"])
    (t,), _ = seed_tasks([item], next_task_id=1)
    assert (t.title, t.description, t.acceptance_criteria) == ("T", "D", ["c1", "c2"])


def test_seeded_ids_are_minted_from_the_counter_in_order() -> None:
    tasks, nxt = seed_tasks([_item("a"), _item("b"), _item("c")], next_task_id=10)
    assert [t.id for t in tasks] == ["10", "11", "12"]
    assert [t.order for t in tasks] == [1, 2, 3]
    assert nxt == 13


# --- what is replaced ------------------------------------------------------------------------


def test_reapproval_replaces_only_plan_tasks() -> None:
    prev = [*_seed("a", "b"), _agent("7")]
    out, _ = reconcile_tasks(
        previous=prev, previous_plan_id="p1", items=[_item("c")], next_task_id=8
    )
    assert [(t.source, t.title) for t in out] == [("plan", "c"), ("agent", "agent 7")]


def test_agent_created_tasks_remain_after_the_plan_tasks_with_order_renumbered() -> None:
    prev = [_agent("9", order=1), *_seed("a", "b"), _agent("10", order=2)]
    out, _ = reconcile_tasks(
        previous=prev, previous_plan_id="p1", items=[_item("a"), _item("x")], next_task_id=11
    )
    assert [t.id for t in out][2:] == ["9", "10"]
    assert [t.order for t in out] == [1, 2, 3, 4]


def test_agent_task_state_is_kept_as_is() -> None:
    agent = _agent("9").model_copy(update={"status": "in_progress", "evidence": "e"})
    out, _ = reconcile_tasks(previous=[agent], previous_plan_id="p", items=[], next_task_id=10)
    assert (out[0].status, out[0].evidence) == ("in_progress", "e")


def test_a_removed_plan_id_is_dropped_from_an_agent_tasks_dependencies() -> None:
    prev = [*_seed("a", "b"), _agent("3", deps=["1", "2"])]
    out, _ = reconcile_tasks(
        previous=prev, previous_plan_id="p", items=[_item("a")], next_task_id=4
    )
    assert out[-1].dependencies == ["1"]


def test_no_replacement_dependency_is_inferred_and_no_new_edge_introduced() -> None:
    # "b" is edited (a new task replaces it); the agent task that waited on "b" does not
    # start waiting on the replacement, and plan tasks get no edges.
    prev = [*_seed("a", "b"), _agent("3", deps=["2"])]
    out, _ = reconcile_tasks(
        previous=prev, previous_plan_id="p", items=[_item("a"), _item("b2")], next_task_id=4
    )
    assert out[-1].dependencies == []
    assert all(t.dependencies == [] for t in out)


def test_a_kept_task_keeps_its_edges_to_surviving_tasks_only() -> None:
    a, b, c = _seed("a", "b", "c")
    c = c.model_copy(update={"dependencies": ["1", "2"]})
    out, _ = reconcile_tasks(
        previous=[a, b, c], previous_plan_id="p", items=[_item("a"), _item("c")], next_task_id=4
    )
    assert [(t.id, t.dependencies) for t in out] == [("1", []), ("3", ["1"])]


# --- what carries ----------------------------------------------------------------------------


@pytest.mark.parametrize("status", ["completed", "deferred"])
def test_completed_or_deferred_state_carries_on_an_exact_one_to_one_match(status: str) -> None:
    prev = [_done(t, status) for t in _seed("a")]
    (t,), _ = reconcile_tasks(
        previous=prev, previous_plan_id="p1", items=[_item("a")], next_task_id=2
    )
    assert (t.status, t.evidence, t.reason) == (status, "ev", "why")


def test_a_carried_task_records_plan_provenance() -> None:
    prev = [_done(t) for t in _seed("a", next_id=4)]
    (t,), _ = reconcile_tasks(
        previous=prev, previous_plan_id="old-plan", items=[_item("a")], next_task_id=5
    )
    assert t.plan_provenance == PlanProvenance(plan_id="old-plan", task_id="4")


def test_provenance_is_part_of_the_persisted_task_snapshot() -> None:
    prev = [_done(t) for t in _seed("a")]
    tasks, nxt = reconcile_tasks(
        previous=prev, previous_plan_id="old", items=[_item("a")], next_task_id=2
    )
    side = PlanSidecar(id="new", session_id="s", tasks=tasks, next_task_id=nxt)
    again = PlanSidecar.model_validate_json(side.model_dump_json())
    assert again.tasks[0].plan_provenance == PlanProvenance(plan_id="old", task_id="1")
    assert again.tasks[0].plan_identity == tasks[0].plan_identity


@pytest.mark.parametrize("status", ["pending", "in_progress"])
def test_pending_and_in_progress_work_restarts_pending(status: str) -> None:
    prev = [t.model_copy(update={"status": status, "evidence": "half"}) for t in _seed("a")]
    (t,), _ = reconcile_tasks(
        previous=prev, previous_plan_id="p", items=[_item("a")], next_task_id=2
    )
    assert (t.status, t.evidence, t.plan_provenance) == ("pending", None, None)


def test_repeated_identical_bullets_in_the_new_plan_all_start_pending() -> None:
    prev = [_done(t) for t in _seed("a")]
    out, _ = reconcile_tasks(
        previous=prev, previous_plan_id="p", items=[_item("a"), _item("a")], next_task_id=2
    )
    assert [t.status for t in out] == ["pending", "pending"]
    assert all(t.plan_provenance is None for t in out)


def test_repeated_identical_bullets_in_the_old_plan_never_carry() -> None:
    prev = [_done(t) for t in _seed("a", "a")]
    (t,), _ = reconcile_tasks(
        previous=prev, previous_plan_id="p", items=[_item("a")], next_task_id=3
    )
    assert (t.status, t.plan_provenance) == ("pending", None)


def test_tasks_without_a_versioned_identity_never_carry_state() -> None:
    legacy = PlanTask(id="1", title="a", source="plan", status="completed", evidence="ev")
    (t,), _ = reconcile_tasks(
        previous=[legacy], previous_plan_id="p", items=[_item("a")], next_task_id=2
    )
    assert (t.status, t.id, t.plan_provenance) == ("pending", "2", None)


def test_an_identity_of_another_version_never_carries() -> None:
    (t0,) = [_done(t) for t in _seed("a")]
    v2 = PlanIdentity.model_construct(version=2, heading_path=["Steps"], work_body="a")
    task = t0.model_copy(update={"plan_identity": v2})
    (t,), _ = reconcile_tasks(
        previous=[task], previous_plan_id="p", items=[_item("a")], next_task_id=2
    )
    assert (t.status, t.id) == ("pending", "2")


@pytest.mark.parametrize(
    ("old_md", "new_md"),
    [
        ("## Steps\n- a\n", "## Steps renamed\n- a\n"),  # a changed heading
        ("## Steps\n- a\n", "## Steps\n- a!\n"),  # a changed bullet
        ("## Steps\n- a\n  n\n", "## Steps\n- a\n  n2\n"),  # a changed nested line
        ("## Steps\nProse.\n", "## Steps\nProse!\n"),  # a changed prose body
    ],
    ids=["heading", "bullet", "nested-line", "prose"],
)
def test_a_changed_heading_bullet_nested_line_or_prose_starts_a_new_pending_task(
    old_md: str, new_md: str
) -> None:
    prev = [_done(t) for t in seed_tasks(extract_work_items(old_md), next_task_id=1)[0]]
    (t,), _ = reconcile_tasks(
        previous=prev, previous_plan_id="p", items=extract_work_items(new_md), next_task_id=2
    )
    assert (t.id, t.status, t.plan_provenance) == ("2", "pending", None)


def test_changing_shared_or_ancestor_work_resets_related_bullets() -> None:
    old = "## Outer\nUse Postgres.\n### Inner\nThen:\n- migrate\n"
    for new in (
        "## Outer\nUse SQLite.\n### Inner\nThen:\n- migrate\n",  # ancestor prose
        "## Outer\nUse Postgres.\n### Inner\nAfter that:\n- migrate\n",  # lead-in
    ):
        prev = [_done(t) for t in seed_tasks(extract_work_items(old), next_task_id=1)[0]]
        out, _ = reconcile_tasks(
            previous=prev, previous_plan_id="p", items=extract_work_items(new), next_task_id=9
        )
        migrate = next(t for t in out if t.title == "migrate")
        assert migrate.status == "pending"


def test_renumbered_steps_keep_their_proof() -> None:
    old = "## Implementation steps\n1. a\n2. b\n"
    new = "## Implementation steps\n1. new first\n2. a\n3. b\n"
    prev = [_done(t) for t in seed_tasks(extract_work_items(old), next_task_id=1)[0]]
    out, _ = reconcile_tasks(
        previous=prev, previous_plan_id="p", items=extract_work_items(new), next_task_id=3
    )
    assert [(t.id, t.status) for t in out] == [
        ("3", "pending"),
        ("1", "completed"),
        ("2", "completed"),
    ]


# --- ids -------------------------------------------------------------------------------------


def test_a_one_to_one_match_keeps_its_task_id() -> None:
    prev = _seed("a", "b", next_id=40)
    out, _ = reconcile_tasks(
        previous=prev, previous_plan_id="p", items=[_item("b"), _item("a")], next_task_id=42
    )
    assert [t.id for t in out] == ["41", "40"]


def test_every_other_task_gets_a_new_id_never_reused() -> None:
    prev = _seed("a", "a", "gone")
    out, nxt = reconcile_tasks(
        previous=prev,
        previous_plan_id="p",
        items=[_item("a"), _item("a"), _item("new")],
        next_task_id=4,
    )
    assert [t.id for t in out] == ["4", "5", "6"]
    assert nxt == 7


def test_a_minted_id_skips_an_id_already_taken() -> None:
    # A stale counter must not hand out an id an agent task already has.
    prev = [_agent("2")]
    out, nxt = reconcile_tasks(
        previous=prev, previous_plan_id="p", items=[_item("a"), _item("b")], next_task_id=1
    )
    assert [t.id for t in out] == ["1", "3", "2"]
    assert nxt == 4
