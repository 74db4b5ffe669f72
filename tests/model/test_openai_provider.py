"""The OpenAI provider with the real openai SDK against the fake server on loopback."""

from __future__ import annotations

import email.utils
import json
import socket
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web

from engine.errors import ConfigError
from engine.model.openai_provider import PLACEHOLDER_API_KEY, OpenAIProvider, forget_limit_field
from engine.model.script import ScriptedCall, ScriptStep, say
from engine.model.types import ModelAuthError, ModelError
from tests.fakes.openai_server import FAKE_MODEL, FakeOpenAIServer

READ_FILE = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
}
BASH = {
    "type": "function",
    "function": {"name": "bash", "parameters": {"type": "object", "properties": {}}},
}
HELLO = [{"role": "system", "content": "You are a test."}, {"role": "user", "content": "hi"}]

MakeProvider = Callable[..., OpenAIProvider]


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
async def make_provider(
    fake_openai: FakeOpenAIServer, sleeps: list[float]
) -> AsyncIterator[MakeProvider]:
    made: list[OpenAIProvider] = []

    async def record_sleep(delay_s: float) -> None:
        sleeps.append(delay_s)

    def make(**kwargs: Any) -> OpenAIProvider:
        kwargs.setdefault("base_url", fake_openai.base_url)
        kwargs.setdefault("api_key", "sk-test-secret")
        kwargs.setdefault("max_retries", 3)
        provider = OpenAIProvider(kwargs.pop("model", FAKE_MODEL), sleep=record_sleep, **kwargs)
        made.append(provider)
        return provider

    yield make
    for provider in made:
        await provider.aclose()


async def test_tool_calls_round_trip(
    fake_openai: FakeOpenAIServer, make_provider: MakeProvider
) -> None:
    fake_openai.play(
        [
            ScriptStep(
                text="Reading both.",
                tool_calls=(
                    ScriptedCall("read_file", {"path": "a.txt"}),
                    ScriptedCall("read_file", {"path": "b.txt"}),
                ),
            ),
            say("Both say hello.", expect="hello from b"),
        ]
    )
    provider = make_provider()

    first = await provider.complete(HELLO, [READ_FILE])

    assert first.text == "Reading both."
    assert [(c.id, c.name, c.arguments, c.raw_arguments) for c in first.tool_calls] == [
        ("call_1_0", "read_file", {"path": "a.txt"}, ""),
        ("call_1_1", "read_file", {"path": "b.txt"}, ""),
    ]
    sent = fake_openai.chat_requests[0]
    assert sent["model"] == FAKE_MODEL
    assert sent["tools"] == [READ_FILE]
    assert sent["tool_choice"] == "auto"
    assert sent["messages"] == HELLO

    conversation: list[dict[str, Any]] = [
        *HELLO,
        {
            "role": "assistant",
            "content": first.text,
            "tool_calls": [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": '{"path": "x"}'},
                }
                for c in first.tool_calls
            ],
        },
        {"role": "tool", "tool_call_id": "call_1_0", "content": "hello from a"},
        {"role": "tool", "tool_call_id": "call_1_1", "content": "hello from b"},
    ]
    second = await provider.complete(conversation, [READ_FILE])

    assert second.text == "Both say hello."
    assert second.tool_calls == ()
    assert fake_openai.errors == []


async def test_no_tools_sends_neither_tools_nor_tool_choice(
    fake_openai: FakeOpenAIServer, make_provider: MakeProvider
) -> None:
    fake_openai.play([say("plain")])

    reply = await make_provider().complete(HELLO, [])

    assert reply.text == "plain"
    assert "tools" not in fake_openai.chat_requests[0]
    assert "tool_choice" not in fake_openai.chat_requests[0]


@pytest.mark.parametrize("raw", ['{"command": "ls', "[1, 2]", "not json"])
async def test_invalid_argument_json_keeps_the_raw_text(
    fake_openai: FakeOpenAIServer, make_provider: MakeProvider, raw: str
) -> None:
    fake_openai.play([ScriptStep(tool_calls=(ScriptedCall("bash", raw_arguments=raw),))])

    reply = await make_provider().complete(HELLO, [BASH])

    (tool_call,) = reply.tool_calls
    assert tool_call.name == "bash"
    assert tool_call.arguments == {}
    assert tool_call.raw_arguments == raw


async def test_429_is_retried_after_the_time_the_server_asks(
    fake_openai: FakeOpenAIServer, make_provider: MakeProvider, sleeps: list[float]
) -> None:
    fake_openai.play([say("after the wait")])
    fake_openai.fail_next(429, retry_after=2)

    reply = await make_provider().complete(HELLO, [])

    assert reply.text == "after the wait"
    assert sleeps == [2.0]
    assert len(fake_openai.chat_requests) == 2


async def test_429_asking_for_too_long_a_wait_fails_without_waiting(
    fake_openai: FakeOpenAIServer, make_provider: MakeProvider, sleeps: list[float]
) -> None:
    fake_openai.fail_next(429, retry_after=3600)

    with pytest.raises(ModelError, match="asks to wait 3600 s"):
        await make_provider().complete(HELLO, [])
    assert sleeps == []


async def test_500_is_retried_then_succeeds(
    fake_openai: FakeOpenAIServer, make_provider: MakeProvider, sleeps: list[float]
) -> None:
    fake_openai.play([say("recovered")])
    fake_openai.fail_next(500, times=2)

    reply = await make_provider().complete(HELLO, [])

    assert reply.text == "recovered"
    assert len(sleeps) == 2
    assert sleeps[0] < sleeps[1]  # exponential backoff, jitter below the doubling
    assert len(fake_openai.chat_requests) == 3


async def test_retries_are_bounded(
    fake_openai: FakeOpenAIServer, make_provider: MakeProvider, sleeps: list[float]
) -> None:
    fake_openai.play([say("never reached")])
    fake_openai.fail_next(503, message="overloaded", times=10)

    with pytest.raises(ModelError, match=r"kept failing \(HTTP 503: overloaded\) after 3 attempts"):
        await make_provider(max_retries=2).complete(HELLO, [])
    assert len(sleeps) == 2
    assert len(fake_openai.chat_requests) == 3


@pytest.mark.parametrize("status", [401, 403])
async def test_refused_key_is_a_clear_auth_error_without_retry(
    fake_openai: FakeOpenAIServer, make_provider: MakeProvider, sleeps: list[float], status: int
) -> None:
    fake_openai.fail_next(status)

    with pytest.raises(ModelAuthError) as caught:
        await make_provider().complete(HELLO, [])

    message = str(caught.value)
    assert "the model server refused the API key (PLANGATE_MODEL_API_KEY)" in message
    assert f"HTTP {status}" in message
    assert "sk-test-secret" not in message
    assert sleeps == []
    assert len(fake_openai.chat_requests) == 1


async def test_wrong_key_against_a_server_that_checks_it(
    fake_openai: FakeOpenAIServer, make_provider: MakeProvider
) -> None:
    fake_openai.api_key = "sk-right"
    fake_openai.play([say("welcome")])

    with pytest.raises(ModelAuthError):
        await make_provider(api_key="sk-wrong").complete(HELLO, [])
    assert (await make_provider(api_key="sk-right").complete(HELLO, [])).text == "welcome"


async def test_unreachable_server_names_the_base_url(
    make_provider: MakeProvider, sleeps: list[float]
) -> None:
    with socket.socket() as probe:  # a port nobody listens on once the probe is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base_url = f"http://127.0.0.1:{port}/v1"

    with pytest.raises(ModelError, match="cannot reach the model server at") as caught:
        await make_provider(base_url=base_url, max_retries=1).complete(HELLO, [])

    assert base_url in str(caught.value)
    assert "PLANGATE_MODEL_BASE_URL" in str(caught.value)
    assert len(sleeps) == 1


async def test_placeholder_key_is_sent_when_a_base_url_has_no_key(
    fake_openai: FakeOpenAIServer, make_provider: MakeProvider
) -> None:
    fake_openai.play([say("ok")])

    await make_provider(api_key=None).complete(HELLO, [])

    assert fake_openai.requests[0].headers["authorization"] == f"Bearer {PLACEHOLDER_API_KEY}"


async def test_the_given_key_is_sent_and_never_shown(
    fake_openai: FakeOpenAIServer, make_provider: MakeProvider
) -> None:
    fake_openai.play([say("ok")])
    provider = make_provider(api_key="sk-test-secret")

    await provider.complete(HELLO, [])

    assert fake_openai.requests[0].headers["authorization"] == "Bearer sk-test-secret"
    assert "sk-test-secret" not in repr(provider)


def test_openai_itself_needs_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env-must-not-be-used")

    with pytest.raises(ConfigError, match="PLANGATE_MODEL_API_KEY"):
        OpenAIProvider("gpt-4o", base_url=None, api_key=None)


async def test_rejected_conversation_carries_the_server_message(
    fake_openai: FakeOpenAIServer, make_provider: MakeProvider, sleeps: list[float]
) -> None:
    orphan = [*HELLO, {"role": "tool", "tool_call_id": "call_9", "content": "x"}]

    with pytest.raises(ModelError, match=r"rejected the request \(HTTP 400\).*role 'tool'"):
        await make_provider().complete(orphan, [])
    assert sleeps == []


async def test_unknown_model_names_the_model(make_provider: MakeProvider) -> None:
    with pytest.raises(ModelError, match=r"HTTP 404 for model 'no-such-model'"):
        await make_provider(model="no-such-model").complete(HELLO, [])


async def test_script_divergence_reaches_the_client_as_a_model_error(
    fake_openai: FakeOpenAIServer, make_provider: MakeProvider
) -> None:
    fake_openai.play([say("never", expect="the magic word")])

    with pytest.raises(ModelError, match="script step 1 of 1 expected 'the magic word'"):
        await make_provider().complete(HELLO, [])
    assert len(fake_openai.errors) == 1


async def test_check_reports_a_listed_model(make_provider: MakeProvider) -> None:
    status = await make_provider().check()

    assert status == (
        f"model server {make_provider().base_url}: ok, model 'fake-model' answers with tools, "
        "plain and streamed (max_tokens)"
    )


async def test_check_needs_no_model_list(
    fake_openai: FakeOpenAIServer, make_provider: MakeProvider
) -> None:
    fake_openai.play([say("p")])

    status = await make_provider().check()

    assert status.endswith("plain and streamed (max_tokens)")
    assert [r.path for r in fake_openai.requests] == ["/v1/chat/completions"] * 2
    plain, streamed = fake_openai.chat_requests
    assert not plain.get("stream") and streamed["stream"] is True
    assert plain["max_tokens"] >= 1 and plain["tools"] == streamed["tools"]


async def test_check_fails_for_a_model_the_server_does_not_have(
    make_provider: MakeProvider,
) -> None:
    with pytest.raises(ModelError, match="HTTP 404 for model 'ghost'"):
        await make_provider(model="ghost").check()


async def test_check_fails_on_a_refused_key(
    fake_openai: FakeOpenAIServer, make_provider: MakeProvider
) -> None:
    fake_openai.api_key = "sk-right"

    with pytest.raises(ModelAuthError):
        await make_provider(api_key="sk-wrong").check()


async def test_a_server_that_does_not_answer_in_time(
    fake_openai: FakeOpenAIServer, make_provider: MakeProvider
) -> None:
    fake_openai.hold_next()  # never released: the request hangs until the server stops

    with pytest.raises(ModelError, match=r"did not answer within 0\.2 s \(1 attempts\)"):
        await make_provider(timeout_s=0.2, max_retries=0).complete(HELLO, [])


async def test_retry_after_as_an_http_date(
    fake_openai: FakeOpenAIServer, make_provider: MakeProvider, sleeps: list[float]
) -> None:
    fake_openai.play([say("ok")])
    fake_openai.fail_next(503, retry_after=email.utils.formatdate(time.time() + 30, usegmt=True))

    await make_provider().complete(HELLO, [])

    (delay,) = sleeps
    assert 20 < delay <= 31


@pytest.mark.parametrize(
    ("retry_after", "retry_after_ms", "waited"),
    [
        ("9", "1500", (1.5, 1.5)),  # the milliseconds header wins
        ("2.5", None, (2.5, 2.5)),
        ("soon", None, (6.0, 8.0)),  # unreadable: the backoff (8 s, jitter 0.75-1)
        (None, None, (6.0, 8.0)),
    ],
)
async def test_retry_after_header_forms(
    fake_openai: FakeOpenAIServer,
    make_provider: MakeProvider,
    sleeps: list[float],
    retry_after: str | None,
    retry_after_ms: str | None,
    waited: tuple[float, float],
) -> None:
    fake_openai.play([say("ok")])
    fake_openai.fail_next(503, retry_after=retry_after, retry_after_ms=retry_after_ms)

    await make_provider(backoff_s=8.0).complete(HELLO, [])

    (delay,) = sleeps
    assert waited[0] <= delay <= waited[1]


async def test_credentials_in_the_base_url_are_not_shown(make_provider: MakeProvider) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    provider = make_provider(base_url=f"http://user:hunter2@127.0.0.1:{port}/v1", max_retries=0)

    with pytest.raises(ModelError) as caught:
        await provider.complete(HELLO, [])

    assert f"http://127.0.0.1:{port}/v1" in str(caught.value)
    assert "hunter2" not in str(caught.value)
    assert "hunter2" not in repr(provider)


async def test_check_lists_what_the_server_has_when_the_model_is_missing(
    fake_openai: FakeOpenAIServer, make_provider: MakeProvider
) -> None:
    fake_openai.models = ("fake-model", "other-model")

    with pytest.raises(ModelError, match=r"the server lists: fake-model, other-model"):
        await make_provider(model="ghost").check()


async def test_lone_surrogates_in_text_and_arguments_become_replacement_characters(
    fake_openai: FakeOpenAIServer, make_provider: MakeProvider
) -> None:
    # The title of a plan, say: stored in the sidecar and the event log, both UTF-8.
    call = ScriptedCall("read_file", {"path": "a\udc80.txt", "tags": ["x\ud800"]})
    fake_openai.play([ScriptStep(text="odd \ud83d text", tool_calls=(call,))])
    reply = await make_provider().complete(HELLO, [READ_FILE])
    assert reply.text == "odd \ufffd text"
    assert reply.tool_calls[0].arguments == {"path": "a\ufffd.txt", "tags": ["x\ufffd"]}


async def test_a_reasoning_model_known_by_name_gets_max_completion_tokens(
    fake_openai: FakeOpenAIServer, make_provider: MakeProvider
) -> None:
    fake_openai.models = ("o3-mini", "gpt-5-mini", "openai/o4-mini")
    fake_openai.refused_params = {"max_tokens"}
    for name in fake_openai.models:
        fake_openai.play([say("ok")])
        await make_provider(model=name).complete(HELLO, [], max_tokens=300)
    assert [b.get("max_completion_tokens") for b in fake_openai.chat_requests] == [300] * 3
    assert not any("max_tokens" in b for b in fake_openai.chat_requests)
    assert fake_openai.errors == []


async def test_a_refused_max_tokens_is_learnt_once_for_that_server_and_model(
    fake_openai: FakeOpenAIServer, make_provider: MakeProvider
) -> None:
    fake_openai.refused_params = {"max_tokens"}
    fake_openai.play([say("one"), say("two"), say("three")])
    provider = make_provider()
    assert (await provider.complete(HELLO, [], max_tokens=200)).text == "one"
    assert (await provider.complete(HELLO, [], max_tokens=200)).text == "two"
    # Another provider for the same server and model (a restart of the doctor, say) knows it.
    streamed = await make_provider().stream(HELLO, [], on_text=_ignore, max_tokens=200)
    assert streamed.text == "three"
    fields = [
        [k for k in ("max_tokens", "max_completion_tokens") if k in b]
        for b in fake_openai.chat_requests
    ]
    assert fields == [["max_tokens"], ["max_completion_tokens"]] + [["max_completion_tokens"]] * 2
    assert len(fake_openai.errors) == 1

    # Another server at that address (the next test's, on a reused port) starts unlearnt.
    forget_limit_field(fake_openai.base_url + "/")
    assert make_provider().limit_field == "max_tokens"


async def test_check_makes_the_call_a_turn_makes_and_fails_where_turns_would(
    fake_openai: FakeOpenAIServer, make_provider: MakeProvider
) -> None:
    # The model is listed, but the server refuses tool_choice (vLLM without a tool parser):
    # every turn would fail, so the doctor must too.
    fake_openai.refused_params = {"tool_choice"}
    with pytest.raises(ModelError, match="tool_choice"):
        await make_provider().check()
    (probe,) = fake_openai.chat_requests
    assert probe["tools"] and probe["tool_choice"] == "auto" and "max_tokens" in probe


async def _ignore(_text: str) -> None:
    return None


@pytest.mark.parametrize(
    "body",
    ["<html>502 Bad Gateway</html>", '{"choices": ' + "[" * 100_000 + "]" * 100_000 + "}"],
)
async def test_a_body_that_does_not_parse_is_a_model_error(body: str) -> None:
    async def answer(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(text=body, content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    provider = OpenAIProvider(
        FAKE_MODEL, base_url=f"http://127.0.0.1:{runner.addresses[0][1]}/v1", max_retries=0
    )
    try:
        with pytest.raises(ModelError, match="gave an unusable answer"):
            await provider.complete(HELLO, [])
    finally:
        await provider.aclose()
        await runner.cleanup()


async def test_an_error_event_in_the_middle_of_a_stream_is_a_model_error() -> None:
    chunk = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": FAKE_MODEL,
        "choices": [{"index": 0, "delta": {"content": "Hel"}, "finish_reason": None}],
    }

    async def answer(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await response.write(b'data: {"error": {"message": "the model is overloaded"}}\n\n')
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    provider = OpenAIProvider(
        FAKE_MODEL, base_url=f"http://127.0.0.1:{runner.addresses[0][1]}/v1", max_retries=0
    )
    heard: list[str] = []

    async def on_text(piece: str) -> None:
        heard.append(piece)

    try:
        with pytest.raises(
            ModelError, match="sent an error in its answer: the model is overloaded"
        ):
            await provider.stream(HELLO, [], on_text=on_text)
        assert heard == ["Hel"]
    finally:
        await provider.aclose()
        await runner.cleanup()
