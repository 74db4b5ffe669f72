"""The reply script and the scripted provider, in process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine.model.script import (
    FINISHED_TEXT,
    Script,
    ScriptDivergence,
    ScriptedCall,
    ScriptError,
    ScriptStep,
    call,
    plan_md_path,
    say,
)
from engine.model.scripted import InvalidRequest, ScriptedProvider
from engine.model.types import ModelError, ModelToolCall

PLAN = {"type": "function", "function": {"name": "plan", "parameters": {"type": "object"}}}
WRITE = {"type": "function", "function": {"name": "write_file", "parameters": {"type": "object"}}}
GREP = {"type": "function", "function": {"name": "grep", "parameters": {"type": "object"}}}
TOOLS = [PLAN, WRITE, GREP]
USER = [{"role": "user", "content": "plan a feature"}]


def assistant_call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }


def tool_result(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def answered(reply_call: ModelToolCall, content: str) -> list[dict[str, Any]]:
    return [
        assistant_call(reply_call.id, reply_call.name, reply_call.arguments),
        tool_result(reply_call.id, content),
    ]


async def test_scripted_provider_plays_steps_then_finishes() -> None:
    provider = ScriptedProvider([call("grep", {"pattern": "TODO"}), say("found none")])

    first = await provider.complete(USER, TOOLS)
    (grep,) = first.tool_calls
    conversation = [*USER, *answered(grep, "no matches")]
    second = await provider.complete(conversation, TOOLS)
    third = await provider.complete([*conversation, {"role": "assistant", "content": "x"}], TOOLS)

    assert (grep.id, grep.name, grep.arguments) == ("call_1_0", "grep", {"pattern": "TODO"})
    assert second.text == "found none"
    assert third.text == FINISHED_TEXT
    assert third.tool_calls == ()
    assert provider.script.finished


async def test_scripted_provider_records_copies_of_what_it_was_sent() -> None:
    provider = ScriptedProvider([say("a")])
    messages = [{"role": "user", "content": "first"}]

    await provider.complete(messages, [GREP])
    messages[0]["content"] = "changed afterwards"

    assert provider.requests == [[{"role": "user", "content": "first"}]]
    assert provider.last_messages == [{"role": "user", "content": "first"}]
    assert provider.tool_specs == [[GREP]]


async def test_plan_md_placeholder_resolves_from_the_latest_plan_result() -> None:
    provider = ScriptedProvider(
        [
            call("plan", {"op": "init", "title": "Feature"}),
            call("write_file", {"path": "{plan_md}", "content": "# {not_a_placeholder}"}),
        ]
    )
    init = (await provider.complete(USER, TOOLS)).tool_calls[0]
    md_path = "/home/me/.plangate/projects/app-1a2b3c4d/session/.plangate_plan_abc.md"
    conversation = [
        *USER,
        *answered(init, f"Plan started. Write the design to {md_path}, then call submit."),
    ]

    (write,) = (await provider.complete(conversation, TOOLS)).tool_calls

    assert write.arguments == {"path": md_path, "content": "# {not_a_placeholder}"}


def test_plan_md_ignores_other_tools_and_takes_the_newest_plan_result() -> None:
    messages = [
        *USER,
        assistant_call("c1", "plan", {"op": "init"}),
        tool_result("c1", "Write it to /old/plan.md."),
        assistant_call("c2", "plan", {"op": "show"}),
        tool_result("c2", "The plan file is `/new/.plangate_plan_x.md`."),
        assistant_call("c3", "grep", {"pattern": "x"}),
        tool_result("c3", "/elsewhere/README.md:1: x"),
    ]

    assert plan_md_path(messages) == "/new/.plangate_plan_x.md"
    assert plan_md_path(messages[:3]) == "/old/plan.md"
    assert plan_md_path(USER) is None


async def test_unresolvable_placeholder_is_a_divergence() -> None:
    provider = ScriptedProvider([call("write_file", {"path": "{plan_md}", "content": "x"})])

    with pytest.raises(ScriptDivergence, match=r"placeholder \{plan_md\}"):
        await provider.complete(USER, TOOLS)


async def test_expect_mismatch_names_the_step_and_does_not_advance() -> None:
    provider = ScriptedProvider([say("ok", expect="plan a feature"), say("next", expect="yes")])
    await provider.complete(USER, TOOLS)
    conversation = [
        *USER,
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "no"},
    ]

    with pytest.raises(ScriptDivergence, match=r"script step 2 of 2 expected 'yes'.*'no'"):
        await provider.complete(conversation, TOOLS)
    assert provider.script.position == 1

    conversation[-1] = {"role": "user", "content": "yes please"}
    assert (await provider.complete(conversation, TOOLS)).text == "next"


async def test_expect_looks_only_at_input_after_the_last_assistant_message() -> None:
    provider = ScriptedProvider([say("seen", expect="plan a feature")])
    conversation = [*USER, {"role": "assistant", "content": "?"}, {"role": "user", "content": "go"}]

    with pytest.raises(ScriptDivergence):
        await provider.complete(conversation, TOOLS)


async def test_expect_reads_content_parts() -> None:
    provider = ScriptedProvider([say("seen", expect="needle")])
    parts = [{"role": "user", "content": [{"type": "text", "text": "hay needle hay"}]}]

    assert (await provider.complete(parts, TOOLS)).text == "seen"


async def test_calling_a_tool_that_was_not_offered_is_a_divergence() -> None:
    provider = ScriptedProvider([call("bash", {"command": "ls"})])

    with pytest.raises(ScriptDivergence, match=r"calls \['bash'\].*offered only"):
        await provider.complete(USER, TOOLS)


async def test_invalid_conversation_is_refused_like_the_real_api() -> None:
    provider = ScriptedProvider([say("never")])
    unanswered = [*USER, assistant_call("c1", "grep", {}), {"role": "user", "content": "hm"}]

    with pytest.raises(InvalidRequest, match="missing \\['c1'\\]") as caught:
        await provider.complete(unanswered, TOOLS)
    assert isinstance(caught.value, ModelError)
    assert provider.script.position == 0


async def test_raw_arguments_mimic_invalid_json_from_a_model() -> None:
    provider = ScriptedProvider(
        [ScriptStep(tool_calls=(ScriptedCall("grep", raw_arguments='{"pattern": '),))]
    )

    (bad,) = (await provider.complete(USER, TOOLS)).tool_calls

    assert (bad.arguments, bad.raw_arguments) == ({}, '{"pattern": ')


def test_load_a_script_file_in_both_shapes(tmp_path: Path) -> None:
    steps = [
        {"text": "Planning.", "tool_calls": [{"name": "plan", "arguments": {"op": "init"}}]},
        {"text": "Done.", "expect": "sent for review"},
    ]
    as_list = tmp_path / "list.json"
    as_list.write_text(json.dumps(steps), encoding="utf-8")
    as_object = tmp_path / "object.json"
    as_object.write_text(json.dumps({"steps": steps}), encoding="utf-8")

    for path in (as_list, as_object):
        script = Script.load(path)
        assert script.steps == (
            ScriptStep("Planning.", (ScriptedCall("plan", {"op": "init"}),)),
            ScriptStep("Done.", expect="sent for review"),
        )


def test_a_bad_script_file_fails_loudly_naming_it(tmp_path: Path) -> None:
    typo = tmp_path / "typo.json"
    typo.write_text(json.dumps([{"txt": "hello"}]), encoding="utf-8")
    broken = tmp_path / "broken.json"
    broken.write_text("[{", encoding="utf-8")

    with pytest.raises(ScriptError, match=r"typo\.json: invalid script: steps\.0\.txt: Extra"):
        Script.load(typo)
    with pytest.raises(ScriptError, match=r"broken\.json"):
        Script.load(broken)
    with pytest.raises(ScriptError, match=r"missing\.json"):
        Script.load(tmp_path / "missing.json")


async def test_from_file_builds_a_provider(tmp_path: Path) -> None:
    path = tmp_path / "demo.json"
    path.write_text(json.dumps([{"text": "hello from the file"}]), encoding="utf-8")

    reply = await ScriptedProvider.from_file(path).complete(USER, [])

    assert reply.text == "hello from the file"
