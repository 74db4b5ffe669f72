"""What every tool is to the runtime (docs/agent.md).

A tool has a name, a JSON schema for its arguments, a concurrency answer and a ``run``. The
runtime runs a call in parallel only when ``is_concurrency_safe(args)`` returns exactly
``True``; anything else (``False``, a non-bool, an exception) makes it exclusive.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from engine.events import MessageSource


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool call may know about where it runs."""

    session_id: str
    workspace: Path
    turn_id: str
    # The source of the user message that opened the turn: authority is derived from it
    # (docs/goals.md), never from the model's arguments.
    source: MessageSource
    # Folders outside the workspace the read tools may also read (never write): the
    # session's upload inbox (engine.inbox).
    read_roots: tuple[Path, ...] = ()


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """A tool's result as the model will see it."""

    content: str
    is_error: bool = False


class Tool(Protocol):
    name: str
    description: str

    @property
    def parameters(self) -> dict[str, Any]:
        """The JSON schema of the arguments object."""
        ...

    def is_concurrency_safe(self, args: dict[str, Any]) -> object:
        """``True`` (exactly) lets the call run beside other safe calls."""
        ...

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutcome: ...
