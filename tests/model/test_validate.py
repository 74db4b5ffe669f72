"""The request checks the fake server and the scripted provider share."""

from __future__ import annotations

from typing import Any

import pytest

from engine.model.validate import validate_messages, validate_request, validate_tools

GREP = {"type": "function", "function": {"name": "grep", "parameters": {"type": "object"}}}


def calls(*ids: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "grep", "arguments": "{}"}}
            for i in ids
        ],
    }


def result(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": "ok"}


SYSTEM = {"role": "system", "content": "s"}
USER = {"role": "user", "content": "u"}


def test_a_full_tool_conversation_is_valid() -> None:
    messages = [
        SYSTEM,
        USER,
        calls("a", "b"),
        result("b"),
        result("a"),
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": [{"type": "text", "text": "again"}]},
    ]

    assert validate_request(messages, [GREP], "auto") == []
    assert validate_request(messages, None) == []


@pytest.mark.parametrize(
    ("messages", "problem"),
    [
        ([], "non-empty array"),
        ([{"role": "robot", "content": "x"}], "role: must be one of"),
        ([{"role": "user"}], "content: required"),
        ([{"role": "user", "content": 3}], "string or an array of content parts"),
        ([{"role": "assistant"}], "needs 'content' or 'tool_calls'"),
        ([USER, result("a")], "must be a response to a preceding message with 'tool_calls'"),
        ([USER, calls("a"), result("b")], "'b' does not answer an open call"),
        ([USER, calls("a", "b"), result("a"), USER], "missing ['b']"),
        ([USER, calls("a")], "missing ['a']"),
        ([USER, calls("a", "a"), result("a")], "duplicate id 'a'"),
        ([USER, calls("a"), result("a"), result("a")], "'a' does not answer an open call"),
        ([USER, {"role": "assistant", "tool_calls": []}], "tool_calls: must be a non-empty"),
        ([USER, calls("a"), {"role": "tool", "content": "x"}], "tool_call_id: required"),
    ],
)
def test_invalid_messages(messages: list[dict[str, Any]], problem: str) -> None:
    problems = validate_messages(messages)

    assert any(problem in p for p in problems), problems


def test_arguments_must_be_json_text() -> None:
    message = calls("a")
    message["tool_calls"][0]["function"]["arguments"] = {"already": "parsed"}

    assert "must be a string (JSON text)" in " ".join(validate_messages([USER, message]))


@pytest.mark.parametrize(
    ("tools", "tool_choice", "problem"),
    [
        ([], None, "non-empty array"),
        ([{"type": "function"}], None, "function: must be an object"),
        ([{"function": {"name": "x"}}], None, "type: must be 'function'"),
        ([{"type": "function", "function": {"name": "has space"}}], None, "name: must match"),
        ([GREP, GREP], None, "duplicate tool name 'grep'"),
        (
            [{"type": "function", "function": {"name": "x", "parameters": {"type": "array"}}}],
            None,
            "of type 'object'",
        ),
        ([GREP], "sometimes", "tool_choice: must be one of"),
        ([GREP], {"type": "function", "function": {"name": "nope"}}, "or a known tool"),
        (None, "auto", "only allowed when tools are specified"),
    ],
)
def test_invalid_tools(tools: Any, tool_choice: Any, problem: str) -> None:
    problems = validate_tools(tools, tool_choice)

    assert any(problem in p for p in problems), problems


def test_a_named_tool_choice_is_valid() -> None:
    assert validate_tools([GREP], {"type": "function", "function": {"name": "grep"}}) == []
    assert validate_tools([GREP], "required") == []
