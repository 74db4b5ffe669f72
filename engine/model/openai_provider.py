"""The OpenAI-compatible provider: chat completions with tools over the official openai SDK.

One adapter reaches OpenAI and every OpenAI-compatible server (vLLM, Ollama, LM Studio,
llama.cpp, OpenRouter) by its ``base_url``. The SDK's own retries are switched off and done
here instead, so the policy is ours and testable (injected sleep):

- HTTP 408, 409, 429 and 5xx, timeouts and refused connections are retried up to
  ``max_retries`` times, waiting what ``Retry-After`` (or ``retry-after-ms``) asks when the
  server says, else an exponential backoff with jitter.
- 401 and 403 raise ModelAuthError at once; any other 4xx raises ModelError with the server's
  message; a server that cannot be reached raises ModelError naming the base URL.

The API key is never logged, never put in an error message and not in ``repr``.
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import json
import logging
import random
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import urlsplit, urlunsplit

import openai

from engine.errors import ConfigError
from engine.model.arguments import (
    MAX_ARGUMENT_CHARS,
    Arguments,
    parse_arguments,
    refused_size,
)
from engine.model.types import (
    ModelAuthError,
    ModelError,
    ModelReply,
    ModelToolCall,
    ModelUsage,
    StreamProgress,
    TextSink,
)
from engine.text import clean_text, clean_value

log = logging.getLogger("plangate.model.openai_provider")

OPENAI_BASE_URL = "https://api.openai.com/v1"
# The SDK refuses to start without a key; local servers (vLLM, Ollama, llama.cpp) ignore it.
PLACEHOLDER_API_KEY = "plangate-no-key"
# A Retry-After longer than this is not waited out inside one model call.
MAX_RETRY_AFTER_S = 60.0
_RETRY_STATUSES = frozenset({408, 409, 429})
# Bounds on what a server's tool calls may grow to (a hostile server is not trusted): ids and
# names past these are cut; call indexes past the last are dropped.
MAX_ID_CHARS = 256
MAX_NAME_CHARS = 256
MAX_STREAMED_CALLS = 128
# A stream hands the event loop back this often (in chunks) even when its data is all there.
YIELD_EVERY_CHUNKS = 4

Sleep = Callable[[float], Awaitable[None]]

# The two names of the completion-token limit. Every OpenAI-compatible server reads
# ``max_tokens``; OpenAI's reasoning models refuse it and take ``max_completion_tokens``.
MAX_TOKENS = "max_tokens"
MAX_COMPLETION_TOKENS = "max_completion_tokens"
# OpenAI's reasoning families, by name (with or without a ``vendor/`` prefix, as OpenRouter
# names them): o1, o3, o4-mini, gpt-5 and their variants.
_REASONING = re.compile(r"(?:^|/)(?:o[134](?:-|$)|gpt-5)", re.IGNORECASE)
# What a server refused, learnt once per (base URL, model) while the process runs.
_LEARNT_LIMIT: dict[tuple[str, str], str] = {}


def forget_limit_field(base_url: str) -> None:
    """Forget which token-limit field the server at ``base_url`` refused: another server
    answers there now (a restarted server, a test's server on a reused port)."""
    for key in [key for key in _LEARNT_LIMIT if key[0] == base_url.rstrip("/")]:
        del _LEARNT_LIMIT[key]


# The doctor's probe: the shape of a turn's call (messages, one tool, tool_choice auto, the
# token limit), kept tiny.
_PROBE_MESSAGES = [{"role": "user", "content": "Reply with the word ok."}]
_PROBE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "noop",
            "description": "Does nothing.",
            "parameters": {"type": "object", "properties": {}},
        },
    }
]
_PROBE_TOKENS = 16


def limit_field(model: str) -> str:
    """The body field the completion-token limit goes in for ``model``, known by its name."""
    return MAX_COMPLETION_TOKENS if _REASONING.search(model) else MAX_TOKENS


class _LimitRefused(ModelError):
    """The server refused the token-limit field sent (HTTP 400 naming it)."""


class OpenAIProvider:
    """A ModelProvider for any OpenAI-compatible chat-completions server.

    ``base_url=None`` means OpenAI itself and then ``api_key`` is required (ConfigError
    otherwise); with a ``base_url`` and no key a placeholder key is sent. Call ``aclose()``
    when done with it.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        if not model:
            raise ConfigError("PLANGATE_MODEL is empty: name the model to use")
        if not api_key:
            if base_url is None:
                raise ConfigError(
                    "PLANGATE_MODEL_API_KEY is not set: the OpenAI API needs a key "
                    "(or set PLANGATE_MODEL_BASE_URL for a local server)"
                )
            api_key = PLACEHOLDER_API_KEY
        self.model = model
        self.base_url = (base_url or OPENAI_BASE_URL).rstrip("/")
        self.timeout_s = timeout_s
        self.max_retries = max(0, max_retries)
        self._backoff_s = backoff_s
        self._sleep = sleep
        # Explicit base_url and key, so the SDK never falls back to OPENAI_* variables.
        self._client = openai.AsyncOpenAI(
            api_key=api_key, base_url=self.base_url, timeout=timeout_s, max_retries=0
        )

    def __repr__(self) -> str:
        return f"OpenAIProvider(model={self.model!r}, base_url={_shown(self.base_url)!r})"

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self._client.close()

    async def complete(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        *,
        max_tokens: int | None = None,
    ) -> ModelReply:
        """One chat completion with the tools offered (``tool_choice`` auto).

        ``max_tokens`` goes in the field the model takes (:attr:`limit_field`): ``max_tokens``,
        which every OpenAI-compatible server reads, or ``max_completion_tokens`` for OpenAI's
        reasoning models; a server that refuses the one sent is asked again with the other,
        once, and that is remembered for this server and model.
        Raises ModelAuthError when the key is refused, ModelError for anything else that
        leaves no reply after the retries.
        """
        body: dict[str, Any] = {"messages": list(messages)}
        if tools:  # the API refuses an empty tools array
            body["tools"] = list(tools)
            body["tool_choice"] = "auto"
        response = await self._create(body, max_tokens=max_tokens, stream=False)
        return parse_completion(response)

    @property
    def limit_field(self) -> str:
        """The field the token limit is sent in: learnt from this server, else by name."""
        return _LEARNT_LIMIT.get((self.base_url, self.model), limit_field(self.model))

    async def _create(self, body: dict[str, Any], *, max_tokens: int | None, stream: bool) -> Any:
        """``chat.completions.create`` with the retries, the limit in the field the server
        takes (a refusal naming it switches to the other field, once)."""
        # The messages are plain JSON already. Passed as typed arguments, the SDK walks every
        # message of the context on each call, on the event loop (a second or more per call
        # late in a long turn); as ``extra_body`` they are sent as they are.
        create = cast(Callable[..., Awaitable[Any]], self._client.chat.completions.create)
        if stream:
            create = self._open_stream
        for attempt in range(2):
            sent_in = self.limit_field
            sent = dict(body)
            if max_tokens is not None:
                sent[sent_in] = max_tokens
            kwargs: dict[str, Any] = {"model": self.model, "messages": [], "extra_body": sent}
            if stream:
                kwargs["stream"] = True
            try:
                return await self._with_retries(
                    functools.partial(create, **kwargs),
                    limit=sent_in if max_tokens is not None else None,
                )
            except _LimitRefused as exc:
                if attempt:
                    raise ModelError(str(exc)) from None
                other = MAX_COMPLETION_TOKENS if sent_in == MAX_TOKENS else MAX_TOKENS
                _LEARNT_LIMIT[(self.base_url, self.model)] = other
                log.warning(
                    "plangate.model.openai_provider.limit_field server=%s model=%s refused=%s "
                    "using=%s",
                    _shown(self.base_url),
                    self.model,
                    sent_in,
                    other,
                )
        raise AssertionError("unreachable")

    async def _open_stream(self, **kwargs: Any) -> _OpenStream:
        """Open a streamed completion without the SDK's per-chunk models: its status is checked
        (and refused like any call) as the response starts; the body is read by :meth:`stream`.
        """
        opening = self._client.chat.completions.with_streaming_response.create(**kwargs)
        response = await opening.__aenter__()
        return _OpenStream(opening, response)

    async def stream(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        *,
        on_text: TextSink,
        max_tokens: int | None = None,
        progress: StreamProgress | None = None,
    ) -> ModelReply:
        """:meth:`complete`, streamed: ``on_text`` hears each new piece of text as it arrives.

        Retried like ``complete`` until the first chunk; a failure after it is a ModelError
        (the text already shown is not repeated). Usage comes from the final chunk
        (``stream_options.include_usage``). Cancelling closes the connection at once.
        ``progress`` is kept up to date (the stream opened, the characters arrived), so a
        stream cut short can still be paid for.
        """
        body: dict[str, Any] = {
            "messages": list(messages),
            "stream_options": {"include_usage": True},
        }
        if tools:
            body["tools"] = list(tools)
            body["tool_choice"] = "auto"
        opened: _OpenStream = await self._create(body, max_tokens=max_tokens, stream=True)
        if progress is not None:
            progress.opened = True
        collected = _StreamedReply(progress)
        try:
            async for chunk in _server_events(opened.response):
                added = collected.add(chunk)
                if added:
                    await on_text(added)
                collected.chunks += 1
                if collected.chunks % YIELD_EVERY_CHUNKS == 0:
                    # A fast server's chunks arrive by the thousand in one socket read, and
                    # parsing them never waits: let other chats' work run between batches.
                    await asyncio.sleep(0)
        except _StreamError as exc:
            raise ModelError(
                f"the model server at {_shown(self.base_url)} sent an error in its answer: {exc}"
            ) from None
        except (ModelError, asyncio.CancelledError):
            raise
        except Exception as exc:  # the connection broke (the HTTP client's own errors)
            raise ModelError(
                f"the model server at {_shown(self.base_url)} broke off its answer: "
                f"{type(exc).__name__}"
            ) from None
        finally:
            # On a cancel (/stop) too: the server sees the connection go.
            await opened.opening.__aexit__(None, None, None)
        return collected.reply()

    async def check(self) -> str:
        """For ``plangate doctor``: a one-line status, or ModelError saying what is wrong.

        Makes the call a turn makes (a tool offered with ``tool_choice`` auto, the token limit
        in the field turns send, learnt the same way), plain and streamed, so the doctor fails
        where turns would.
        A failure names the models the server lists, when it lists others.
        """
        where = _shown(self.base_url)
        try:
            await self.complete(_PROBE_MESSAGES, _PROBE_TOOLS, max_tokens=_PROBE_TOKENS)
            # Private chats stream the same call (the live draft): a server that cannot
            # would fail every turn there.
            await self.stream(
                _PROBE_MESSAGES, _PROBE_TOOLS, on_text=_ignore_text, max_tokens=_PROBE_TOKENS
            )
        except ModelAuthError:
            raise
        except ModelError as exc:
            try:
                page = await self._with_retries(self._client.models.list)
                listed = [str(getattr(m, "id", "")) for m in getattr(page, "data", None) or ()]
            except ModelError:
                listed = []
            if not listed or self.model in listed:
                raise
            shown = ", ".join(listed[:10]) + (", ..." if len(listed) > 10 else "")
            raise ModelError(f"{exc} (the server lists: {shown})") from None
        return (
            f"model server {where}: ok, model {self.model!r} answers with tools, plain and "
            f"streamed ({self.limit_field})"
        )

    async def _with_retries(
        self, send: Callable[[], Awaitable[Any]], *, limit: str | None = None
    ) -> Any:
        """``send()`` with our retry policy; ``limit``: the token-limit field sent, so a 400
        naming it is told apart (:class:`_LimitRefused`)."""
        attempt = 0
        while True:
            try:
                return await send()
            except openai.APIStatusError as exc:
                status = exc.status_code
                if status in (401, 403):
                    raise ModelAuthError(
                        "the model server refused the API key (PLANGATE_MODEL_API_KEY): "
                        f"HTTP {status} from {_shown(self.base_url)}"
                    ) from None
                if limit is not None and status == 400 and _names_field(exc, limit):
                    raise _LimitRefused(self._refusal(exc)) from None
                if status not in _RETRY_STATUSES and status < 500:
                    raise ModelError(self._refusal(exc)) from None
                retry_after = _retry_after_s(exc.response.headers)
                if retry_after is not None and retry_after > MAX_RETRY_AFTER_S:
                    raise ModelError(
                        f"the model server at {_shown(self.base_url)} is busy (HTTP {status}) "
                        f"and asks to wait {retry_after:.0f} s; try again later"
                    ) from None
                if attempt >= self.max_retries:
                    raise ModelError(
                        f"the model server at {_shown(self.base_url)} kept failing "
                        f"(HTTP {status}: {_server_message(exc)}) after {attempt + 1} attempts"
                    ) from None
                delay = retry_after if retry_after is not None else self._backoff(attempt)
                log.warning(
                    "plangate.model.openai_provider.retry status=%s attempt=%d delay_s=%.2f",
                    status,
                    attempt + 1,
                    delay,
                )
            except openai.APIConnectionError as exc:
                if attempt >= self.max_retries:
                    raise ModelError(self._unreachable(exc, attempts=attempt + 1)) from None
                delay = self._backoff(attempt)
                log.warning(
                    "plangate.model.openai_provider.retry error=%s attempt=%d delay_s=%.2f",
                    type(exc).__name__,
                    attempt + 1,
                    delay,
                )
            except openai.OpenAIError as exc:
                # Anything else from the SDK (a malformed response body, ...): no retry.
                raise ModelError(
                    f"the model server at {_shown(self.base_url)} gave an unusable answer: "
                    f"{type(exc).__name__}: {exc}"
                ) from None
            except (ValueError, RecursionError) as exc:
                # A body labelled JSON that does not parse, or nests too deep to parse: the
                # SDK lets the parser's own error through.
                raise ModelError(
                    f"the model server at {_shown(self.base_url)} gave an unusable answer: "
                    f"{type(exc).__name__}"
                ) from None
            attempt += 1
            await self._sleep(delay)

    def _backoff(self, attempt: int) -> float:
        base: float = min(self._backoff_s * (2**attempt), 8.0)
        # Jitter spreads retries of several sessions hitting one server.
        return base * random.uniform(0.75, 1.0)

    def _unreachable(self, exc: openai.APIConnectionError, *, attempts: int) -> str:
        where = _shown(self.base_url)
        if isinstance(exc, openai.APITimeoutError):
            return (
                f"the model server at {where} did not answer within {self.timeout_s:g} s "
                f"({attempts} attempts); check PLANGATE_MODEL_BASE_URL and that it is running"
            )
        cause = exc.__cause__ or exc.__context__
        detail = f": {type(cause).__name__}" if cause is not None else ""
        return (
            f"cannot reach the model server at {where}{detail} ({attempts} attempts); "
            "check PLANGATE_MODEL_BASE_URL and that the server is running"
        )

    def _refusal(self, exc: openai.APIStatusError) -> str:
        where = _shown(self.base_url)
        path = urlsplit(self.base_url or "").path.rstrip("/")
        if exc.status_code == 404 and self.base_url and not re.search(r"/v\d+[a-z]*$", path):
            # Ollama, vLLM and LM Studio serve the API under /v1; a URL without it 404s on
            # every path, whatever the model's name.
            return (
                f"the model server at {where} answered HTTP 404: its URL usually ends in /v1 "
                f"(try PLANGATE_MODEL_BASE_URL={self.base_url.rstrip('/')}/v1)"
            )
        if exc.status_code == 404:
            return (
                f"the model server at {where} answered HTTP 404 for model {self.model!r} "
                f"(check PLANGATE_MODEL and PLANGATE_MODEL_BASE_URL): {_server_message(exc)}"
            )
        return (
            f"the model server at {where} rejected the request "
            f"(HTTP {exc.status_code}): {_server_message(exc)}"
        )


def parse_completion(response: Any) -> ModelReply:
    """Turn an SDK ChatCompletion into a ModelReply; ModelError when it has no choice.

    Argument text that is not a JSON object becomes ``arguments={}`` with the text kept in
    ``raw_arguments``; a missing call id gets a stable one so the conversation stays valid.
    Text is cleaned of lone surrogates (``engine.text``): the event log could not store it.
    """
    choices = getattr(response, "choices", None)
    if not choices:
        raise ModelError("the model server returned no choices")
    message = choices[0].message
    calls: list[ModelToolCall] = []
    text = message.content or ""
    arrived = len(text)
    for index, tool_call in enumerate(getattr(message, "tool_calls", None) or ()):
        function = getattr(tool_call, "function", None)
        if function is None:  # a non-function (custom) tool call: we offer none
            continue
        raw, name = function.arguments or "", function.name or ""
        arrived += len(raw) + len(name)
        calls.append(_tool_call(tool_call.id or f"call_{index}", name, parse_arguments(raw)))
    return ModelReply(
        text=clean_text(text),
        tool_calls=tuple(calls),
        usage=parse_usage(response),
        arrived_chars=arrived,
    )


@dataclass(frozen=True, slots=True)
class _OpenStream:
    """A streamed completion under way: the SDK's context (to close it) and its response."""

    opening: Any
    response: Any


class _StreamError(Exception):
    """The server sent an error event in the middle of a stream."""


async def _server_events(response: Any) -> AsyncIterator[dict[str, Any]]:
    """The JSON objects of a server-sent-events body (``data:`` lines, joined until a blank
    line), up to ``[DONE]``. One ``json.loads`` per event: the SDK's typed chunk models cost
    a hundred times that per chunk, which a long answer in tiny chunks pays thousands of
    times. An ``error`` event, or data carrying ``error``, raises :class:`_StreamError`."""
    data: list[str] = []
    event = ""
    done = False
    async for line in response.iter_lines():
        if line:
            field_name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field_name == "data":
                data.append(value)
            elif field_name == "event":
                event = value
            continue
        if not data or done:
            data, event = [], ""
            continue
        text = "\n".join(data)
        data = []
        if text.startswith("[DONE]"):
            done = True  # read on to the end of the body: the connection is then reusable
            continue
        try:
            parsed = json.loads(text)
        except (ValueError, RecursionError):
            raise _StreamError(f"a chunk that is not JSON: {text[:80]!r}") from None
        if event == "error" or (isinstance(parsed, dict) and parsed.get("error")):
            error = parsed.get("error") if isinstance(parsed, dict) else None
            message = error.get("message") if isinstance(error, dict) else None
            raise _StreamError(str(message or error or "an error event")[:500])
        event = ""
        if isinstance(parsed, dict):
            yield parsed


def _get(value: Any, name: str) -> Any:
    """``value[name]`` of a parsed chunk, or the attribute of an SDK object."""
    if isinstance(value, dict):
        return value.get(name)
    return getattr(value, name, None)


@dataclass(slots=True)
class _StreamedCall:
    """One tool call's pieces as they stream (by the call's index)."""

    id: str = ""
    name: list[str] = field(default_factory=list)
    name_chars: int = 0
    arguments: list[str] = field(default_factory=list)
    argument_chars: int = 0


class _StreamedReply:
    """The chunks of one streamed completion, put back together.

    Work is linear in the answer's length whatever the chunk size: each piece is cleaned and
    kept once, and joined once at the end (re-joining or re-scanning the text so far on every
    chunk made a long answer in tiny chunks quadratic, and stalled every chat on the loop).
    What a hostile server may grow is bounded: a call's arguments stop being kept past
    :data:`MAX_ARGUMENT_CHARS` (the call is refused), its name past :data:`MAX_NAME_CHARS`.
    """

    def __init__(self, progress: StreamProgress | None = None) -> None:
        self._text: list[str] = []
        # A high surrogate ending one piece may pair with a low one starting the next.
        self._carry = ""
        self._calls: dict[int, _StreamedCall] = {}
        self._usage: ModelUsage | None = None
        self._progress = progress if progress is not None else StreamProgress()
        self.chunks = 0

    def add(self, chunk: Any) -> str:
        """Take one chunk; returns the text it added (cleaned; "" when none)."""
        usage = parse_usage(chunk)
        if usage is not None:
            self._usage = usage
        added = ""
        for choice in _get(chunk, "choices") or ():
            delta = _get(choice, "delta")
            if delta is None:
                continue
            piece = _get(delta, "content")
            if isinstance(piece, str) and piece:
                self._progress.chars += len(piece)
                piece = self._carry + piece
                self._carry = ""
                if "\ud800" <= piece[-1] <= "\udbff":
                    piece, self._carry = piece[:-1], piece[-1]
                piece = clean_text(piece)
                if piece:
                    self._text.append(piece)
                    added += piece
            for call in _get(delta, "tool_calls") or ():
                self._add_call(call)
        return added

    def _add_call(self, call: Any) -> None:
        index = _get(call, "index") or 0
        index = index if isinstance(index, int) and 0 <= index < MAX_STREAMED_CALLS else -1
        if index < 0:
            return  # an index no real stream uses: nothing kept
        slot = self._calls.setdefault(index, _StreamedCall())
        call_id = _get(call, "id")
        if isinstance(call_id, str) and call_id:
            slot.id = call_id[:MAX_ID_CHARS]
        function = _get(call, "function")
        if function is None:
            return
        name = _get(function, "name")
        if isinstance(name, str) and name:
            self._progress.chars += len(name)
            if slot.name_chars < MAX_NAME_CHARS:
                slot.name.append(name)
            slot.name_chars += len(name)
        arguments = _get(function, "arguments")
        if isinstance(arguments, str) and arguments:
            self._progress.chars += len(arguments)
            if slot.argument_chars <= MAX_ARGUMENT_CHARS:
                slot.arguments.append(arguments)
            slot.argument_chars += len(arguments)

    def reply(self) -> ModelReply:
        calls = []
        for index in sorted(self._calls):
            slot = self._calls[index]
            if slot.argument_chars > MAX_ARGUMENT_CHARS:
                parsed = refused_size(slot.argument_chars)
            else:
                parsed = parse_arguments("".join(slot.arguments))
            calls.append(_tool_call(slot.id or f"call_{index}", "".join(slot.name), parsed))
        text = "".join(self._text) + clean_text(self._carry)
        return ModelReply(
            text=text,
            tool_calls=tuple(calls),
            usage=self._usage,
            arrived_chars=self._progress.chars,
        )


def _tool_call(call_id: str, name: str, parsed: Arguments) -> ModelToolCall:
    """A tool call as the engine gets it: text cleaned, ids and names of bounded length."""
    return ModelToolCall(
        id=clean_text(call_id[:MAX_ID_CHARS]),
        name=clean_text(name[:MAX_NAME_CHARS]),
        arguments=clean_value(parsed.value),
        raw_arguments=clean_text(parsed.raw),
        refused=parsed.refused,
    )


def parse_usage(response: Any) -> ModelUsage | None:
    """The response's ``usage`` (cached tokens from ``prompt_tokens_details``); ``None`` when the
    server sent none or sent counts that are not whole numbers >= 0."""
    usage = _get(response, "usage")
    if usage is None:
        return None
    prompt = _count(_get(usage, "prompt_tokens"))
    completion = _count(_get(usage, "completion_tokens"))
    if prompt is None or completion is None:
        return None
    details = _get(usage, "prompt_tokens_details")
    cached = _count(_get(details, "cached_tokens")) if details is not None else None
    return ModelUsage(prompt_tokens=prompt, completion_tokens=completion, cached_tokens=cached or 0)


def _count(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _retry_after_s(headers: Any) -> float | None:
    """Seconds the server asked to wait (``retry-after-ms``, ``retry-after`` seconds or date)."""
    value = headers.get("retry-after-ms")
    if value is not None:
        try:
            return max(0.0, float(value) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    parsed = email.utils.parsedate_tz(value)
    if parsed is None:
        return None
    return max(0.0, float(email.utils.mktime_tz(parsed) - time.time()))


async def _ignore_text(_piece: str) -> None:
    return None


def _names_field(exc: openai.APIStatusError, field: str) -> bool:
    """Whether a 400 refuses ``field``: OpenAI names it in ``param`` (``unsupported_parameter``);
    other servers in the message ("Unrecognized request argument supplied: ...")."""
    body = exc.body
    error = body.get("error", body) if isinstance(body, dict) else None
    if isinstance(error, dict) and error.get("param") == field:
        return True
    message = _server_message(exc)
    return f"'{field}'" in message or f"argument supplied: {field}" in message


def _server_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
    return exc.message


def _shown(url: str) -> str:
    """The URL without any user:password part, safe to print."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
