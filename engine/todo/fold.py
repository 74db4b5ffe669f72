"""The todo machine's pure core (docs/goals.md).

A todo list is a whole value: each ``todo/write`` replaces it. The standing projection is null
before the first write and cleared by every ``turn/start`` (not by ``turn/end``), so a finished
list stays visible until the next turn opens. Replay never re-applies the active-count policy: a
log written while several ``in_progress`` items were allowed still folds after the setting is
tightened.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from engine.events import SessionEvent, TodoItem
from engine.projections import apply_todo_event

TODO_STATUSES = ("pending", "in_progress", "completed")

TodoList = tuple[TodoItem, ...]


def empty_todo_state() -> TodoList | None:
    """No list written yet."""
    return None


def fold_todos(events: Iterable[SessionEvent]) -> TodoList | None:
    """The standing list after ``events`` (replay; no policy check)."""
    state = empty_todo_state()
    for event in events:
        state = apply_todo_event(state, event)
    return state


def normalize_todos(
    raw: Any, *, allow_parallel_in_progress: bool
) -> tuple[list[TodoItem], list[str]]:
    """Validate a ``todo_write`` argument list: the normalized items, or what is wrong.

    Items are ``{content, status}`` only; content is stripped and must not be empty; status is
    pending, in_progress or completed; an empty list is valid. With
    ``allow_parallel_in_progress`` false, more than one in_progress item is rejected.
    """
    if not isinstance(raw, list):
        return [], ["todos must be a list"]
    problems: list[str] = []
    items: list[TodoItem] = []
    for index, entry in enumerate(raw):
        where = f"todos[{index}]"
        if not isinstance(entry, dict):
            problems.append(f"{where}: must be an object with content and status")
            continue
        extra = sorted(set(entry) - {"content", "status"})
        if extra:
            problems.append(f"{where}: unexpected field(s) {', '.join(extra)}")
        content = entry.get("content")
        status = entry.get("status")
        text = content.strip() if isinstance(content, str) else ""
        if not text:
            problems.append(f"{where}.content: must be non-empty text")
        if status not in TODO_STATUSES:
            problems.append(f"{where}.status: must be one of {', '.join(TODO_STATUSES)}")
        elif text:
            items.append(TodoItem.model_validate({"content": text, "status": status}))
    active = sum(1 for item in items if item.status == "in_progress")
    if not allow_parallel_in_progress and active > 1:
        problems.append(f"only one item may be in_progress at a time ({active} given)")
    return (items if not problems else []), problems


def summarize(items: Sequence[TodoItem]) -> str:
    """``done/total`` plus the first in-progress item, for tool results and cards."""
    done = sum(1 for item in items if item.status == "completed")
    active = [item.content for item in items if item.status == "in_progress"]
    text = f"{done}/{len(items)} completed"
    if active:
        text += f"; in progress: {active[0]}"
        if len(active) > 1:
            text += f" (+{len(active) - 1} more)"
    return text


__all__ = [
    "TODO_STATUSES",
    "TodoList",
    "empty_todo_state",
    "fold_todos",
    "normalize_todos",
    "summarize",
]
