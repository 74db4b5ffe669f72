"""Progress is work: the one rule both the stuck detector and a goal's idle rounds read.

A step made progress when it did one of three things, and nothing else counts:

- ``task``: a task's status changed (started, completed, skipped; a task that left the list
  because the plan was completed or discarded counts too). Adding tasks, re-reading the plan
  and ``plan show`` change no status;
- ``workspace``: a file in the workspace changed. Whatever the tool's name, a call whose
  declared effects may change files (``write``, ``shell``: engine.tools.effects) is followed by
  a snapshot of the workspace (engine.progress.workspace) and the step counts only when the
  snapshot differs;
- ``goal``: the goal's state changed (a ``goal`` call that succeeded: ``update_goal``).

A todo rewrite, a read, a search and a command that changes no file are not progress, however
varied. The agent decides each watched step with :func:`step_progress` and logs the kinds it
found (``progress/made``), and a goal's idle-rounds count reads those events
(engine.goal.progress), so both bounds count the same thing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

from engine.plan.types import PlanTask
from engine.tools.effects import Effect

ProgressKind = Literal["task", "workspace", "goal"]
# A checklist's statuses, by task id, as the rule compares them.
TaskStatuses = tuple[tuple[str, str], ...]
# What a step's calls may do, by their declared effects.
FILE_EFFECTS: frozenset[Effect] = frozenset({"write", "shell"})
GOAL_EFFECTS: frozenset[Effect] = frozenset({"goal"})


def task_statuses(tasks: Sequence[PlanTask]) -> TaskStatuses:
    """The tasks' statuses by id (what :func:`tasks_moved` compares)."""
    return tuple((t.id, t.status) for t in tasks)


def tasks_moved(before: TaskStatuses | None, after: TaskStatuses) -> bool:
    """Whether a task that was there before has another status now, or is gone (the plan was
    completed or discarded). New tasks alone are not progress."""
    if before is None:
        return False
    now = dict(after)
    return any(now.get(task_id) != status for task_id, status in before)


def may_change_files(effects: Iterable[Effect]) -> bool:
    """Whether a call with ``effects`` may change the workspace (then the snapshot decides)."""
    return not FILE_EFFECTS.isdisjoint(effects)


def changes_goal(effects: Iterable[Effect], *, is_error: bool) -> bool:
    """Whether a call with ``effects`` changed the goal's state (it succeeded)."""
    return not is_error and not GOAL_EFFECTS.isdisjoint(effects)


def step_progress(*, task: bool, workspace: bool, goal: bool) -> tuple[ProgressKind, ...]:
    """The kinds of progress a step made (empty: none), from the three facts of the rule."""
    found: list[ProgressKind] = []
    if task:
        found.append("task")
    if workspace:
        found.append("workspace")
    if goal:
        found.append("goal")
    return tuple(found)


__all__ = [
    "FILE_EFFECTS",
    "GOAL_EFFECTS",
    "ProgressKind",
    "TaskStatuses",
    "changes_goal",
    "may_change_files",
    "step_progress",
    "task_statuses",
    "tasks_moved",
]
