"""Seeding a checklist from work items, and reconciling it on re-approval.

Pure functions over :class:`PlanTask` values (docs/extraction.md).
Identity is strict: ``heading_path`` + ``work_body`` of a version-1 ``plan_identity``. State
carries only across an exactly-one-to-exactly-one identity match; anything ambiguous restarts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from engine.plan.extract import WorkItem
from engine.plan.types import PlanIdentity, PlanProvenance, PlanTask

__all__ = ["reconcile_tasks", "seed_tasks"]

_Key = tuple[tuple[str, ...], str]


def _item_key(item: WorkItem) -> _Key:
    return (tuple(item.heading_path), item.work_body)


def _task_key(task: PlanTask) -> _Key | None:
    ident = task.plan_identity
    if ident is None or ident.version != 1:
        return None
    return (tuple(ident.heading_path), ident.work_body)


class _Ids:
    """Mints ``str(counter)`` ids, skipping any id already taken (so none is ever reused)."""

    def __init__(self, next_task_id: int, taken: set[str]) -> None:
        self.next = next_task_id
        self.taken = taken

    def mint(self) -> str:
        while str(self.next) in self.taken:
            self.next += 1
        task_id = str(self.next)
        self.next += 1
        self.taken.add(task_id)
        return task_id


def _new_task(item: WorkItem, task_id: str, order: int) -> PlanTask:
    return PlanTask(
        id=task_id,
        order=order,
        title=item.title,
        description=item.description,
        acceptance_criteria=list(item.acceptance_criteria),
        status="pending",
        source="plan",
        checks=list(item.checks),
        plan_identity=PlanIdentity(
            version=1, heading_path=list(item.heading_path), work_body=item.work_body
        ),
    )


def seed_tasks(items: Sequence[WorkItem], *, next_task_id: int) -> tuple[list[PlanTask], int]:
    """Seed pending ``source: "plan"`` tasks with a version-1 identity, ids minted from the counter.

    Returns the tasks (``order`` 1, 2, ...) and the new ``next_task_id`` to store.
    """
    ids = _Ids(next_task_id, set())
    tasks = [_new_task(item, ids.mint(), n) for n, item in enumerate(items, start=1)]
    return tasks, ids.next


def reconcile_tasks(
    *,
    previous: Sequence[PlanTask],
    previous_plan_id: str,
    items: Sequence[WorkItem],
    next_task_id: int,
) -> tuple[list[PlanTask], int]:
    """Replace the ``source: "plan"`` tasks with ``items``, carrying proof only where certain.

    A task keeps its id and, when completed or deferred, its status, evidence and reason (with
    ``plan_provenance``) only when exactly one previous version-1 identity and exactly one
    incoming item match. Agent tasks stay, after the plan tasks; removed ids are dropped from
    every ``dependencies`` list and no edge is added. Returns the tasks and the new counter.
    """
    prev_plan = [t for t in previous if t.source == "plan"]
    agent = [t for t in previous if t.source != "plan"]
    prev_keys: Counter[_Key] = Counter()
    by_key: dict[_Key, PlanTask] = {}
    for t in prev_plan:
        key = _task_key(t)
        if key is not None:
            prev_keys[key] += 1
            by_key[key] = t
    item_keys: Counter[_Key] = Counter(_item_key(i) for i in items)

    ids = _Ids(next_task_id, {t.id for t in previous})
    plan_tasks: list[PlanTask] = []
    kept: set[str] = set()
    for n, item in enumerate(items, start=1):
        key = _item_key(item)
        match = by_key.get(key) if prev_keys[key] == 1 and item_keys[key] == 1 else None
        if match is None:
            plan_tasks.append(_new_task(item, ids.mint(), n))
            continue
        task = _new_task(item, match.id, n)
        kept.add(match.id)
        if match.status in ("completed", "deferred"):
            task = task.model_copy(
                update={
                    "status": match.status,
                    "evidence": match.evidence,
                    "reason": match.reason,
                    # Same identity, so the same Done when and the same checks: their proof
                    # carries with the status.
                    "check_results": list(match.check_results),
                    "plan_provenance": PlanProvenance(plan_id=previous_plan_id, task_id=match.id),
                }
            )
        plan_tasks.append(task)

    removed = {t.id for t in prev_plan} - kept
    # A kept task keeps the edges it had to surviving tasks; no edge is ever inferred.
    matched_deps = {t.id: t.dependencies for t in prev_plan if t.id in kept}
    result = [
        t.model_copy(update={"dependencies": [d for d in matched_deps[t.id] if d not in removed]})
        if t.id in matched_deps
        else t
        for t in plan_tasks
    ]
    order = len(result)
    for t in agent:
        order += 1
        deps = [d for d in t.dependencies if d not in removed]
        result.append(t.model_copy(update={"order": order, "dependencies": deps}, deep=True))
    return result, ids.next
