"""An approved checklist runs to its end: the continuation policy, as pure functions.

An approval (or ``/execute``, or Resume on the card) is the owner's consent to run the whole
checklist, so the session keeps it going turn after turn while tasks remain. The per-turn step
cap only guards one runaway turn. What bounds the run is progress: a step whose tools neither
started nor completed a task nor changed a task's evidence is a step without progress; after
``stall_steps`` of those in a row the run stops as *stalled* and the card offers Resume.

The run is process-local, like a goal's activation: a restart comes up disarmed and the card
offers Resume; ``/stop`` disarms it too. See docs/agent.md "The checklist run".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from engine.plan.types import PlanTask

# What a step's progress is measured on: each task's status and evidence.
Fingerprint = tuple[tuple[str, str, str], ...]

DEFAULT_STALL_STEPS = 12


@dataclass(frozen=True, slots=True)
class ChecklistRun:
    """The checklist run of one session. ``armed`` means it continues by itself."""

    armed: bool = False
    fingerprint: Fingerprint | None = None
    steps_without_progress: int = 0
    # Wall-clock time of the last progress (or of arming); None before any.
    last_progress_at: float | None = None
    # Set when the run stopped stalled: (task label, steps without progress).
    stalled: tuple[str, int] | None = None
    # Set when the run paused for another reason (an approval nobody answered): the card's
    # line. Arming again (Resume) clears it.
    paused: str | None = None


def fingerprint(tasks: Sequence[PlanTask]) -> Fingerprint:
    """What counts as progress: a task started or completed, or its evidence changed."""
    return tuple((t.id, t.status, t.evidence or "") for t in tasks)


def tasks_left(tasks: Sequence[PlanTask]) -> bool:
    """True while a task is pending or in progress (the plan is not finished)."""
    return any(t.status in ("pending", "in_progress") for t in tasks)


def current_task(tasks: Sequence[PlanTask]) -> PlanTask | None:
    """The task in progress, else the first pending one by order."""
    ordered = sorted(tasks, key=lambda t: t.order)
    for status in ("in_progress", "pending"):
        for task in ordered:
            if task.status == status:
                return task
    return None


def task_label(task: PlanTask | None) -> str:
    """``task 7`` (its id), as the card and notices name it."""
    return f"task {task.id}" if task is not None else "the checklist"


def arm(run: ChecklistRun, tasks: Sequence[PlanTask], *, now: float) -> ChecklistRun:
    """The owner's consent (approval, /execute, Resume): run on, counting afresh."""
    return ChecklistRun(
        armed=True, fingerprint=fingerprint(tasks), last_progress_at=now, stalled=None
    )


def disarm(run: ChecklistRun) -> ChecklistRun:
    """Stop continuing (``/stop``, a failed or cancelled turn, the plan left Active)."""
    return dataclasses.replace(run, armed=False)


def observe_step(
    run: ChecklistRun, tasks: Sequence[PlanTask], *, now: float, stall_steps: int
) -> ChecklistRun:
    """Account for the step that just ended (call before the next model call).

    Progress resets the count; ``stall_steps`` steps without it disarm the run as stalled.
    """
    seen = fingerprint(tasks)
    if run.fingerprint is None:
        return dataclasses.replace(run, fingerprint=seen, last_progress_at=now)
    if seen != run.fingerprint:
        return dataclasses.replace(
            run, fingerprint=seen, steps_without_progress=0, last_progress_at=now
        )
    count = run.steps_without_progress + 1
    if run.armed and count >= stall_steps:
        label = task_label(current_task(tasks))
        return dataclasses.replace(
            run, armed=False, steps_without_progress=count, stalled=(label, count)
        )
    return dataclasses.replace(run, steps_without_progress=count)


def pause(run: ChecklistRun, why: str) -> ChecklistRun:
    """Stop continuing and say why on the card (``why`` is its line); Resume arms again."""
    return dataclasses.replace(run, armed=False, paused=why)


def heard_owner(run: ChecklistRun) -> ChecklistRun:
    """The owner spoke (an answer, feedback): the count of steps without progress restarts."""
    return dataclasses.replace(run, steps_without_progress=0)


def should_continue(run: ChecklistRun, tasks: Sequence[PlanTask], *, active: bool) -> bool:
    """After a turn: queue the next continuation?"""
    return run.armed and active and tasks_left(tasks)


__all__ = [
    "DEFAULT_STALL_STEPS",
    "ChecklistRun",
    "Fingerprint",
    "arm",
    "current_task",
    "disarm",
    "fingerprint",
    "heard_owner",
    "observe_step",
    "pause",
    "should_continue",
    "task_label",
    "tasks_left",
]
