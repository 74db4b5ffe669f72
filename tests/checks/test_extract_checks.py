"""Which code spans of a plan are checks, and what a changed check does to reconciliation."""

from __future__ import annotations

from engine.plan.extract import checks_in_criteria, extract_work_items, plan_checks
from engine.plan.reconcile import reconcile_tasks, seed_tasks

PLAN = """# Health

## Context
- **Problem:** it is down.
- **Target state:** it is up.
- **Intent:** release.

## Implementation steps
1. Fix health — make `health()` return "ok".
   Done when: `pytest -q tests/test_health.py` passes and `health()` returns "ok"
2. Docs — describe it.
   - Done when:
     - `make docs` succeeds
     - the README mentions `health()`
3. Lint
   Done when: `ruff check .`

## Checks
- `python3 -m unittest -q`
- the linter too: `ruff check .`

```sh
# comments are skipped
make smoke
```

## Notes
- `rm -rf /` is not a check here: Notes are not work and not checks.
"""


def test_done_when_code_spans_that_pass_are_checks_and_prose_spans_are_not() -> None:
    items = extract_work_items(PLAN)
    assert [i.title for i in items] == ["Fix health", "Docs", "Lint"]
    assert [i.checks for i in items] == [
        ["pytest -q tests/test_health.py"],
        ["make docs"],
        ["ruff check ."],
    ]


def test_the_checks_section_is_the_plans_and_never_a_task() -> None:
    assert plan_checks(PLAN) == ["python3 -m unittest -q", "ruff check .", "make smoke"]
    assert all("Checks" not in item.heading_path for item in extract_work_items(PLAN))


def test_verdict_words_and_odd_spans() -> None:
    assert checks_in_criteria(["`a` exits 0", "`b` returns 0", "`c` is green", "`d` fails"]) == [
        "a",
        "b",
        "c",
    ]
    # A span with a backtick inside, a repeated check once, an over-long one never.
    assert checks_in_criteria(["``echo ` x`` passes", "`a` passes", "`a` passes"]) == [
        "echo ` x",
        "a",
    ]
    assert checks_in_criteria([f"`{'x' * 1001}` passes"]) == []


def test_a_revision_that_changes_a_check_restarts_the_step() -> None:
    items = extract_work_items(PLAN)
    tasks, next_id = seed_tasks(items, next_task_id=1)
    done = [t.model_copy(update={"status": "completed", "evidence": "proof"}) for t in tasks]
    revised = PLAN.replace("`make docs` succeeds", "`make docs SPHINXOPTS=-W` succeeds")
    again, _ = reconcile_tasks(
        previous=done,
        previous_plan_id="p1",
        items=extract_work_items(revised),
        next_task_id=next_id,
    )
    by_title = {t.title: t for t in again}
    # The changed check is part of the step's identity: the step starts pending, new id.
    assert by_title["Docs"].status == "pending" and by_title["Docs"].id not in {"1", "2", "3"}
    assert by_title["Docs"].checks == ["make docs SPHINXOPTS=-W"]
    # The unchanged steps carry their proof.
    assert by_title["Fix health"].status == "completed" and by_title["Fix health"].id == "1"
    assert by_title["Lint"].status == "completed"
