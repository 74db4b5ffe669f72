"""Model-provider vocabulary: what the agent sends a model and what comes back.

Messages are in OpenAI chat-completions format (``system``/``user``/``assistant``
with ``tool_calls``/``tool`` with ``tool_call_id``); tools are OpenAI function-tool
specs. Every provider (OpenAI-compatible HTTP, scripted) speaks this vocabulary.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from engine.errors import PlangateError


@dataclass(frozen=True, slots=True)
class ModelToolCall:
    """One tool call the model asked for.

    When the model sent argument text that is not a JSON object, ``arguments`` is
    ``{}`` and ``raw_arguments`` keeps the text so the agent can tell the model.
    """

    id: str
    name: str
    arguments: dict[str, Any]
    raw_arguments: str = ""
    # Why the arguments were refused on arrival (too large, nested too deep), else "": the
    # call is then answered with this as its tool error, never run (engine.model.arguments).
    refused: str = ""


@dataclass(frozen=True, slots=True)
class ModelUsage:
    """The token counts a server reported for one call (``cached`` is part of ``prompt``)."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0


@dataclass(frozen=True, slots=True)
class ModelReply:
    """One assistant reply: text (possibly empty), the tool calls in order, and ``usage``.

    ``usage`` is ``None`` when the server reported none (the agent estimates it then).
    ``arrived_chars``: how many characters the reply came with (text, tool names and argument
    text, refused arguments included), when the provider counted them; an estimate of the
    reply is never below a quarter of it.
    """

    text: str
    tool_calls: tuple[ModelToolCall, ...] = ()
    usage: ModelUsage | None = None
    arrived_chars: int = 0


class ModelProvider(Protocol):
    """Something that completes a chat: one request, one reply."""

    async def complete(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        *,
        max_tokens: int | None = None,
    ) -> ModelReply:
        """Send the conversation and tool specs; return the assistant reply.

        ``max_tokens``: the most completion tokens the reply may use (sent to the server; the
        usage meter's reservation for this call), or no limit.

        Raises ModelError (or ModelAuthError) when no reply can be had.
        """
        ...


# Called with each new piece of the reply's text while it streams (a delta, never the whole
# text again: that would make a long answer in tiny chunks quadratic).
TextSink = Callable[[str], Awaitable[None]]


@dataclass(slots=True)
class StreamProgress:
    """What a streamed call has received so far, kept up to date while it streams: whether the
    server answered at all and how many characters (text, tool names and arguments) arrived.
    Read when the stream is cut short, to record what was paid for."""

    opened: bool = False
    chars: int = 0


@runtime_checkable
class StreamingProvider(Protocol):
    """A provider that can also stream: ``on_text`` hears each new piece of text.

    The reply returned is the same as ``complete`` would give. Cancelling the call ends the
    stream at once (the connection is closed).
    """

    async def stream(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        *,
        on_text: TextSink,
        max_tokens: int | None = None,
        progress: StreamProgress | None = None,
    ) -> ModelReply: ...


class ModelError(PlangateError):
    """The model gave no reply (unreachable, refused, malformed); the message says why."""


class ModelAuthError(ModelError):
    """The model server refused the API key."""
