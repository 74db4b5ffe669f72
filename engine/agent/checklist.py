"""An approved checklist runs to its end: the continuation policy, as pure functions.

An approval (or ``/execute``, or Resume on the card) is the owner's consent to run the whole
checklist, so the session keeps it going turn after turn while tasks remain. The per-turn step
cap only guards one runaway turn. What stops the run is being stuck, not being slow: the
stuck detector (``engine.progress.stuck``) reads every step, and the daily token cap pauses
it too; either way the run is disarmed with a :class:`PauseReason` that the card shows.

The run is process-local, like a goal's activation: a restart comes up disarmed and the card
offers Resume; ``/stop`` disarms it too. See docs/agent.md "The checklist run".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from engine.events import CommandRun, PauseKind, RunPaused, SessionEvent, TurnEnd
from engine.plan.types import PlanTask
from engine.progress.rule import TaskStatuses, task_statuses, tasks_moved

# What task progress is measured on: each task's status and evidence.
Fingerprint = TaskStatuses


@dataclass(frozen=True, slots=True)
class PauseReason:
    """Why the run stopped by itself; ``text`` is the card's line (after "⏸ ").

    ``kind`` says which rule stopped it; ``pattern`` and ``evidence`` are the stuck
    detector's (``repeat``, ``read_file README.md``), ``task_id`` the task it was on.
    """

    kind: PauseKind
    text: str
    pattern: str | None = None
    evidence: str = ""
    task_id: str | None = None


@dataclass(frozen=True, slots=True)
class ChecklistRun:
    """The checklist run of one session. ``armed`` means it continues by itself."""

    armed: bool = False
    fingerprint: Fingerprint | None = None
    # Wall-clock time of the last progress (or of arming); None before any.
    last_progress_at: float | None = None
    # Set when the run stopped by itself (stuck, the daily cap); cleared by the next arm.
    paused: PauseReason | None = None


def fingerprint(tasks: Sequence[PlanTask]) -> Fingerprint:
    """What the progress rule compares: the tasks' statuses (engine.progress.rule)."""
    return task_statuses(tasks)


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
        armed=True, fingerprint=fingerprint(tasks), last_progress_at=now, paused=None
    )


def disarm(run: ChecklistRun) -> ChecklistRun:
    """Stop continuing (``/stop``, a failed or cancelled turn, the plan left Active)."""
    return dataclasses.replace(run, armed=False)


def pause(run: ChecklistRun, reason: PauseReason) -> ChecklistRun:
    """The run stopped by itself: disarmed, and the card says why."""
    return dataclasses.replace(run, armed=False, paused=reason)


def observe_tasks(
    run: ChecklistRun, tasks: Sequence[PlanTask], *, now: float
) -> tuple[ChecklistRun, bool]:
    """Account for the tasks after a step: the run, and whether a task's status changed
    since the last look (engine.progress.rule: new tasks alone are not progress)."""
    seen = fingerprint(tasks)
    if run.fingerprint is None:
        return dataclasses.replace(run, fingerprint=seen), False
    if seen == run.fingerprint:
        return run, False
    if not tasks_moved(run.fingerprint, seen):
        return dataclasses.replace(run, fingerprint=seen), False
    return dataclasses.replace(run, fingerprint=seen, last_progress_at=now), True


def should_continue(run: ChecklistRun, tasks: Sequence[PlanTask], *, active: bool) -> bool:
    """After a turn: queue the next continuation?"""
    return run.armed and active and tasks_left(tasks)


# The commands that arm the run (Approve, Resume, /execute), and the one that stops it.
ARM_COMMANDS: Final = frozenset({"approve", "resume", "execute"})
RESTART_TEXT = "Paused by the restart: Resume runs the rest of the checklist."
STOP_TEXT = "Paused by /stop: Resume runs the rest of the checklist."


def stopped_reason(events: Iterable[SessionEvent]) -> PauseReason | None:
    """Why the last armed run stopped, read from a session's log (a new process knows
    nothing else): its ``run/paused``, a ``/stop``, or the restart that cancelled or
    interrupted its turn. ``None`` when the log does not say."""
    reason: PauseReason | None = None
    for event in events:
        if isinstance(event, CommandRun) and event.name in ARM_COMMANDS:
            reason = None  # armed again: what stopped it before is past
        elif isinstance(event, RunPaused) and event.goal_id is None:  # not a goal round
            reason = PauseReason(
                event.kind,
                event.text,
                pattern=event.pattern,
                evidence=event.evidence,
                task_id=event.task_id,
            )
        elif isinstance(event, CommandRun) and event.name == "stop":
            reason = PauseReason("stop", STOP_TEXT)
        elif (
            isinstance(event, TurnEnd)
            and reason is None
            and event.outcome in ("interrupted", "cancelled")
        ):
            reason = PauseReason("restart", RESTART_TEXT)
    return reason


__all__ = [
    "ARM_COMMANDS",
    "RESTART_TEXT",
    "STOP_TEXT",
    "ChecklistRun",
    "Fingerprint",
    "PauseReason",
    "arm",
    "current_task",
    "disarm",
    "fingerprint",
    "observe_tasks",
    "pause",
    "should_continue",
    "stopped_reason",
    "task_label",
    "tasks_left",
]
