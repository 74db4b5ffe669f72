"""The port through which a started task's acceptance criteria become the session goal.

The GoalService implements it with a ``source: "task"`` goal (docs/goals.md, task goals). The plan
service calls ``set_task_criteria`` when a task with criteria starts and
``clear_task_criteria`` on complete, skip, discard, revise and abandon.
"""

from __future__ import annotations

from typing import Protocol


class TaskCriteriaSink(Protocol):
    async def set_task_criteria(
        self, session_id: str, *, task_id: str, title: str, criteria: list[str]
    ) -> None:
        """Make ``criteria`` the session's task goal (ignored while a user goal is live)."""
        ...

    async def clear_task_criteria(self, session_id: str) -> None:
        """Drop the task goal, if any; a user goal is never touched."""
        ...
