"""One contract, run against every ModelProvider: the scripted one and OpenAI over the wire."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import aiohttp
import pytest

from engine.model.openai_provider import OpenAIProvider
from engine.model.script import FINISHED_TEXT, ScriptStep, call, say
from engine.model.scripted import ScriptedProvider
from engine.model.types import ModelError, ModelProvider
from tests.fakes.openai_server import FAKE_MODEL, FakeOpenAIServer

PLAN = {"type": "function", "function": {"name": "plan", "parameters": {"type": "object"}}}
WRITE = {"type": "function", "function": {"name": "write_file", "parameters": {"type": "object"}}}
TOOLS = [PLAN, WRITE]
USER = [{"role": "user", "content": "plan it"}]

Factory = Callable[[Sequence[ScriptStep]], ModelProvider]


@pytest.fixture(params=["scripted", "openai"])
async def make(request: pytest.FixtureRequest) -> AsyncIterator[Factory]:
    if request.param == "scripted":
        yield ScriptedProvider
        return
    async with FakeOpenAIServer() as server:
        providers: list[OpenAIProvider] = []

        def factory(steps: Sequence[ScriptStep]) -> ModelProvider:
            server.play(steps)
            provider = OpenAIProvider(FAKE_MODEL, base_url=server.base_url, max_retries=0)
            providers.append(provider)
            return provider

        yield factory
        for provider in providers:
            await provider.aclose()


def echo(reply_calls: Sequence[Any], contents: Sequence[str]) -> list[dict[str, Any]]:
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                }
                for c in reply_calls
            ],
        },
        *(
            {"role": "tool", "tool_call_id": c.id, "content": text}
            for c, text in zip(reply_calls, contents, strict=True)
        ),
    ]


async def test_a_planning_conversation(make: Factory) -> None:
    provider = make(
        [
            call("plan", {"op": "init", "title": "T"}, text="Starting a plan."),
            call("write_file", {"path": "{plan_md}", "content": "# T\n"}, expect="/p/x.md"),
            say("Written.", expect="wrote"),
        ]
    )

    first = await provider.complete(USER, TOOLS)
    conversation = [*USER, *echo(first.tool_calls, ["Write the plan to /p/x.md"])]
    second = await provider.complete(conversation, TOOLS)
    conversation += echo(second.tool_calls, ["wrote 4 bytes"])
    third = await provider.complete(conversation, TOOLS)
    conversation += [{"role": "assistant", "content": third.text}, {"role": "user", "content": "?"}]
    fourth = await provider.complete(conversation, TOOLS)

    assert first.text == "Starting a plan."
    assert [(c.name, c.arguments) for c in first.tool_calls] == [
        ("plan", {"op": "init", "title": "T"})
    ]
    assert [(c.name, c.arguments) for c in second.tool_calls] == [
        ("write_file", {"path": "/p/x.md", "content": "# T\n"})
    ]
    assert (third.text, third.tool_calls) == ("Written.", ())
    assert fourth.text == FINISHED_TEXT


async def test_divergence_is_a_model_error(make: Factory) -> None:
    provider = make([say("x", expect="something else")])

    with pytest.raises(ModelError, match="expected 'something else'"):
        await provider.complete(USER, TOOLS)


async def test_a_malformed_conversation_is_a_model_error(make: Factory) -> None:
    provider = make([say("x")])
    orphan = [*USER, {"role": "tool", "tool_call_id": "nope", "content": "x"}]

    with pytest.raises(ModelError, match="preceding message with 'tool_calls'"):
        await provider.complete(orphan, TOOLS)


async def test_the_fake_server_refuses_what_the_sdk_would_not_catch() -> None:
    async with FakeOpenAIServer() as server, aiohttp.ClientSession() as http:
        url = f"{server.base_url}/chat/completions"
        bad_tools = {"model": FAKE_MODEL, "messages": USER, "tools": [{"type": "function"}]}
        no_model = {"messages": USER}
        for body in (bad_tools, no_model):
            async with http.post(url, json=body) as response:
                assert response.status == 400
                assert (await response.json())["error"]["type"] == "invalid_request_error"
        # A stream of a conversation that is itself malformed is refused before any event.
        bad_stream = {"model": FAKE_MODEL, "messages": [], "stream": True}
        async with http.post(url, json=bad_stream) as response:
            assert response.status == 400
        async with http.get(f"{server.base_url}/models") as response:
            listed = await response.json()

    assert [m["id"] for m in listed["data"]] == [FAKE_MODEL]
    assert len(server.errors) == 3
    assert len(server.requests) == 4
