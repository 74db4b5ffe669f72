"""The context builder as it was before it became incremental (commit f44821b), kept verbatim
as the oracle the incremental one (``TurnSplitter``, ``assemble_messages``) is tested against."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.agent.settings import AgentSettings
from engine.events import (
    AssistantMessage,
    FeedbackSource,
    GoalRoundSource,
    SeedSource,
    SessionEvent,
    ToolCall,
    ToolResult,
    TurnEnd,
    TurnStart,
    UserMessage,
)
from engine.recovery import INTERRUPTED_TOOL_TEXT

ELIDED_TEXT = "[older tool result left out to fit the context budget]"

Message = dict[str, Any]


@dataclass(slots=True)
class _Turn:
    """The model-visible messages of one turn, plus what the summary needs."""

    messages: list[Message] = field(default_factory=list)
    user_text: str = ""
    last_answer: str = ""
    tools: dict[str, int] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return sum(_size(m) for m in self.messages)


def _size(message: Message) -> int:
    size = len(str(message.get("content") or ""))
    for call in message.get("tool_calls") or ():
        size += len(call["function"]["arguments"]) + len(call["function"]["name"])
    return size


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[tool result cut: {len(text) - limit} more characters not shown]"


def _user_text(event: UserMessage, previous_end: TurnEnd | None) -> str:
    text = event.text
    source = event.source
    if isinstance(source, FeedbackSource):
        text = f"[plan feedback from the owner]\n{text}"
    elif isinstance(source, SeedSource):
        text = f"[plan approved]\n{text}"
    elif isinstance(source, GoalRoundSource):
        pass  # the driver's round prompt already says what it is
    if previous_end is not None and previous_end.outcome != "completed":
        why = previous_end.outcome.replace("_", " ")
        text = f"[note: the previous turn ended early ({why})]\n\n{text}"
    return text


def _close_calls(turn: _Turn, open_calls: dict[str, ToolCall]) -> None:
    for call in open_calls.values():
        turn.messages.append(
            {"role": "tool", "tool_call_id": call.call_id, "content": INTERRUPTED_TOOL_TEXT}
        )
    open_calls.clear()


def split_turns(events: Sequence[SessionEvent], *, result_cap: int) -> list[_Turn]:
    """The log as turns of chat messages; events outside the model surface are skipped."""
    turns: list[_Turn] = []
    current: _Turn | None = None
    open_calls: dict[str, ToolCall] = {}
    last_end: TurnEnd | None = None
    for event in events:
        if isinstance(event, TurnStart):
            if current is not None:
                _close_calls(current, open_calls)
            current = _Turn()
            turns.append(current)
        elif isinstance(event, TurnEnd):
            if current is not None:
                _close_calls(current, open_calls)
            last_end = event
        elif isinstance(event, UserMessage):
            if current is None:  # a message logged outside a turn (older logs); keep it
                current = _Turn()
                turns.append(current)
            _close_calls(current, open_calls)
            text = _user_text(event, last_end)
            last_end = None
            current.user_text = current.user_text or event.text
            current.messages.append({"role": "user", "content": text})
        elif current is None:
            continue
        elif isinstance(event, AssistantMessage):
            _close_calls(current, open_calls)
            current.messages.append({"role": "assistant", "content": event.text})
            if event.text:
                current.last_answer = event.text
        elif isinstance(event, ToolCall):
            last = current.messages[-1] if current.messages else None
            if last is None or last["role"] != "assistant" or _has_results_after(current):
                last = {"role": "assistant", "content": ""}
                current.messages.append(last)
            last.setdefault("tool_calls", []).append(
                {
                    "id": event.call_id,
                    "type": "function",
                    "function": {
                        "name": event.name,
                        "arguments": json.dumps(event.arguments, ensure_ascii=False),
                    },
                }
            )
            open_calls[event.call_id] = event
            current.tools[event.name] = current.tools.get(event.name, 0) + 1
        elif isinstance(event, ToolResult):
            if open_calls.pop(event.call_id, None) is None:
                continue  # a result with no call in view would be refused by the server
            current.messages.append(
                {
                    "role": "tool",
                    "tool_call_id": event.call_id,
                    "content": _cut(event.content, result_cap),
                }
            )
    if current is not None:
        _close_calls(current, open_calls)
    for turn in turns:
        for message in turn.messages:
            # Servers reject an assistant message with neither content nor tool calls.
            if message["role"] == "assistant" and not message.get("tool_calls"):
                message["content"] = message["content"] or "(no text)"
            if message["role"] == "assistant" and message.get("tool_calls"):
                message["content"] = message["content"] or None
    return turns


def _has_results_after(turn: _Turn) -> bool:
    return bool(turn.messages) and turn.messages[-1]["role"] == "tool"


def summarize(turns: Sequence[_Turn], *, budget_chars: int) -> str:
    """The extractive summary of ``turns``: one line each, newest kept when over budget."""
    lines: list[str] = []
    for turn in turns:
        parts = [f"- user: {_clip(turn.user_text, 160)}"]
        if turn.tools:
            parts.append("tools: " + ", ".join(f"{n} x{c}" for n, c in sorted(turn.tools.items())))
        if turn.last_answer:
            parts.append(f"agent: {_clip(turn.last_answer, 200)}")
        lines.append(" | ".join(parts))
    kept: list[str] = []
    used = 0
    for line in reversed(lines):
        if used + len(line) + 1 > budget_chars:
            break
        kept.append(line)
        used += len(line) + 1
    kept.reverse()
    omitted = len(lines) - len(kept)
    head = ["## Summary of earlier turns (extractive; details are in the files and the log)"]
    if omitted:
        head.append(f"({omitted} earlier turns not shown)")
    return "\n".join(head + kept)


def _clip(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def build_messages(
    events: Sequence[SessionEvent], *, system_prompt: str, settings: AgentSettings
) -> list[Message]:
    """The chat messages for the next model call.

    Recent turns are kept verbatim while they fit ``settings.context_budget_chars`` (the
    newest turn always stays; if it alone is over budget its oldest tool results are elided);
    the older turns become the summary inside the system message.
    """
    turns = split_turns(events, result_cap=settings.tool_result_cap_chars)
    budget = settings.context_budget_chars
    kept: list[_Turn] = []
    used = 0
    for turn in reversed(turns):
        if kept and used + turn.size > budget:
            break
        kept.append(turn)
        used += turn.size
    kept.reverse()
    older = turns[: len(turns) - len(kept)]
    if kept and used > budget:
        _elide_results(kept[0], over=used - budget)
    system = system_prompt
    if older:
        system += "\n\n" + summarize(older, budget_chars=settings.summary_budget_chars)
    messages: list[Message] = [{"role": "system", "content": system}]
    for turn in kept:
        messages.extend(turn.messages)
    return messages


def _elide_results(turn: _Turn, *, over: int) -> None:
    """Replace the turn's oldest tool results (never the last one) until ``over`` is saved."""
    tool_messages = [m for m in turn.messages if m["role"] == "tool"][:-1]
    for message in tool_messages:
        if over <= 0:
            return
        saved = len(message["content"]) - len(ELIDED_TEXT)
        if saved > 0:
            message["content"] = ELIDED_TEXT
            over -= saved


__all__ = ["build_messages"]
