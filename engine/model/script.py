"""A deterministic script of model replies, for tests and the offline demo.

The scripted provider and the fake chat-completions server play the same ``Script``: each
call to ``next_reply`` returns the next step as a ``ModelReply``. A step is::

    {"text": "...", "tool_calls": [{"name": "plan", "arguments": {...}}], "expect": "..."}

all keys optional. A JSON script file is a list of steps, or ``{"steps": [...]}``.

- ``expect``: text that must appear in the newest input, i.e. a ``user`` or ``tool`` message
  after the last assistant message. When it does not, the script and the conversation have
  diverged and ``ScriptDivergence`` is raised naming the step, instead of replaying nonsense.
- Placeholders in string arguments (also inside nested lists and objects) are resolved against
  the conversation: ``{plan_md}`` is the absolute POSIX path ending in ``.md`` that the most
  recent ``plan`` tool result mentioned (a design ``plan init`` returns it). Other braces are
  left alone, so code in arguments needs no escaping. ``{upload}`` is the saved path of the
  newest file the owner sent (the "file saved: ..." line of a user message). An unresolvable
  placeholder is a ``ScriptDivergence``.
- ``raw_arguments`` on a call (tests only) sends that text instead of the JSON of
  ``arguments``; the reply carries ``arguments={}`` and the raw text, like invalid JSON from a
  real model.
- Tool-call ids are ``call_<step>_<n>`` (1-based step, 0-based call), unique in a conversation.
- When ``next_reply`` is told which tools the request offered, a step calling any other tool
  is a ``ScriptDivergence`` too.
- When the steps run out, every further reply is the plain text ``(script finished)``.

docs/providers.md describes the format for script authors.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine.model.types import ModelError, ModelReply, ModelToolCall
from engine.text import clip

FINISHED_TEXT = "(script finished)"

# An absolute POSIX path ending in .md, stopped by whitespace, quotes or backticks.
_MD_PATH = re.compile(r"(/[^\s'\"`<>]*\.md)(?![A-Za-z0-9_])")


class ScriptError(ModelError):
    """A script file that does not load (bad JSON, unknown keys, wrong types)."""


class ScriptDivergence(ModelError):
    """The conversation is not the one the script was written for; the message says where."""


@dataclass(frozen=True, slots=True)
class ScriptedCall:
    """One tool call a step makes; ``raw_arguments`` (tests only) overrides the JSON text."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    raw_arguments: str | None = None


@dataclass(frozen=True, slots=True)
class ScriptStep:
    """One scripted assistant reply: text, tool calls, and the input it expects."""

    text: str = ""
    tool_calls: tuple[ScriptedCall, ...] = ()
    expect: str | None = None


def say(text: str, *, expect: str | None = None) -> ScriptStep:
    """A step that replies with plain text (ends the agent's turn)."""
    return ScriptStep(text=text, expect=expect)


def call(
    name: str,
    arguments: Mapping[str, Any] | None = None,
    *,
    text: str = "",
    expect: str | None = None,
) -> ScriptStep:
    """A step that makes one tool call (and optionally says ``text`` alongside)."""
    return ScriptStep(
        text=text, tool_calls=(ScriptedCall(name, dict(arguments or {})),), expect=expect
    )


class _CallModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    raw_arguments: str | None = None


class _StepModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = ""
    tool_calls: list[_CallModel] = Field(default_factory=list)
    expect: str | None = None


class _ScriptModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    steps: list[_StepModel]


Resolver = Callable[[Sequence[Mapping[str, Any]]], str | None]


class Script:
    """A cursor over scripted steps; ``next_reply`` advances it. Not safe to share between runs."""

    def __init__(self, steps: Sequence[ScriptStep]) -> None:
        self.steps: tuple[ScriptStep, ...] = tuple(steps)
        self.position = 0  # index of the next step to play

    @classmethod
    def from_data(cls, data: object) -> Script:
        """Build from parsed JSON (a list of steps or ``{"steps": [...]}``); ScriptError if bad."""
        wrapped = {"steps": data} if isinstance(data, list) else data
        try:
            parsed = _ScriptModel.model_validate(wrapped)
        except ValidationError as exc:
            where = "; ".join(
                f"{'.'.join(str(part) for part in error['loc'])}: {error['msg']}"
                for error in exc.errors()
            )
            raise ScriptError(f"invalid script: {where}") from None
        return cls(
            [
                ScriptStep(
                    text=step.text,
                    tool_calls=tuple(
                        ScriptedCall(c.name, c.arguments, c.raw_arguments) for c in step.tool_calls
                    ),
                    expect=step.expect,
                )
                for step in parsed.steps
            ]
        )

    @classmethod
    def load(cls, path: Path) -> Script:
        """Read a JSON script file; ScriptError names the file when it does not load."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ScriptError(f"cannot load script {path}: {exc}") from exc
        try:
            return cls.from_data(data)
        except ScriptError as exc:
            raise ScriptError(f"{path}: {exc}") from exc

    @property
    def finished(self) -> bool:
        """True once every step has been played."""
        return self.position >= len(self.steps)

    def next_reply(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        offered: Collection[str] | None = None,
    ) -> ModelReply:
        """Play the next step against ``messages``; raises ScriptDivergence when they disagree.

        ``offered``, when given, is the tool names the request offered: a step calling any
        other tool diverges (a real model cannot call a tool it was not offered). The cursor
        advances only when the step is played.
        """
        if self.finished:
            return ModelReply(text=FINISHED_TEXT)
        number = self.position + 1
        step = self.steps[self.position]
        if step.expect is not None:
            _check_expect(step.expect, messages, number=number, total=len(self.steps))
        if offered is not None:
            missing = [c.name for c in step.tool_calls if c.name not in offered]
            if missing:
                raise ScriptDivergence(
                    f"script step {number} of {len(self.steps)} calls {missing}, but the request "
                    f"offered only {sorted(offered)}"
                )
        calls = tuple(
            _play_call(scripted, messages, call_id=f"call_{number}_{index}", number=number)
            for index, scripted in enumerate(step.tool_calls)
        )
        self.position += 1
        return ModelReply(text=step.text, tool_calls=calls)


def plan_md_path(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """The absolute ``.md`` path the most recent ``plan`` tool result mentions, or None."""
    plan_call_ids: set[str] = set()
    for message in messages:
        if message.get("role") == "assistant":
            for tool_call in message.get("tool_calls") or ():
                function = tool_call.get("function") or {}
                if function.get("name") == "plan":
                    plan_call_ids.add(str(tool_call.get("id")))
    for message in reversed(messages):
        if message.get("role") == "tool" and message.get("tool_call_id") in plan_call_ids:
            found = _MD_PATH.findall(content_text(message.get("content")))
            if found:
                return str(found[-1])
    return None


# The read-only path of a file the owner sent (engine.inbox.attachment_line says it).
_UPLOAD_PATH = re.compile(r'file saved: "([^"]+)"')


def upload_path(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """The saved path of the newest file the owner sent (a ``user`` message says it)."""
    for message in reversed(messages):
        if message.get("role") == "user":
            found = _UPLOAD_PATH.findall(content_text(message.get("content")))
            if found:
                return str(found[-1])
    return None


_PLACEHOLDERS: dict[str, Resolver] = {"plan_md": plan_md_path, "upload": upload_path}
_PLACEHOLDER = re.compile(r"\{(" + "|".join(_PLACEHOLDERS) + r")\}")


def content_text(content: object) -> str:
    """The text of a message's content, whether a string or a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return ""


def _newest_input(messages: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The user and tool messages after the last assistant message."""
    tail: list[Mapping[str, Any]] = []
    for message in reversed(messages):
        if message.get("role") == "assistant":
            break
        if message.get("role") in ("user", "tool"):
            tail.append(message)
    tail.reverse()
    return tail


def _check_expect(
    expect: str, messages: Sequence[Mapping[str, Any]], *, number: int, total: int
) -> None:
    newest = _newest_input(messages)
    texts = [content_text(m.get("content")) for m in newest]
    if any(expect in text for text in texts):
        return
    shown = clip(" | ".join(texts), 400)
    raise ScriptDivergence(
        f"script step {number} of {total} expected {expect!r} in the last user/tool message, "
        f"but the conversation has: {shown!r}"
    )


def _play_call(
    scripted: ScriptedCall, messages: Sequence[Mapping[str, Any]], *, call_id: str, number: int
) -> ModelToolCall:
    if scripted.raw_arguments is not None:
        return ModelToolCall(
            id=call_id, name=scripted.name, arguments={}, raw_arguments=scripted.raw_arguments
        )
    cache: dict[str, str] = {}

    def resolve(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in cache:
            value = _PLACEHOLDERS[name](messages)
            if value is None:
                raise ScriptDivergence(
                    f"script step {number}: placeholder {{{name}}} in a {scripted.name!r} call "
                    "has no value yet (no earlier tool result provides it)"
                )
            cache[name] = value
        return cache[name]

    return ModelToolCall(
        id=call_id, name=scripted.name, arguments=_substitute(scripted.arguments, resolve)
    )


def _substitute(value: Any, resolve: Callable[[re.Match[str]], str]) -> Any:
    if isinstance(value, str):
        return _PLACEHOLDER.sub(resolve, value)
    if isinstance(value, list):
        return [_substitute(item, resolve) for item in value]
    if isinstance(value, dict):
        return {key: _substitute(item, resolve) for key, item in value.items()}
    return value
