"""The ``todo_write`` tool (docs/goals.md).

One call sends the whole list, which replaces the last one: success appends one ``todo/write``.
The ``allow_parallel_in_progress`` setting shapes both what the model is told and what is
accepted. The tool is exclusive, so two writes in one batch land in order and the second wins.
"""

from __future__ import annotations

from typing import Any

from engine.events import TodoWrite
from engine.ports import EventLog
from engine.todo.fold import TODO_STATUSES, normalize_todos, summarize
from engine.tools.base import ToolContext, ToolOutcome
from engine.tools.effects import BUILTIN

_BASE = (
    "Keep a short checklist of your own work steps for this turn. Send the COMPLETE list on "
    "every call: it replaces the previous list (an empty list clears it). Each item is "
    "{content, status} with status pending, in_progress or completed; there are no ids, "
    "partial updates or read-back. The list is not the reviewed plan and does not replace it."
)
_PARALLEL = " Several items may be in_progress when you really advance them at the same time."
_SERIAL = " At most one item may be in_progress at a time."


def todo_description(*, allow_parallel_in_progress: bool) -> str:
    """The tool description for the deployment's active-count policy."""
    return _BASE + (_PARALLEL if allow_parallel_in_progress else _SERIAL)


def todo_parameters(*, allow_parallel_in_progress: bool) -> dict[str, Any]:
    """The JSON schema of ``todo_write``'s arguments."""
    status_help = (
        "several items may be in_progress"
        if allow_parallel_in_progress
        else "at most one item may be in_progress"
    )
    return {
        "type": "object",
        "properties": {
            "todos": {
                "type": "array",
                "description": f"The whole list, in order; {status_help}.",
                "items": {
                    "type": "object",
                    "properties": {
                        "content": {"type": "string", "minLength": 1},
                        "status": {"type": "string", "enum": list(TODO_STATUSES)},
                    },
                    "required": ["content", "status"],
                    "additionalProperties": False,
                },
            }
        },
        "required": ["todos"],
        "additionalProperties": False,
    }


class TodoWriteTool:
    """``todo_write({todos})`` appending ``todo/write`` to the session log."""

    name = "todo_write"
    declaration = BUILTIN["todo_write"]

    def __init__(self, log: EventLog, *, allow_parallel_in_progress: bool = True) -> None:
        self._log = log
        self.allow_parallel_in_progress = allow_parallel_in_progress
        self.description = todo_description(allow_parallel_in_progress=allow_parallel_in_progress)
        self._parameters = todo_parameters(allow_parallel_in_progress=allow_parallel_in_progress)

    @property
    def parameters(self) -> dict[str, Any]:
        return self._parameters

    def is_concurrency_safe(self, args: dict[str, Any]) -> object:
        return False  # a snapshot write is an ordering barrier

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        items, problems = normalize_todos(
            args.get("todos"), allow_parallel_in_progress=self.allow_parallel_in_progress
        )
        if problems:
            return ToolOutcome(
                content="error: todo list rejected, nothing changed: " + "; ".join(problems),
                is_error=True,
            )
        await self._log.append(ctx.session_id, [TodoWrite(todos=items)])
        return ToolOutcome(content=f"todo list saved: {summarize(items)}")


__all__ = ["TodoWriteTool", "todo_description", "todo_parameters"]
