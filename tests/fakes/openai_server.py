"""A fake OpenAI chat-completions server on loopback, for the real openai SDK to talk to.

It implements ``POST /v1/chat/completions`` (plain, or streamed as server-sent events with
``"stream": true``), ``GET /v1/models`` and
``POST /v1/audio/transcriptions`` (answers ``server.transcripts`` in order), checks
each request like the real API (engine.model.validate: roles, tool-call pairing, tool specs,
and the model name), answers from a ``Script``, and records every request. Faults on demand::

    server.fail_next(429, retry_after=2)     # then the script answers as usual
    server.fail_next(500, times=2)
    server.fail_next(401)

Use the ``fake_openai`` fixture (import it into a conftest.py), or
``async with FakeOpenAIServer(script) as server:``; point a client at ``server.base_url``.
Every completion reports ``server.usage`` (prompt, completion, cached tokens; set it to ``None``
for a server that sends no usage), or, with ``server.usage_of`` set, what that function makes of
the request body (a server that bills what each request really sent). A request the script
does not fit (an ``expect`` mismatch, a tool not offered) is answered with HTTP 400 and its
text is kept in ``server.errors``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest_asyncio
from aiohttp import web

from engine.model.openai_provider import forget_limit_field
from engine.model.script import Script, ScriptStep
from engine.model.types import ModelError, ModelReply
from engine.model.validate import validate_request

FAKE_MODEL = "fake-model"


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request as the server saw it (headers lower-cased; body parsed JSON or None)."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass(frozen=True, slots=True)
class Transcription:
    """One ``audio/transcriptions`` request: the form's model, the file and its name."""

    model: str
    filename: str
    data: bytes
    content_type: str


@dataclass(frozen=True, slots=True)
class FakeUsage:
    """The usage figures the fake reports for each completion."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0


@dataclass(slots=True)
class _Fault:
    status: int
    headers: dict[str, str]
    message: str | None
    times: int


@dataclass(slots=True)
class FakeOpenAIServer:
    """The fake server; ``script`` may be replaced between requests."""

    script: Script = field(default_factory=lambda: Script([]))
    models: tuple[str, ...] = (FAKE_MODEL,)
    # When set, a request without ``Authorization: Bearer <api_key>`` gets 401.
    api_key: str | None = None
    usage: FakeUsage | None = field(default_factory=lambda: FakeUsage(1, 1))
    usage_of: Callable[[dict[str, Any]], FakeUsage] | None = None
    requests: list[RecordedRequest] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _faults: list[_Fault] = field(default_factory=list)
    _holds: list[asyncio.Event] = field(default_factory=list)  # for the next requests
    _every_hold: list[asyncio.Event] = field(default_factory=list)  # released on stop
    # Speech to text: each request answers the next of these texts (then "").
    transcripts: list[str] = field(default_factory=list)
    transcriptions: list[Transcription] = field(default_factory=list)
    # When set, every transcription is answered with this (content type, body) instead: a
    # server that answers something that is not the JSON the API promises.
    transcribe_raw: tuple[str, str] | None = None
    # Body fields this server refuses with HTTP 400, as OpenAI refuses ``max_tokens`` for its
    # reasoning models (or vLLM ``tool_choice: auto`` without a tool parser).
    refused_params: set[str] = field(default_factory=set)
    # Streaming (``"stream": true``): the text goes in pieces this long, this far apart.
    stream_piece_chars: int = 40
    stream_delay_s: float = 0.0
    # When set, a stream is broken off (the connection dropped) after this many chunks.
    stream_break_after: int | None = None
    streams_broken: int = 0
    # When set, a stream waits after this many chunks until ``stream_resume`` is set.
    stream_pause_at: int | None = None
    stream_resume: asyncio.Event = field(default_factory=asyncio.Event)
    stream_paused: int = 0  # streams that reached the pause
    streams_done: int = 0
    streams_cut: int = 0  # streams the client closed before the end
    _runner: web.AppRunner | None = None
    _port: int = 0
    _counter: int = 0

    @property
    def base_url(self) -> str:
        """The URL to give the SDK (ends in ``/v1``)."""
        if not self._port:
            raise RuntimeError("the fake model server is not started")
        return f"http://127.0.0.1:{self._port}/v1"

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        """The JSON bodies of every chat-completions request, in order (faulted ones too)."""
        return [
            r.body
            for r in self.requests
            if r.path.endswith("/chat/completions") and isinstance(r.body, dict)
        ]

    def play(self, steps: Script | Sequence[ScriptStep]) -> None:
        """Answer the next chat requests from these steps."""
        self.script = steps if isinstance(steps, Script) else Script(steps)

    def fail_next(
        self,
        status: int,
        *,
        retry_after: float | str | None = None,
        retry_after_ms: float | str | None = None,
        message: str | None = None,
        times: int = 1,
    ) -> None:
        """Answer the next ``times`` requests with HTTP ``status`` (queued after earlier faults),
        with the ``retry-after`` / ``retry-after-ms`` headers given."""
        headers = {
            name: str(value)
            for name, value in (("retry-after", retry_after), ("retry-after-ms", retry_after_ms))
            if value is not None
        }
        self._faults.append(_Fault(status, headers, message, times))

    def hold_next(self) -> asyncio.Event:
        """Make the next chat request wait until the returned event is set (or the server stops).

        For timeouts and for cancelling a turn while the model is "thinking".
        """
        release = asyncio.Event()
        self._holds.append(release)
        self._every_hold.append(release)
        return release

    async def start(self) -> None:
        """Listen on 127.0.0.1, on a free port."""
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/audio/transcriptions", self._transcribe)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self._port = int(self._runner.addresses[0][1])
        # A new server on a port an earlier test's server had: the provider's process-wide
        # memory of which token-limit field that one refused is not this one's.
        forget_limit_field(self.base_url)

    async def stop(self) -> None:
        """Stop listening and close open connections."""
        for release in self._every_hold:
            release.set()  # a held handler would otherwise delay the shutdown
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeOpenAIServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _record(self, request: web.Request) -> RecordedRequest:
        raw = await request.read()
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
        recorded = RecordedRequest(
            request.method,
            request.path,
            {k.lower(): v for k, v in request.headers.items()},
            body,
        )
        self.requests.append(recorded)
        return recorded

    def _refusal(self, recorded: RecordedRequest) -> web.Response | None:
        if self._faults:
            fault = self._faults[0]
            fault.times -= 1
            if fault.times <= 0:
                self._faults.pop(0)
            headers = dict(fault.headers)
            kind, code = _ERROR_KINDS.get(fault.status, ("server_error", None))
            message = fault.message or f"fake failure {fault.status}"
            return _error(fault.status, message, kind, code, headers=headers)
        if self.api_key is not None and (
            recorded.headers.get("authorization") != f"Bearer {self.api_key}"
        ):
            return _error(
                401, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key"
            )
        return None

    async def _transcribe(self, request: web.Request) -> web.Response:
        """``POST /v1/audio/transcriptions``: multipart ``model`` and ``file``, as OpenAI's."""
        if self._faults or self.api_key is not None:
            refusal = self._refusal(
                RecordedRequest(
                    request.method,
                    request.path,
                    {k.lower(): v for k, v in request.headers.items()},
                    None,
                )
            )
            if refusal is not None:
                return refusal
        form = await request.post()
        upload = form.get("file")
        model = form.get("model")
        if not isinstance(model, str) or not model:
            return self._bad_request("you must provide a model parameter")
        if not isinstance(upload, web.FileField):
            return self._bad_request("you must provide a file")
        data = upload.file.read()
        self.transcriptions.append(Transcription(model, upload.filename, data, upload.content_type))
        self.requests.append(RecordedRequest(request.method, request.path, {}, {"model": model}))
        if self.transcribe_raw is not None:
            content_type, raw = self.transcribe_raw
            return web.Response(text=raw, content_type=content_type)
        text = self.transcripts.pop(0) if self.transcripts else ""
        return web.json_response({"text": text})

    async def _models(self, request: web.Request) -> web.Response:
        recorded = await self._record(request)
        refusal = self._refusal(recorded)
        if refusal is not None:
            return refusal
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in self.models]
        return web.json_response({"object": "list", "data": data})

    async def _chat(self, request: web.Request) -> web.Response:
        recorded = await self._record(request)
        if self._holds:
            await self._holds.pop(0).wait()
        refusal = self._refusal(recorded)
        if refusal is not None:
            return refusal
        body = recorded.body
        if not isinstance(body, dict):
            return self._bad_request("We could not parse the JSON body of your request.")
        model = body.get("model")
        if not isinstance(model, str) or not model:
            return self._bad_request("you must provide a model parameter")
        for name in sorted(self.refused_params & set(body)):
            message = f"Unsupported parameter: '{name}' is not supported with this model."
            if name == "max_tokens":
                message += " Use 'max_completion_tokens' instead."
            self.errors.append(message)
            body_ = {"message": message, "type": "invalid_request_error", "param": name,
                     "code": "unsupported_parameter"}  # fmt: skip
            return web.json_response(
                {"error": body_}, status=400, headers={"x-should-retry": "false"}
            )
        problems = validate_request(
            body.get("messages"), body.get("tools"), body.get("tool_choice")
        )
        if problems:
            return self._bad_request("; ".join(problems))
        if model not in self.models:
            return _error(
                404,
                f"The model `{model}` does not exist or you do not have access to it.",
                "invalid_request_error",
                "model_not_found",
            )
        offered = {
            str(spec["function"]["name"]) for spec in body.get("tools") or () if "function" in spec
        }
        try:
            reply = self.script.next_reply(body["messages"], offered=offered)
        except ModelError as exc:
            return self._bad_request(f"script divergence: {exc}")
        self._counter += 1
        usage = self.usage_of(body) if self.usage_of is not None else self.usage
        if body.get("stream"):
            options = body.get("stream_options") or {}
            return await self._stream(
                request, reply, model=model, usage=usage if options.get("include_usage") else None
            )
        return web.json_response(_completion(reply, model=model, number=self._counter, usage=usage))

    async def _stream(
        self, request: web.Request, reply: ModelReply, *, model: str, usage: FakeUsage | None
    ) -> web.StreamResponse:
        """The reply as server-sent events, the way OpenAI streams: the text in pieces of
        ``stream_piece_chars``, ``stream_delay_s`` apart, then the tool calls, the finish
        reason, the usage chunk when asked for, and ``[DONE]``. A client that goes away
        mid-stream is counted in ``streams_cut``."""
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        base = {
            "id": f"chatcmpl-fake-{self._counter}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
        }

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
            return base | {"choices": [choice]}

        events: list[dict[str, Any]] = [chunk({"role": "assistant", "content": ""})]
        text = reply.text
        step = max(1, self.stream_piece_chars)
        events.extend(chunk({"content": text[i : i + step]}) for i in range(0, len(text), step))
        for index, c in enumerate(reply.tool_calls):
            arguments = c.raw_arguments if c.raw_arguments else json.dumps(c.arguments)
            head = {"index": index, "id": c.id, "type": "function"}
            events.append(
                chunk({"tool_calls": [head | {"function": {"name": c.name, "arguments": ""}}]})
            )
            events.append(
                chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments}}]})
            )
        events.append(chunk({}, "tool_calls" if reply.tool_calls else "stop"))
        if usage is not None:
            events.append(base | {"choices": [], "usage": _usage_body(usage)})
        try:
            for i, event in enumerate(events):
                if i and self.stream_delay_s:
                    await asyncio.sleep(self.stream_delay_s)
                elif i % 16 == 0:
                    # A real server is another process: this one shares the client's event
                    # loop, and a write into a free buffer never waits, so it lets the loop go.
                    await asyncio.sleep(0)
                if i == self.stream_pause_at:
                    self.stream_paused += 1
                    self._every_hold.append(self.stream_resume)
                    await self.stream_resume.wait()
                if self.stream_break_after is not None and i >= self.stream_break_after:
                    self.streams_broken += 1
                    if request.transport is not None:
                        request.transport.close()  # a server that dies mid-answer
                    return response
                await response.write(f"data: {json.dumps(event)}\n\n".encode())
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
        except (ConnectionError, asyncio.CancelledError):
            self.streams_cut += 1
            raise
        self.streams_done += 1
        return response

    def _bad_request(self, message: str) -> web.Response:
        self.errors.append(message)
        return _error(400, message, "invalid_request_error", None)


_ERROR_KINDS: dict[int, tuple[str, str | None]] = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "unsupported_country_region_territory"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
}


def _error(
    status: int,
    message: str,
    kind: str,
    code: str | None,
    *,
    headers: dict[str, str] | None = None,
) -> web.Response:
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    # x-should-retry: false keeps the SDK from retrying on its own if a client left retries on.
    return web.json_response(
        body, status=status, headers={"x-should-retry": "false", **(headers or {})}
    )


def _completion(
    reply: ModelReply, *, model: str, number: int, usage: FakeUsage | None
) -> dict[str, Any]:
    tool_calls = [
        {
            "id": c.id,
            "type": "function",
            "function": {
                "name": c.name,
                "arguments": c.raw_arguments if c.raw_arguments else json.dumps(c.arguments),
            },
        }
        for c in reply.tool_calls
    ]
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if tool_calls:
        message["tool_calls"] = tool_calls
    elif message["content"] is None:
        message["content"] = ""
    body: dict[str, Any] = {
        "id": f"chatcmpl-fake-{number}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if tool_calls else "stop",
                "logprobs": None,
            }
        ],
    }
    if usage is not None:
        body["usage"] = _usage_body(usage)
    return body


def _usage_body(usage: FakeUsage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
    }


@pytest_asyncio.fixture
async def fake_openai() -> AsyncIterator[FakeOpenAIServer]:
    """A started FakeOpenAIServer with an empty script; stopped after the test."""
    server = FakeOpenAIServer()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()
