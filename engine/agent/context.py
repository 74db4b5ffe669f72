"""The messages sent to the model, rebuilt from the log for every step (docs/agent.md).

Rebuilt, not re-read: a :class:`TurnSplitter` converts each event once, and the agent keeps
one per session (``engine.agent.history``), so a step converts only the events logged since
the step before; :func:`build_messages` is the same over a whole log at once.

Layout (OpenAI chat format): one ``system`` message (the prompt sections, the state section,
and, once the log is over budget, a summary of older turns), then the recent turns verbatim.

The summary is extractive and deterministic: per older turn, one line with the first words of
the user's message, the tools it used (name x count) and the first words of the agent's last
answer. It never carries plan, goal or todo state: those come from the projections in the state
section on every step. The budget counts characters, not tokens.

Invariants the model server relies on: every assistant ``tool_calls`` entry is followed by its
``tool`` result (a call without one gets a synthetic interrupted result, a result without a
call is dropped), and a tool result longer than the cap is cut with a note.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.agent.settings import AgentSettings
from engine.events import (
    AssistantMessage,
    Attachment,
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
from engine.inbox import attachment_line
from engine.recovery import INTERRUPTED_TOOL_TEXT
from engine.text import clip

ELIDED_TEXT = "[older tool result left out to fit the context budget]"
# What an image part counts against the character budget (its bytes are not text).
IMAGE_CHARS = 3_000
NO_VISION_TEXT = (
    "(this file is an image; the model in use cannot see images, so its content is not "
    "shown to you: ask the owner what it shows if that matters)"
)
IMAGE_GONE_TEXT = "(the image could not be read any more: {reason})"

Message = dict[str, Any]


@dataclass(slots=True)
class Turn:
    """The model-visible messages of one turn, plus what the summary needs."""

    messages: list[Message] = field(default_factory=list)
    user_text: str = ""
    last_answer: str = ""
    tools: dict[str, int] = field(default_factory=dict)
    # Set once the turn can no longer change (a later turn has started): its size is then
    # counted once, not on every step.
    closed_size: int | None = field(default=None, compare=False)

    @property
    def size(self) -> int:
        if self.closed_size is not None:
            return self.closed_size
        return sum(_size(m) for m in self.messages)


def _size(message: Message) -> int:
    content = message.get("content") or ""
    if isinstance(content, list):
        # An image counts as a fixed share of the budget, not as its base64 text.
        size = sum(len(str(p.get("text", ""))) or IMAGE_CHARS for p in content)
    else:
        size = len(str(content))
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


def _user_content(text: str, attachments: Sequence[Attachment], *, vision: bool) -> Any:
    """The user message's content: its text and one line per saved file (a small text file
    inlined); with ``vision``, an image attachment as an OpenAI image part read from disk."""
    if not attachments:
        return text
    lines = [text]
    images: list[str] = []
    for attachment in attachments:
        lines.append(attachment_line(attachment))
        if attachment.text is not None:
            lines.append(
                f"--- {attachment.name} ---\n{attachment.text}\n--- end of {attachment.name} ---"
            )
        if attachment.kind != "image":
            continue
        if not vision:
            lines.append(NO_VISION_TEXT)
            continue
        try:
            images.append(image_data_url(attachment))
        except OSError as exc:
            lines.append(IMAGE_GONE_TEXT.format(reason=exc.strerror or type(exc).__name__))
    body = "\n".join(lines)
    if not images:
        return body
    parts: list[dict[str, Any]] = [{"type": "text", "text": body}]
    parts.extend({"type": "image_url", "image_url": {"url": url}} for url in images)
    return parts


def image_data_url(attachment: Attachment) -> str:
    """The saved image as a ``data:`` URL (OSError when it cannot be read)."""
    with open(attachment.path, "rb") as handle:
        data = handle.read()
    mime = attachment.mime if attachment.mime.startswith("image/") else "image/jpeg"
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def _close_calls(turn: Turn, open_calls: dict[str, ToolCall]) -> None:
    for call in open_calls.values():
        turn.messages.append(
            {"role": "tool", "tool_call_id": call.call_id, "content": INTERRUPTED_TOOL_TEXT}
        )
    open_calls.clear()


def _fix_up(messages: list[Message]) -> None:
    for message in messages:
        # Servers reject an assistant message with neither content nor tool calls.
        if message["role"] == "assistant" and not message.get("tool_calls"):
            message["content"] = message["content"] or "(no text)"
        if message["role"] == "assistant" and message.get("tool_calls"):
            message["content"] = message["content"] or None


class TurnSplitter:
    """:func:`split_turns`, fed a log piece by piece: each step converts only the new events.

    Only the newest turn can still change (every event lands in it); an older turn is closed
    and fixed up once, when the next one starts, and :meth:`turns` returns it as is. The newest
    turn is returned as a copy with its open calls closed, so feeding more events later stays
    exact. Callers must not change the turns they get.
    """

    def __init__(self, *, result_cap: int, vision: bool = False) -> None:
        self.result_cap = result_cap
        self.vision = vision
        self._turns: list[Turn] = []
        self._open_calls: dict[str, ToolCall] = {}
        self._last_end: TurnEnd | None = None

    def _start_turn(self) -> Turn:
        if self._turns:
            previous = self._turns[-1]
            _close_calls(previous, self._open_calls)
            _fix_up(previous.messages)
            previous.closed_size = previous.size
        turn = Turn()
        self._turns.append(turn)
        return turn

    def feed(self, events: Iterable[SessionEvent]) -> None:
        """Convert the next events of the log; events outside the model surface are skipped."""
        open_calls = self._open_calls
        current = self._turns[-1] if self._turns else None
        for event in events:
            if isinstance(event, TurnStart):
                current = self._start_turn()
            elif isinstance(event, TurnEnd):
                if current is not None:
                    _close_calls(current, open_calls)
                self._last_end = event
            elif isinstance(event, UserMessage):
                if current is None:  # a message logged outside a turn (older logs); keep it
                    current = self._start_turn()
                _close_calls(current, open_calls)
                text = _user_text(event, self._last_end)
                self._last_end = None
                current.user_text = current.user_text or event.text
                content = _user_content(text, event.attachments, vision=self.vision)
                current.messages.append({"role": "user", "content": content})
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
                        "content": _cut(event.content, self.result_cap),
                    }
                )

    def turns(self) -> list[Turn]:
        """The turns so far, as :func:`split_turns` gives them for the events fed."""
        if not self._turns:
            return []
        newest = self._turns[-1]
        copy = Turn(
            messages=[_copy_message(m) for m in newest.messages],
            user_text=newest.user_text,
            last_answer=newest.last_answer,
            tools=dict(newest.tools),
        )
        _close_calls(copy, dict(self._open_calls))
        _fix_up(copy.messages)
        return [*self._turns[:-1], copy]


def _copy_message(message: Message) -> Message:
    copy = dict(message)
    if "tool_calls" in copy:
        copy["tool_calls"] = list(copy["tool_calls"])
    return copy


def split_turns(
    events: Sequence[SessionEvent], *, result_cap: int, vision: bool = False
) -> list[Turn]:
    """The log as turns of chat messages; events outside the model surface are skipped."""
    splitter = TurnSplitter(result_cap=result_cap, vision=vision)
    splitter.feed(events)
    return splitter.turns()


def _has_results_after(turn: Turn) -> bool:
    return bool(turn.messages) and turn.messages[-1]["role"] == "tool"


def _summary_line(turn: Turn) -> str:
    parts = [f"- user: {clip(turn.user_text, 160, one_line=True)}"]
    if turn.tools:
        parts.append("tools: " + ", ".join(f"{n} x{c}" for n, c in sorted(turn.tools.items())))
    if turn.last_answer:
        parts.append(f"agent: {clip(turn.last_answer, 200, one_line=True)}")
    return " | ".join(parts)


def summarize(turns: Sequence[Turn], *, budget_chars: int) -> str:
    """The extractive summary of ``turns``: one line each, newest kept when over budget."""
    # Newest first, stopping at the first line that does not fit: a long session's older
    # turns are never formatted.
    kept: list[str] = []
    used = 0
    for turn in reversed(turns):
        line = _summary_line(turn)
        if used + len(line) + 1 > budget_chars:
            break
        kept.append(line)
        used += len(line) + 1
    kept.reverse()
    omitted = len(turns) - len(kept)
    head = ["## Summary of earlier turns (extractive; details are in the files and the log)"]
    if omitted:
        head.append(f"({omitted} earlier turns not shown)")
    return "\n".join(head + kept)


def build_messages(
    events: Sequence[SessionEvent], *, system_prompt: str, settings: AgentSettings
) -> list[Message]:
    """The chat messages for the next model call.

    Recent turns are kept verbatim while they fit ``settings.context_budget_chars`` (the
    newest turn always stays; if it alone is over budget its oldest tool results are elided);
    the older turns become the summary inside the system message.
    """
    turns = split_turns(events, result_cap=settings.tool_result_cap_chars, vision=settings.vision)
    return assemble_messages(turns, system_prompt=system_prompt, settings=settings)


def assemble_messages(
    turns: Sequence[Turn], *, system_prompt: str, settings: AgentSettings
) -> list[Message]:
    """:func:`build_messages` from turns already split (:meth:`TurnSplitter.turns`).

    The messages returned are copies. Eliding may change the newest turn's messages, which
    ``TurnSplitter.turns`` hands out as a fresh copy on every call: older turns are never
    changed, so a splitter's cache survives.
    """
    budget = settings.context_budget_chars
    kept: list[Turn] = []
    used = 0
    for turn in reversed(turns):
        if kept and used + turn.size > budget:
            break
        kept.append(turn)
        used += turn.size
    kept.reverse()
    older = turns[: len(turns) - len(kept)]
    if kept and used > budget:
        # Over budget only when the newest turn alone is kept (an older one is kept only if it
        # fits), and a splitter's newest turn is a fresh copy: eliding in it changes no cache.
        _elide_results(kept[0], over=used - budget)
    system = system_prompt
    if older:
        system += "\n\n" + summarize(older, budget_chars=settings.summary_budget_chars)
    messages: list[Message] = [{"role": "system", "content": system}]
    for turn in kept:
        messages.extend(_copy_message(m) for m in turn.messages)
    return messages


def _elide_results(turn: Turn, *, over: int) -> None:
    """Replace the turn's oldest tool results (never the last one) until ``over`` is saved."""
    tool_messages = [m for m in turn.messages if m["role"] == "tool"][:-1]
    for message in tool_messages:
        if over <= 0:
            return
        saved = len(message["content"]) - len(ELIDED_TEXT)
        if saved > 0:
            message["content"] = ELIDED_TEXT
            over -= saved


__all__ = [
    "ELIDED_TEXT",
    "Message",
    "Turn",
    "TurnSplitter",
    "assemble_messages",
    "build_messages",
    "split_turns",
    "summarize",
]
