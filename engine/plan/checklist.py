"""Checklist operations of an Active plan, as pure transitions (docs/plan-json-spec.md).

``add_tasks`` / ``start`` / ``complete`` / ``skip`` are Active only; the last ``complete`` or
``skip`` (nothing pending or in progress) archives the plan. ``start`` never approves. A task
with checks (docs/checks.md) completes only with plangate's passing run of them and is skipped
only with the owner's approval (:func:`gates` says what finishing a task needs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from engine.checks.report import evidence_text, failure_report, result_line
from engine.checks.types import CheckRun
from engine.plan.machine import (
    ClearCriteria,
    Context,
    CriteriaEffect,
    Result,
    SetCriteria,
    TaskSpec,
    Transition,
    make_tasks,
    state_of,
    touch,
)
from engine.plan.refusals import Refusal, refusal
from engine.plan.types import PlanSidecar, PlanState, PlanTask

# --- checklist operations ----------------------------------------------------------------------


def _checklist_gate(sidecar: PlanSidecar | None, md: str | None) -> Refusal | PlanSidecar:
    state = state_of(sidecar, md)
    if state == "none" or sidecar is None:
        return refusal("no-plan")
    if state == "pre_init":
        return refusal("pre-init-checklist-blocked")
    if state == "post_init":
        return refusal("editing-checklist-blocked")
    return sidecar


def add_tasks(
    sidecar: PlanSidecar | None, md: str | None, specs: Sequence[TaskSpec], ctx: Context
) -> Result:
    """``add_tasks`` / ``add_task``: Active only; the new tasks are ``source: agent``.

    The one exception is the seed fallback (docs/review-fixes.md): on an Active design plan with no
    tasks at all, the model seeds the checklist, so the tasks are ``source: plan`` without
    identity and re-approval replaces them instead of carrying them.
    """
    live = _checklist_gate(sidecar, md)
    if isinstance(live, Refusal):
        return live
    if not specs:
        return refusal("tasks-required")
    source: Literal["plan", "agent"] = (
        "plan" if live.mode == "design" and not live.tasks else "agent"
    )
    made = make_tasks(specs, next_task_id=live.next_task_id, existing=live.tasks, source=source)
    if isinstance(made, Refusal):
        return made
    tasks, next_id = made
    updated = touch(live, ctx, tasks=[*live.tasks, *tasks], next_task_id=next_id)
    ids = ", ".join(t.id for t in tasks)
    return Transition(sidecar=updated, reason="add_tasks", text=f"Added task(s) {ids}.")


def _in_progress(tasks: Sequence[PlanTask]) -> PlanTask | None:
    return next((t for t in tasks if t.status == "in_progress"), None)


def _deps_done(task: PlanTask, tasks: Sequence[PlanTask]) -> bool:
    by_id = {t.id: t for t in tasks}
    # A dependency on a task that no longer exists does not block (reconciliation drops them).
    return all(
        by_id[d].status in ("completed", "deferred") for d in task.dependencies if d in by_id
    )


def _replace(tasks: Sequence[PlanTask], task: PlanTask) -> list[PlanTask]:
    return [task if t.id == task.id else t for t in tasks]


def start(sidecar: PlanSidecar | None, md: str | None, task_id: str | None, ctx: Context) -> Result:
    """``start``: never approves anything; without an id, the next startable pending task."""
    live = _checklist_gate(sidecar, md)
    if isinstance(live, Refusal):
        return live
    if _in_progress(live.tasks) is not None:
        return refusal("task-in-progress")
    if task_id is None:
        ready = sorted(
            (t for t in live.tasks if t.status == "pending" and _deps_done(t, live.tasks)),
            key=lambda t: t.order,
        )
        if not ready:
            return refusal("no-startable-task")
        task = ready[0]
    else:
        found = next((t for t in live.tasks if t.id == task_id), None)
        if found is None:
            return refusal("unknown-task")
        if found.status != "pending":
            return refusal("task-not-pending")
        if not _deps_done(found, live.tasks):
            return refusal("dependencies-unmet")
        task = found
    started = task.model_copy(update={"status": "in_progress"})
    updated = touch(live, ctx, tasks=_replace(live.tasks, started))
    effect: CriteriaEffect = (
        SetCriteria(task_id=task.id, title=task.title, criteria=tuple(task.acceptance_criteria))
        if task.acceptance_criteria
        else None
    )
    text = f"Started task {task.id}: {task.title}."
    if task.acceptance_criteria:
        text += " Done when: " + "; ".join(task.acceptance_criteria)
    if task.checks:
        text += " plan complete runs these checks first: " + ", ".join(
            f"`{c}`" for c in task.checks
        )
    return Transition(sidecar=updated, reason="start", text=text, criteria=effect)


@dataclass(frozen=True, slots=True)
class Gates:
    """What finishing one task needs (docs/checks.md): its own checks, and the plan's checks
    when finishing it would finish the plan."""

    task: PlanTask
    task_checks: tuple[str, ...]
    plan_checks: tuple[str, ...]

    @property
    def commands(self) -> tuple[str, ...]:
        """Every check to run, in order: the task's, then the plan's."""
        return self.task_checks + tuple(c for c in self.plan_checks if c not in self.task_checks)

    @property
    def checked(self) -> bool:
        return bool(self.commands)


def _target(live: PlanSidecar, task_id: str | None) -> Refusal | PlanTask:
    if task_id is None:
        task = _in_progress(live.tasks)
        if task is None:
            return refusal("no-task-in-progress")
    else:
        found = next((t for t in live.tasks if t.id == task_id), None)
        if found is None:
            return refusal("unknown-task")
        task = found
    if task.status in ("completed", "deferred"):
        return refusal("task-finished")
    if task.status == "pending" and _in_progress(live.tasks) is not None:
        # Finishing a pending task while another is running would leave two threads of work.
        return refusal("task-in-progress")
    return task


def gates(sidecar: PlanSidecar | None, md: str | None, task_id: str | None) -> Gates | Refusal:
    """The checks finishing ``task_id`` (or the task in progress) needs, or why it cannot."""
    live = _checklist_gate(sidecar, md)
    if isinstance(live, Refusal):
        return live
    return _gates(live, task_id)


def _gates(live: PlanSidecar, task_id: str | None) -> Gates | Refusal:
    task = _target(live, task_id)
    if isinstance(task, Refusal):
        return task
    last = not any(t.status in ("pending", "in_progress") for t in live.tasks if t.id != task.id)
    return Gates(
        task=task,
        task_checks=tuple(task.checks),
        plan_checks=tuple(live.checks) if last else (),
    )


def _finish(
    live: PlanSidecar,
    task_id: str | None,
    ctx: Context,
    *,
    status: Literal["completed", "deferred"],
    evidence: str | None = None,
    reason: str | None = None,
    run: CheckRun | None = None,
    owner_approved: bool = False,
) -> Result:
    need = _gates(live, task_id)
    if isinstance(need, Refusal):
        return need
    task = need.task
    extra: dict[str, object] = {}
    root: dict[str, object] = {}
    if need.checked and status == "deferred" and not owner_approved:
        return refusal("skip-needs-owner")
    if need.checked and status == "completed":
        # Only plangate's own passing run of exactly these checks completes the task: the
        # model's evidence text is not proof (docs/checks.md).
        if run is None:
            return refusal("checks-unavailable")
        if [r.command for r in run.results] + run.not_run != list(need.commands):
            return refusal("checks-changed")
        if not run.passed:
            return refusal("checks-failed", report=failure_report(run))
        own = [r for r in run.results if r.command in need.task_checks]
        evidence = evidence_text(run.results)
        extra["check_results"] = own
        if need.plan_checks:
            root["check_results"] = [r for r in run.results if r.command in need.plan_checks]
    if run is not None and live.check_baseline is not None:
        root["changed_tests"] = list(run.changed)
    done = task.model_copy(
        update={
            "status": status,
            "evidence": evidence if evidence is not None else task.evidence,
            "reason": reason if reason is not None else task.reason,
            **extra,
        }
    )
    tasks = _replace(live.tasks, done)
    updated = touch(live, ctx, tasks=tasks, **root)
    verb = "Completed" if status == "completed" else "Skipped (deferred)"
    if run is not None and status == "completed":
        verb = "Checks passed: " + "; ".join(result_line(r) for r in run.results) + ". Completed"
    effect: CriteriaEffect = ClearCriteria() if task.status == "in_progress" else None
    if not any(t.status in ("pending", "in_progress") for t in tasks):
        return Transition(
            sidecar=updated,
            archive="completed",
            criteria=ClearCriteria(),
            reason="complete" if status == "completed" else "skip",
            text=f"{verb} task {task.id}. All tasks are done: the plan is archived.",
        )
    return Transition(
        sidecar=updated,
        criteria=effect,
        reason="complete" if status == "completed" else "skip",
        text=f"{verb} task {task.id}. Call plan start for the next task.",
    )


def complete(
    sidecar: PlanSidecar | None,
    md: str | None,
    task_id: str | None,
    evidence: str | None,
    ctx: Context,
    *,
    run: CheckRun | None = None,
) -> Result:
    """``complete``: the in-progress task (or ``task_id``); the last one archives the plan.

    A task with checks (its own, or the plan's when it is the last) completes only with
    ``run``, plangate's passing run of exactly those checks; its evidence is then plangate's.
    """
    live = _checklist_gate(sidecar, md)
    if isinstance(live, Refusal):
        return live
    return _finish(live, task_id, ctx, status="completed", evidence=evidence, run=run)


def carried_over(sidecar: PlanSidecar | None) -> bool:
    """A live Active plan whose every task is already done (a re-approval carried them all
    over as completed or deferred): nothing would ever complete it, so it is finished now."""
    return (
        sidecar is not None
        and sidecar.status == "Active"
        and bool(sidecar.tasks)
        and not any(t.status in ("pending", "in_progress") for t in sidecar.tasks)
    )


def finish_carried(
    sidecar: PlanSidecar | None, md: str | None, ctx: Context, *, run: CheckRun | None
) -> Result:
    """Finish a plan whose every task was carried over as done: its ``## Checks`` run first
    (``run``, plangate's run of exactly them), and pass: the plan is archived. They fail: the
    last completed task is open again, so the run works on until they pass."""
    live = _checklist_gate(sidecar, md)
    if isinstance(live, Refusal):
        return live
    if not carried_over(live):
        return refusal("checks-changed")
    root: dict[str, object] = {}
    if live.checks:
        if run is None:
            return refusal("checks-unavailable")
        if [r.command for r in run.results] + run.not_run != list(live.checks):
            return refusal("checks-changed")
        if live.check_baseline is not None:
            root["changed_tests"] = list(run.changed)
        if not run.passed:
            done = [t for t in live.tasks if t.status == "completed"]
            if not done:
                return refusal("checks-failed", report=failure_report(run))
            last = max(done, key=lambda t: t.order)
            reopened = last.model_copy(update={"status": "pending", "evidence": None})
            updated = touch(live, ctx, tasks=_replace(live.tasks, reopened), **root)
            return Transition(
                sidecar=updated,
                reason="reopen",
                text=f"The plan's checks failed after the re-approval: task {last.id} is open "
                f"again.\n{failure_report(run)}",
            )
        root["check_results"] = list(run.results)
    return Transition(
        sidecar=touch(live, ctx, **root),
        archive="completed",
        criteria=ClearCriteria(),
        reason="complete",
        text="Every task was carried over as done"
        + ("; the plan's checks passed" if live.checks else "")
        + ": the plan is archived.",
    )


def skip(
    sidecar: PlanSidecar | None,
    md: str | None,
    task_id: str | None,
    reason: str | None,
    ctx: Context,
    *,
    owner_approved: bool = False,
) -> Result:
    """``skip``: marks the task deferred with its (required) reason; a task with checks
    only with the owner's approval."""
    live = _checklist_gate(sidecar, md)
    if isinstance(live, Refusal):
        return live
    if reason is None or not reason.strip():
        return refusal("reason-required")
    return _finish(
        live,
        task_id,
        ctx,
        status="deferred",
        reason=reason.strip(),
        owner_approved=owner_approved,
    )


# --- show ---------------------------------------------------------------------------------

_MARKS = {"pending": "[ ]", "in_progress": "[>]", "completed": "[x]", "deferred": "[-]"}
_LABELS: dict[PlanState, str] = {
    "none": "no plan",
    "pre_init": "planning, nothing written yet",
    "post_init": "being designed (Editing)",
    "active": "Active",
}


def render_show(sidecar: PlanSidecar | None, md: str | None, md_path: str) -> str:
    """The ``show`` text: title, state, revision, the ``.md`` path and the checklist."""
    state = state_of(sidecar, md)
    if sidecar is None or state == "none":
        return "No plan in this session."
    lines = [
        f"Plan: {sidecar.title or '(untitled)'} — {_LABELS[state]}, revision {sidecar.revision}"
    ]
    if state == "post_init":
        lines.append(f"Plan file: {md_path}")
    if state == "active":
        if not sidecar.tasks:
            lines.append("No tasks yet: add them with plan add_tasks.")
        for task in sorted(sidecar.tasks, key=lambda t: t.order):
            line = f"{_MARKS[task.status]} {task.id}. {task.title}"
            if task.dependencies:
                line += f" (after {', '.join(task.dependencies)})"
            if task.status == "deferred" and task.reason:
                line += f" — deferred: {task.reason}"
            if task.checks:
                line += " — checks: " + ", ".join(f"`{c}`" for c in task.checks)
            lines.append(line)
        if sidecar.checks:
            lines.append("Plan checks: " + ", ".join(f"`{c}`" for c in sidecar.checks))
    return "\n".join(lines)
