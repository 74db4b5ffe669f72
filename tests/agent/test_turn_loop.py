"""The turn loop with the scripted provider and an in-memory log."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from engine.agent.settings import AgentSettings
from engine.events import (
    AssistantMessage,
    HumanSource,
    ToolCall,
    ToolResult,
    TurnEnd,
    UserMessage,
)
from engine.model.script import ScriptedCall, ScriptStep, call, say
from engine.model.types import ModelError, ModelReply
from engine.tools.base import ToolContext
from engine.tools.runtime import ToolCallRequest
from tests.agent.harness import SID, make_agent
from tests.agent.proc_util import processes_with, unique_marker, wait_for_file


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


async def test_plain_answer_is_a_reply_to_the_opening_message(ws: Path) -> None:
    agent = make_agent(ws, [say("Hello!")])
    agent.registry.submit(SID, "hi", message_id="42")
    await agent.registry.wait_idle(SID)
    assert await agent.types() == [
        "turn/start",
        "user/message",
        "assistant/message",
        "turn/end",
    ]
    end = (await agent.events())[-1]
    assert isinstance(end, TurnEnd) and end.outcome == "completed"
    replies = agent.channel.of("reply")
    assert [(r.args["text"], r.args["reply_to"]) for r in replies] == [("Hello!", "42")]
    assert [c.args["outcome"] for c in agent.channel.of("turn_ended")] == ["completed"]
    assert agent.registry.is_idle(SID)


async def test_tool_call_round_trip_and_history(ws: Path) -> None:
    agent = make_agent(
        ws,
        [
            call("write_file", {"path": "notes.txt", "content": "abc"}),
            say("Wrote it.", expect="wrote 3 characters"),
            say("Second.", expect="again"),
        ],
    )
    agent.registry.submit(SID, "write notes", message_id="1")
    await agent.registry.wait_idle(SID)
    assert (ws / "notes.txt").read_text() == "abc"
    events = await agent.events()
    calls = [e for e in events if isinstance(e, ToolCall)]
    results = [e for e in events if isinstance(e, ToolResult)]
    assert [c.name for c in calls] == ["write_file"]
    assert results[0].call_id == calls[0].call_id and not results[0].is_error
    agent.registry.submit(SID, "again", message_id="2")
    await agent.registry.wait_idle(SID)
    last = agent.scripted.last_messages
    roles = [m["role"] for m in last]
    # system, turn 1 (user, assistant+call, tool, assistant), turn 2 user
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert last[2]["tool_calls"][0]["function"]["name"] == "write_file"
    assert [r.args["reply_to"] for r in agent.channel.of("reply")] == ["1", "2"]


async def test_max_steps_ends_the_turn(ws: Path) -> None:
    (ws / "f.txt").write_text("x")
    steps = [call("read_file", {"path": "f.txt"}) for _ in range(5)]
    agent = make_agent(ws, steps, settings=AgentSettings(max_steps=3))
    agent.registry.submit(SID, "loop")
    await agent.registry.wait_idle(SID)
    end = (await agent.events())[-1]
    assert isinstance(end, TurnEnd) and end.outcome == "max_steps"
    assert len(agent.scripted.requests) == 3
    assert "stopped after 3 steps" in agent.channel.of("reply")[-1].args["text"]


class FailingModel:
    async def complete(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        *,
        max_tokens: int | None = None,
    ) -> ModelReply:
        raise ModelError("server unreachable")


async def test_model_error_fails_the_turn_and_tells_the_chat(ws: Path) -> None:
    agent = make_agent(ws, FailingModel())
    agent.registry.submit(SID, "hi")
    await agent.registry.wait_idle(SID)
    end = (await agent.events())[-1]
    assert isinstance(end, TurnEnd) and end.outcome == "failed"
    assert "server unreachable" in agent.channel.of("notice")[0].args["text"]


async def test_invalid_json_arguments_become_an_error_result(ws: Path) -> None:
    bad = ScriptStep(tool_calls=(ScriptedCall("read_file", raw_arguments="{not json"),))
    agent = make_agent(ws, [bad, say("sorry", expect="not a valid JSON object")])
    agent.registry.submit(SID, "read")
    await agent.registry.wait_idle(SID)
    result = next(e for e in await agent.events() if isinstance(e, ToolResult))
    assert result.is_error and "not a valid JSON object" in result.content


async def test_unknown_tool_is_an_error_result_not_a_crash(ws: Path) -> None:
    agent = make_agent(ws, [say("done")])
    # The scripted provider refuses to call tools it was not offered, so drive the runtime.
    ctx = ToolContext(session_id=SID, workspace=ws, turn_id="t", source=HumanSource())
    outcome = await agent.registry.runtime.run_batch([ToolCallRequest("c1", "nope", {})], ctx)
    assert outcome[0].is_error and "unknown tool" in outcome[0].content


async def test_messages_queue_behind_a_running_turn(ws: Path) -> None:
    agent = make_agent(ws, [say("one"), say("two", expect="second")])
    agent.registry.submit(SID, "first", message_id="1")
    agent.registry.submit(SID, "second", message_id="2")
    assert not agent.registry.is_idle(SID)
    await agent.registry.wait_idle(SID)
    users = [e.text for e in await agent.events() if isinstance(e, UserMessage)]
    assert users == ["first", "second"]
    assert [r.args["text"] for r in agent.channel.of("reply")] == ["one", "two"]


async def test_stop_during_long_bash_kills_the_group_and_next_message_is_fresh(
    ws: Path,
) -> None:
    pidfile = ws / "pid"
    marker = f"300.{unique_marker()}"  # to find the sandboxed sleep among host processes
    agent = make_agent(
        ws,
        [
            call("bash", {"command": f"sleep {marker} & echo $! > {pidfile}; wait"}),
            say("fresh turn", expect="after stop"),
        ],
    )
    agent.registry.submit(SID, "run the long thing", message_id="1")
    await wait_for_file(pidfile)
    assert processes_with(f"sleep {marker}")
    agent.registry.submit(SID, "queued behind", message_id="2")
    dropped = await asyncio.wait_for(agent.registry.stop(SID), 30)
    assert [m.text for m in dropped] == ["queued behind"]
    assert processes_with(f"sleep {marker}") == []
    events = await agent.events()
    result = next(e for e in events if isinstance(e, ToolResult))
    assert result.interrupted and result.is_error
    end = events[-1]
    assert isinstance(end, TurnEnd) and end.outcome == "cancelled"
    assert agent.registry.is_idle(SID)
    assert agent.channel.of("reply") == []

    agent.registry.submit(SID, "after stop", message_id="3")
    await agent.registry.wait_idle(SID)
    events = await agent.events()
    starts = [e for e in events if e.type == "turn/start"]
    assert len(starts) == 2
    last_end = events[-1]
    assert isinstance(last_end, TurnEnd) and last_end.outcome == "completed"
    assert last_end.turn_id == starts[1].turn_id  # type: ignore[union-attr]
    assert agent.channel.of("reply")[-1].args == {"text": "fresh turn", "reply_to": "3"}
    # The cancelled turn's call and its synthetic result stay valid history for the model.
    roles = [m["role"] for m in agent.scripted.last_messages]
    assert roles == ["system", "user", "assistant", "tool", "user"]
    assert "ended early (cancelled)" in agent.scripted.last_messages[-1]["content"]


async def test_assistant_text_with_tool_calls_is_logged(ws: Path) -> None:
    agent = make_agent(ws, [call("list_files", {}, text="Looking around."), say("Nothing here.")])
    agent.registry.submit(SID, "look")
    await agent.registry.wait_idle(SID)
    texts = [e.text for e in await agent.events() if isinstance(e, AssistantMessage)]
    assert texts == ["Looking around.", "Nothing here."]
    assert [r.args["text"] for r in agent.channel.of("reply")] == ["Nothing here."]
