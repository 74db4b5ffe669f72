"""The plan service's use of extraction and reconciliation (engine.plan.extract/reconcile).

Bundled so tests can pass their own and the service reads one object.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from engine.plan.types import PlanTask


def _no_checks(markdown: str) -> list[str]:
    return []


@dataclass(frozen=True, slots=True)
class Seeding:
    """``extract``: Markdown -> work items; ``validate``: template B, what is missing;
    ``seed``/``reconcile``: work items -> tasks, returning the next task id; ``plan_checks``:
    Markdown -> the ``## Checks`` commands."""

    extract: Callable[[str], Sequence[Any]]
    validate: Callable[[str], list[str]]
    seed: Callable[..., tuple[list[PlanTask], int]]
    reconcile: Callable[..., tuple[list[PlanTask], int]]
    plan_checks: Callable[[str], list[str]] = _no_checks


def default_seeding() -> Seeding:
    """The real extractor, validator, seeder and reconciler."""
    from engine.plan.extract import extract_work_items, plan_checks, validate_template_b
    from engine.plan.reconcile import reconcile_tasks, seed_tasks

    return Seeding(
        extract=extract_work_items,
        validate=validate_template_b,
        seed=seed_tasks,
        reconcile=reconcile_tasks,
        plan_checks=plan_checks,
    )
