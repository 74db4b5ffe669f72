"""Checks a chat-completions request the way the OpenAI API does, before anything is sent.

The fake model server in tests and the scripted provider both run these checks, so a
conversation the agent builds wrongly (a tool result with no matching call, a call left
unanswered, a malformed tool spec) fails in tests exactly where the real API would refuse it.
The rules are the API's own; nothing here is stricter than the real server.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_TOOL_CHOICES = frozenset({"auto", "none", "required"})


def validate_messages(messages: object) -> list[str]:
    """Return what is wrong with a ``messages`` array, in order; ``[]`` when it is valid.

    Enforces the pairing rule: every assistant ``tool_calls`` id must be answered by a
    ``tool`` message before the next non-tool message, and a ``tool`` message must answer
    an id of the assistant message just before it.
    """
    if not isinstance(messages, list) or not messages:
        return ["messages: must be a non-empty array"]
    problems: list[str] = []
    open_ids: set[str] = set()  # tool-call ids of the last assistant message not yet answered
    in_tool_block = False  # whether we are right after an assistant tool_calls message
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            problems.append(f"{where}: must be an object")
            continue
        role = message.get("role")
        if role not in _ROLES:
            problems.append(f"{where}.role: must be one of {sorted(_ROLES)}, got {role!r}")
            continue
        if role != "tool" and open_ids:
            problems.append(
                f"{where}: an assistant message with 'tool_calls' must be followed by tool "
                f"messages responding to each 'tool_call_id'; missing {sorted(open_ids)}"
            )
            open_ids = set()
        if role == "tool":
            problems.extend(_check_tool_message(where, message, open_ids, in_tool_block))
            open_ids.discard(str(message.get("tool_call_id")))
            continue
        in_tool_block = False
        if role == "assistant":
            problems.extend(_check_content(where, message, allow_none=True))
            calls = message.get("tool_calls")
            if calls is not None:
                ids, call_problems = _check_tool_calls(where, calls)
                problems.extend(call_problems)
                open_ids = ids
                in_tool_block = bool(ids)
            elif message.get("content") is None:
                problems.append(f"{where}: assistant needs 'content' or 'tool_calls'")
        else:
            problems.extend(_check_content(where, message, allow_none=False))
    if open_ids:
        problems.append(
            "messages: an assistant message with 'tool_calls' must be followed by tool "
            f"messages responding to each 'tool_call_id'; missing {sorted(open_ids)}"
        )
    return problems


def validate_tools(tools: object, tool_choice: object = None) -> list[str]:
    """Return what is wrong with ``tools`` (and ``tool_choice``); ``[]`` when valid or absent."""
    problems: list[str] = []
    if tools is None:
        if tool_choice is not None:
            problems.append("tool_choice: only allowed when tools are specified")
        return problems
    if not isinstance(tools, list) or not tools:
        return ["tools: must be a non-empty array when present"]
    names: set[str] = set()
    for index, tool in enumerate(tools):
        where = f"tools[{index}]"
        if not isinstance(tool, dict) or tool.get("type") != "function":
            problems.append(f"{where}.type: must be 'function'")
            continue
        function = tool.get("function")
        if not isinstance(function, dict):
            problems.append(f"{where}.function: must be an object")
            continue
        name = function.get("name")
        if not isinstance(name, str) or not _TOOL_NAME.match(name):
            problems.append(f"{where}.function.name: must match {_TOOL_NAME.pattern}, got {name!r}")
        elif name in names:
            problems.append(f"{where}.function.name: duplicate tool name {name!r}")
        else:
            names.add(name)
        description = function.get("description")
        if description is not None and not isinstance(description, str):
            problems.append(f"{where}.function.description: must be a string")
        parameters = function.get("parameters")
        if parameters is not None and (
            not isinstance(parameters, dict) or parameters.get("type") != "object"
        ):
            problems.append(f"{where}.function.parameters: must be a JSON schema of type 'object'")
    if tool_choice is not None and not _known_choice(tool_choice, names):
        problems.append(f"tool_choice: must be one of {sorted(_TOOL_CHOICES)} or a known tool")
    return problems


def validate_request(
    messages: Sequence[dict[str, Any]] | object,
    tools: Sequence[dict[str, Any]] | object = None,
    tool_choice: object = None,
) -> list[str]:
    """Both checks at once: what a real server would answer with HTTP 400; ``[]`` when valid."""
    return validate_messages(messages) + validate_tools(tools, tool_choice)


def _known_choice(tool_choice: object, names: set[str]) -> bool:
    if isinstance(tool_choice, str):
        return tool_choice in _TOOL_CHOICES
    return (
        isinstance(tool_choice, dict)
        and tool_choice.get("type") == "function"
        and isinstance(tool_choice.get("function"), dict)
        and tool_choice["function"].get("name") in names
    )


def _check_content(where: str, message: dict[str, Any], *, allow_none: bool) -> list[str]:
    content = message.get("content")
    if content is None:
        return [] if allow_none else [f"{where}.content: required"]
    if isinstance(content, str):
        return []
    if isinstance(content, list) and all(
        isinstance(part, dict) and isinstance(part.get("type"), str) for part in content
    ):
        return []
    return [f"{where}.content: must be a string or an array of content parts"]


def _check_tool_calls(where: str, calls: object) -> tuple[set[str], list[str]]:
    if not isinstance(calls, list) or not calls:
        return set(), [f"{where}.tool_calls: must be a non-empty array when present"]
    ids: set[str] = set()
    problems: list[str] = []
    for index, call in enumerate(calls):
        at = f"{where}.tool_calls[{index}]"
        if not isinstance(call, dict):
            problems.append(f"{at}: must be an object")
            continue
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            problems.append(f"{at}.id: must be a non-empty string")
        elif call_id in ids:
            problems.append(f"{at}.id: duplicate id {call_id!r}")
        else:
            ids.add(call_id)
        if call.get("type") != "function":
            problems.append(f"{at}.type: must be 'function'")
        function = call.get("function")
        if not isinstance(function, dict):
            problems.append(f"{at}.function: must be an object")
            continue
        if not isinstance(function.get("name"), str):
            problems.append(f"{at}.function.name: must be a string")
        if not isinstance(function.get("arguments"), str):
            problems.append(f"{at}.function.arguments: must be a string (JSON text)")
    return ids, problems


def _check_tool_message(
    where: str, message: dict[str, Any], open_ids: set[str], in_tool_block: bool
) -> list[str]:
    call_id = message.get("tool_call_id")
    problems = _check_content(where, message, allow_none=False)
    if not isinstance(call_id, str) or not call_id:
        problems.append(f"{where}.tool_call_id: required")
    elif not in_tool_block:
        problems.append(
            f"{where}: messages with role 'tool' must be a response to a preceding message "
            "with 'tool_calls'"
        )
    elif call_id not in open_ids:
        problems.append(
            f"{where}.tool_call_id: {call_id!r} does not answer an open call of the preceding "
            "assistant message"
        )
    return problems
