"""The ``ask_user`` tool: put a question to the owner and return at once (docs/agent.md).

The question (with its options as buttons) goes to the channel; the answer arrives later as an
ordinary user message that opens a new turn. Autonomous goal rounds may not ask: nobody is
there to answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from engine.events import is_attended
from engine.tools.base import ToolContext, ToolOutcome
from engine.tools.effects import BUILTIN

ASK_SENT_TEXT = "sent to the user; end your turn and wait for the answer"
ASK_IN_ROUND_TEXT = (
    "refused: ask_user is not available in an autonomous goal round; decide with what you "
    "know, or report the goal blocked with update_goal"
)


class QuestionChannel(Protocol):
    """The part of the chat channel this tool uses (the engine's ``Channel`` has it)."""

    async def ask(self, session_id: str, question: str, options: Sequence[str]) -> None:
        """Put the question to the chat; ``options`` become buttons when not empty."""
        ...


class AskUserTool:
    """``ask_user {question, options?}``; exclusive."""

    name = "ask_user"
    declaration = BUILTIN["ask_user"]
    description = (
        "Ask the owner a question in the chat, optionally with short answer options shown as "
        "buttons. Returns at once: end your turn afterwards; the answer comes as a new message."
    )

    def __init__(self, channel: QuestionChannel, *, max_options: int = 8) -> None:
        self._channel = channel
        self._max_options = max_options

    @property
    def parameters(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {
                "question": {"type": "string"},
                "options": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["question"],
            "additionalProperties": False,
        }

    def is_concurrency_safe(self, args: dict[str, Any]) -> object:
        return False

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        if not is_attended(ctx.source):  # nobody could answer (a goal round)
            return ToolOutcome(ASK_IN_ROUND_TEXT, is_error=True)
        question = args.get("question")
        if not isinstance(question, str) or not question.strip():
            return ToolOutcome("error: question must be a non-empty string", is_error=True)
        raw_options = args.get("options") or []
        if not isinstance(raw_options, list) or not all(isinstance(o, str) for o in raw_options):
            return ToolOutcome("error: options must be a list of strings", is_error=True)
        options = [o.strip() for o in raw_options if o.strip()][: self._max_options]
        await self._channel.ask(ctx.session_id, question.strip(), options)
        return ToolOutcome(ASK_SENT_TEXT)


__all__ = ["ASK_IN_ROUND_TEXT", "ASK_SENT_TEXT", "AskUserTool"]
