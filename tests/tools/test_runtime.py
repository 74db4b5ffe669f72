"""ToolRuntime: fail-closed classification, ordering barriers, call order, gate, errors."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from engine.events import HumanSource
from engine.goal.service import GoalService
from engine.goal.tools import goal_tools
from engine.plan.service import PlanService
from engine.plan.tool import PlanTool
from engine.testing import InMemoryEventLog
from engine.todo.tool import TodoWriteTool
from engine.tools.base import ToolContext, ToolOutcome
from engine.tools.runtime import ToolCallRequest, ToolRuntime
from storage.plan_files import FilePlanStore, SessionLocation

Trace = list[tuple[str, str]]


class Recorder:
    """A tool that records start and end, yielding to the loop ``hops`` times in between."""

    description = "records"
    parameters: dict[str, Any] = {"type": "object", "properties": {}}  # noqa: RUF012

    def __init__(self, name: str, trace: Trace, safe: object = True, hops: int = 2) -> None:
        self.name = name
        self._trace = trace
        self._safe = safe
        self._hops = hops

    def is_concurrency_safe(self, args: dict[str, Any]) -> object:
        if isinstance(self._safe, BaseException):
            raise self._safe
        return self._safe

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        self._trace.append(("start", self.name))
        for _ in range(self._hops):
            await asyncio.sleep(0)
        self._trace.append(("end", self.name))
        return ToolOutcome(content=f"{self.name} done")


class NoMethod:
    """A tool without ``is_concurrency_safe``: exclusive."""

    description = "no method"
    parameters: dict[str, Any] = {"type": "object"}  # noqa: RUF012

    def __init__(self, name: str, trace: Trace) -> None:
        self.name = name
        self._inner = Recorder(name, trace)

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        return await self._inner.run(args, ctx)


def ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(session_id="s", workspace=tmp_path, turn_id="t", source=HumanSource())


def call(name: str, i: int = 0, **args: Any) -> ToolCallRequest:
    return ToolCallRequest(call_id=f"{name}-{i}", name=name, arguments=args)


@pytest.mark.parametrize(
    ("safe", "parallel"),
    [
        (True, True),
        (False, False),
        (1, False),
        ("yes", False),
        ([True], False),
        (None, False),
        (RuntimeError("boom"), False),
    ],
)
def test_only_exact_true_is_parallel(safe: object, parallel: bool) -> None:
    runtime = ToolRuntime([Recorder("t", [], safe=safe)])
    assert runtime.is_parallel(call("t")) is parallel


def test_missing_method_and_unknown_tool_are_exclusive() -> None:
    runtime = ToolRuntime([NoMethod("n", [])])
    assert not runtime.is_parallel(call("n"))
    assert not runtime.is_parallel(call("ghost"))


async def test_safe_calls_overlap_and_exclusive_calls_are_barriers(tmp_path: Path) -> None:
    trace: Trace = []
    tools = [
        Recorder("a", trace),
        Recorder("b", trace),
        Recorder("x", trace, safe=1),  # truthy but not True: exclusive
        Recorder("c", trace),
        NoMethod("n", trace),
        Recorder("d", trace, safe=ValueError("no")),
    ]
    runtime = ToolRuntime(tools)
    calls = [call("a"), call("b"), call("x"), call("c"), call("c", 1), call("n"), call("d")]
    outcomes = await runtime.run_batch(calls, ctx(tmp_path))
    assert [o.content for o in outcomes] == [
        "a done",
        "b done",
        "x done",
        "c done",
        "c done",
        "n done",
        "d done",
    ]
    pos = {item: i for i, item in enumerate(trace)}
    # a and b ran together: both started before either ended.
    assert max(pos[("start", "a")], pos[("start", "b")]) < min(pos[("end", "a")], pos[("end", "b")])
    # x started after both ended, and nothing started while x ran.
    assert pos[("start", "x")] > max(pos[("end", "a")], pos[("end", "b")])
    assert trace[pos[("start", "x")] + 1] == ("end", "x")
    # the exclusive tail runs one at a time, in order.
    assert trace[-4:] == [("start", "n"), ("end", "n"), ("start", "d"), ("end", "d")]


async def test_results_in_call_order_when_finishing_out_of_order(tmp_path: Path) -> None:
    trace: Trace = []
    runtime = ToolRuntime([Recorder("slow", trace, hops=10), Recorder("fast", trace, hops=0)])
    outcomes = await runtime.run_batch([call("slow"), call("fast")], ctx(tmp_path))
    assert trace.index(("end", "fast")) < trace.index(("end", "slow"))
    assert [o.content for o in outcomes] == ["slow done", "fast done"]


async def test_gate_runs_before_each_call_and_denies(tmp_path: Path) -> None:
    trace: Trace = []
    seen: list[str] = []

    async def gate(request: ToolCallRequest, context: ToolContext) -> str | None:
        seen.append(request.call_id)
        trace.append(("gate", request.name))
        return "denied: plan mode" if request.name == "x" else None

    runtime = ToolRuntime([Recorder("a", trace), Recorder("x", trace, safe=False)], gate=gate)
    outcomes = await runtime.run_batch([call("a"), call("x"), call("a", 1)], ctx(tmp_path))
    assert seen == ["a-0", "x-0", "a-1"]
    assert outcomes[1] == ToolOutcome(content="denied: plan mode", is_error=True)
    assert ("start", "x") not in trace
    assert trace.index(("gate", "a")) < trace.index(("start", "a"))


async def test_failing_gate_fails_closed(tmp_path: Path) -> None:
    trace: Trace = []

    async def gate(request: ToolCallRequest, context: ToolContext) -> str | None:
        raise RuntimeError("gate bug")

    runtime = ToolRuntime([Recorder("a", trace)], gate=gate)
    [outcome] = await runtime.run_batch([call("a")], ctx(tmp_path))
    assert outcome.is_error and trace == []


class Args(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str
    limit: int = 10


class Typed:
    name = "typed"
    description = "typed args"
    args_model = Args
    parameters: dict[str, Any] = Args.model_json_schema()

    def __init__(self) -> None:
        self.runs = 0

    def is_concurrency_safe(self, args: dict[str, Any]) -> object:
        return True

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        self.runs += 1
        return ToolOutcome(content="ok")


class Schema:
    name = "schema"
    description = "schema args"
    parameters: dict[str, Any] = {  # noqa: RUF012
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 1}, "mode": {"enum": ["a", "b"]}},
        "required": ["n"],
        "additionalProperties": False,
    }

    def is_concurrency_safe(self, args: dict[str, Any]) -> object:
        return False

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        return ToolOutcome(content="ran")


class Broken:
    name = "broken"
    description = "raises"
    parameters: dict[str, Any] = {"type": "object"}  # noqa: RUF012

    def is_concurrency_safe(self, args: dict[str, Any]) -> object:
        return False

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        raise OSError("disk gone")


class NotAnOutcome(Broken):
    name = "weird"

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        return "plain text"  # type: ignore[return-value]


async def test_errors_become_outcomes_never_exceptions(tmp_path: Path) -> None:
    typed = Typed()
    runtime = ToolRuntime([typed, Schema(), Broken(), NotAnOutcome()])
    outcomes = await runtime.run_batch(
        [
            call("ghost"),
            call("typed", limit="many"),
            call("typed", path="a", extra=1),
            call("typed", path="a"),
            call("schema", n=0),
            call("schema", n=True),
            call("schema", n=2, mode="c"),
            call("schema", n=2, other=1),
            call("schema", n=2),
            call("broken"),
            call("weird"),
        ],
        ctx(tmp_path),
    )
    errors = [o.is_error for o in outcomes]
    assert errors == [True, True, True, False, True, True, True, True, False, True, True]
    assert "unknown tool 'ghost'" in outcomes[0].content and "typed" in outcomes[0].content
    assert "path" in outcomes[1].content and "limit" in outcomes[1].content
    assert "extra" in outcomes[2].content
    assert "at least 1" in outcomes[4].content
    assert "expected integer" in outcomes[5].content
    assert "one of" in outcomes[6].content
    assert "unexpected field" in outcomes[7].content
    assert "OSError" in outcomes[9].content and "disk gone" in outcomes[9].content
    assert typed.runs == 1


async def test_non_dict_arguments_are_an_error(tmp_path: Path) -> None:
    runtime = ToolRuntime([Schema()])
    request = ToolCallRequest(call_id="1", name="schema", arguments=[1, 2])  # type: ignore[arg-type]
    [outcome] = await runtime.run_batch([request], ctx(tmp_path))
    assert outcome.is_error and "JSON object" in outcome.content


async def test_cancellation_propagates(tmp_path: Path) -> None:
    started = asyncio.Event()

    class Hang(Schema):
        name = "hang"
        parameters: dict[str, Any] = {"type": "object"}  # noqa: RUF012

        async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
            started.set()
            await asyncio.Event().wait()
            return ToolOutcome(content="never")

    runtime = ToolRuntime([Hang()])
    task = asyncio.create_task(runtime.run_batch([call("hang")], ctx(tmp_path)))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_specs_and_duplicate_names() -> None:
    runtime = ToolRuntime([Schema()])
    assert runtime.specs() == [
        {
            "type": "function",
            "function": {
                "name": "schema",
                "description": "schema args",
                "parameters": Schema.parameters,
            },
        }
    ]
    with pytest.raises(ValueError):
        ToolRuntime([Schema(), Schema()])


def test_plan_goal_and_todo_tools_are_exclusive(tmp_path: Path) -> None:
    log = InMemoryEventLog()

    async def locate(session_id: str) -> SessionLocation:
        return SessionLocation(workspace=str(tmp_path))

    plans = PlanService(FilePlanStore(tmp_path, locate), log)
    tools: list[Any] = [PlanTool(plans), *goal_tools(GoalService(log)), TodoWriteTool(log)]
    runtime = ToolRuntime(tools)
    for tool in tools:
        for args in ({}, {"op": "show"}, {"todos": []}):
            request = ToolCallRequest(call_id="1", name=tool.name, arguments=args)
            assert not runtime.is_parallel(request)
    names = {spec["function"]["name"] for spec in runtime.specs()}
    assert names == {"plan", "get_goal", "create_goal", "update_goal", "todo_write"}
