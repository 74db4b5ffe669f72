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
import json
import logging
import random
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast
from urllib.parse import urlsplit, urlunsplit

import openai

from engine.errors import ConfigError
from engine.model.types import (
    ModelAuthError,
    ModelError,
    ModelReply,
    ModelToolCall,
    ModelUsage,
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

Sleep = Callable[[float], Awaitable[None]]


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

        ``max_tokens`` is sent as ``max_tokens``: the field every OpenAI-compatible server
        reads (OpenAI's newer ``max_completion_tokens`` is not understood by all of them).
        Raises ModelAuthError when the key is refused, ModelError for anything else that
        leaves no reply after the retries.
        """
        body: dict[str, Any] = {"messages": list(messages)}
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if tools:  # the API refuses an empty tools array
            body["tools"] = list(tools)
            body["tool_choice"] = "auto"
        # The messages are plain JSON already. Passed as typed arguments, the SDK walks every
        # message of the context on each call, on the event loop (a second or more per call
        # late in a long turn); as ``extra_body`` they are sent as they are.
        kwargs: dict[str, Any] = {"model": self.model, "messages": [], "extra_body": body}
        create = cast(Callable[..., Awaitable[Any]], self._client.chat.completions.create)
        response = await self._with_retries(lambda: create(**kwargs))
        return parse_completion(response)

    async def stream(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        *,
        on_text: TextSink,
        max_tokens: int | None = None,
    ) -> ModelReply:
        """:meth:`complete`, streamed: ``on_text`` hears the text so far as chunks arrive.

        Retried like ``complete`` until the first chunk; a failure after it is a ModelError
        (the text already shown is not repeated). Usage comes from the final chunk
        (``stream_options.include_usage``). Cancelling closes the connection at once.
        """
        body: dict[str, Any] = {
            "messages": list(messages),
            "stream_options": {"include_usage": True},
        }
        if tools:
            body["tools"] = list(tools)
            body["tool_choice"] = "auto"
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": [],
            "stream": True,
            "extra_body": body,
        }
        create = cast(Callable[..., Awaitable[Any]], self._client.chat.completions.create)
        response = await self._with_retries(lambda: create(**kwargs))
        collected = _StreamedReply()
        try:
            async for chunk in response:
                grown = collected.add(chunk)
                if grown:
                    await on_text(clean_text(collected.text))
        except openai.OpenAIError as exc:
            raise ModelError(
                f"the model server at {_shown(self.base_url)} broke off its answer: "
                f"{type(exc).__name__}: {exc}"
            ) from None
        finally:
            # On a cancel (/stop) too: the server sees the connection go.
            await response.close()
        return collected.reply()

    async def check(self) -> str:
        """For ``plangate doctor``: a one-line status, or ModelError saying what is wrong.

        Lists the server's models; when that is not supported or the model is not listed
        (some local servers list aliases), falls back to a one-token completion.
        """
        where = _shown(self.base_url)
        try:
            page = await self._with_retries(self._client.models.list)
            listed = [str(getattr(m, "id", "")) for m in getattr(page, "data", None) or ()]
        except ModelAuthError:
            raise
        except ModelError:
            listed = []
        if self.model in listed:
            return f"model server {where}: ok, model {self.model!r} available"
        create = cast(Callable[..., Awaitable[Any]], self._client.chat.completions.create)
        try:
            await self._with_retries(
                lambda: create(
                    model=self.model,
                    messages=[{"role": "user", "content": "ping"}],
                    max_completion_tokens=1,
                )
            )
        except ModelAuthError:
            raise
        except ModelError as exc:
            if not listed:
                raise
            shown = ", ".join(listed[:10]) + (", ..." if len(listed) > 10 else "")
            raise ModelError(f"{exc} (the server lists: {shown})") from None
        return f"model server {where}: ok, model {self.model!r} answers"

    async def _with_retries(self, send: Callable[[], Awaitable[Any]]) -> Any:
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
    for index, tool_call in enumerate(getattr(message, "tool_calls", None) or ()):
        function = getattr(tool_call, "function", None)
        if function is None:  # a non-function (custom) tool call: we offer none
            continue
        raw = function.arguments or ""
        arguments, raw_kept = _parse_arguments(raw)
        calls.append(
            ModelToolCall(
                id=clean_text(tool_call.id or f"call_{index}"),
                name=clean_text(function.name or ""),
                arguments=clean_value(arguments),
                raw_arguments=clean_text(raw_kept),
            )
        )
    return ModelReply(
        text=clean_text(message.content or ""), tool_calls=tuple(calls), usage=parse_usage(response)
    )


class _StreamedReply:
    """The chunks of one streamed completion, put back together."""

    def __init__(self) -> None:
        self.text = ""
        self._calls: dict[int, dict[str, str]] = {}
        self._usage: ModelUsage | None = None

    def add(self, chunk: Any) -> bool:
        """Take one chunk; True when the text grew."""
        usage = parse_usage(chunk)
        if usage is not None:
            self._usage = usage
        grew = False
        for choice in getattr(chunk, "choices", None) or ():
            delta = getattr(choice, "delta", None)
            if delta is None:
                continue
            piece = getattr(delta, "content", None)
            if piece:
                self.text += piece
                grew = True
            for call in getattr(delta, "tool_calls", None) or ():
                index = int(getattr(call, "index", 0) or 0)
                slot = self._calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
                if getattr(call, "id", None):
                    slot["id"] = call.id
                function = getattr(call, "function", None)
                if function is not None:
                    if getattr(function, "name", None):
                        slot["name"] += function.name
                    if getattr(function, "arguments", None):
                        slot["arguments"] += function.arguments
        return grew

    def reply(self) -> ModelReply:
        calls = []
        for index in sorted(self._calls):
            slot = self._calls[index]
            arguments, raw_kept = _parse_arguments(slot["arguments"])
            calls.append(
                ModelToolCall(
                    id=clean_text(slot["id"] or f"call_{index}"),
                    name=clean_text(slot["name"]),
                    arguments=clean_value(arguments),
                    raw_arguments=clean_text(raw_kept),
                )
            )
        return ModelReply(text=clean_text(self.text), tool_calls=tuple(calls), usage=self._usage)


def parse_usage(response: Any) -> ModelUsage | None:
    """The response's ``usage`` (cached tokens from ``prompt_tokens_details``); ``None`` when the
    server sent none or sent counts that are not whole numbers >= 0."""
    usage = getattr(response, "usage", None)
    if usage is None:
        return None
    prompt = _count(getattr(usage, "prompt_tokens", None))
    completion = _count(getattr(usage, "completion_tokens", None))
    if prompt is None or completion is None:
        return None
    details = getattr(usage, "prompt_tokens_details", None)
    cached = _count(getattr(details, "cached_tokens", None)) if details is not None else None
    return ModelUsage(prompt_tokens=prompt, completion_tokens=completion, cached_tokens=cached or 0)


def _count(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _parse_arguments(raw: str) -> tuple[dict[str, Any], str]:
    if not raw.strip():
        return {}, ""  # some servers send "" for a call without arguments
    try:
        value = json.loads(raw)
    except ValueError:
        return {}, raw
    if not isinstance(value, dict):
        return {}, raw
    return value, ""


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
