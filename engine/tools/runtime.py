"""ToolRuntime: runs one model batch of tool calls (docs/goals.md).

A call runs in parallel only when its tool's ``is_concurrency_safe(args)`` returns exactly
``True``; a missing method, an exception or any other value (truthy included) makes it
exclusive. An exclusive call is an ordering barrier: every call before it has finished when it
starts, and none after it starts before it ends. Consecutive safe calls run together.

For each call, in this order: look the tool up, validate the arguments (the tool's pydantic
``args_model`` when it has one, else its JSON ``parameters``), the boundary's refusal of a
hidden path argument (``Boundary.refuse_hidden`` over the path arguments the tool declares,
engine.tools.effects: before the gate, so no approval request ever shows or asks about a file
the agent may not see), ask the gate, the boundary's refusal of a path the tool declares it
writes and may not write now (``Boundary.refuse_write``), run. Every failure
becomes an error :class:`ToolOutcome` for the model, never an exception to the caller (a
cancellation still propagates). Results come back in call order.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError

from engine.text import clean_text
from engine.tools.base import Tool, ToolContext, ToolOutcome
from engine.tools.effects import ToolRegistry, declaration_of
from engine.tools.schema import check_schema

log = logging.getLogger("plangate.tools.runtime")


@dataclass(frozen=True, slots=True)
class ToolCallRequest:
    """One call from the model: its id, the tool name and the parsed arguments."""

    call_id: str
    name: str
    arguments: dict[str, Any]


# None allows the call; a string denies it and is returned to the model as an error result.
Gate = Callable[[ToolCallRequest, ToolContext], Awaitable[str | None]]
# The argument names that carry a path in any tool, declared or not (checked for every tool).
PATH_ARGUMENTS = ("path", "file_path")


class PathCheck(Protocol):
    """The boundary's checks of a call's path arguments (engine.tools.boundary)."""

    async def refuse_hidden(
        self, arguments: dict[str, Any], ctx: ToolContext, *, paths: Sequence[str] = ...
    ) -> str | None:
        """The refusal of a path argument naming a hidden path, else ``None``."""
        ...

    async def refuse_write(
        self, arguments: dict[str, Any], ctx: ToolContext, *, paths: Sequence[str]
    ) -> str | None:
        """The refusal of a written path argument the call may not write now, else ``None``."""
        ...


def _error(text: str) -> ToolOutcome:
    return ToolOutcome(content=f"error: {text}", is_error=True)


def _format_validation(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err.get("loc", ())) or "arguments"
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    return "; ".join(parts)


class ToolRuntime:
    """The tools a turn may call, with the gate that runs before each call."""

    def __init__(
        self, tools: Sequence[Tool], *, gate: Gate | None = None, paths: PathCheck | None = None
    ) -> None:
        # The one list of the agent's tools, with what each declares it does.
        self.registry = ToolRegistry(tools)
        self._tools: dict[str, Tool] = {tool.name: tool for tool in self.registry}
        self._gate = gate
        self._paths = paths

    def specs(self) -> list[dict[str, Any]]:
        """OpenAI function-tool specs, in registration order."""
        return [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                },
            }
            for tool in self._tools.values()
        ]

    def tool(self, name: str) -> Tool | None:
        """The registered tool called ``name``, if any."""
        return self._tools.get(name)

    def is_parallel(self, call: ToolCallRequest) -> bool:
        """Whether ``call`` may run beside other parallel calls (fail closed: exclusive)."""
        tool = self._tools.get(call.name)
        method = getattr(tool, "is_concurrency_safe", None)
        if tool is None or not callable(method):
            return False
        try:
            answer = method(call.arguments)
        except Exception as exc:
            log.info(
                "plangate.tools.runtime.concurrency_check_failed tool=%s error=%s", call.name, exc
            )
            return False
        return answer is True

    async def run_batch(
        self, calls: Sequence[ToolCallRequest], ctx: ToolContext
    ) -> list[ToolOutcome]:
        """Run ``calls`` with the ordering rules above; one outcome per call, in call order."""
        results: list[ToolOutcome | None] = [None] * len(calls)
        group: list[int] = []

        async def flush() -> None:
            if not group:
                return
            outcomes = await asyncio.gather(*(self._run_one(calls[i], ctx) for i in group))
            for i, outcome in zip(group, outcomes, strict=True):
                results[i] = outcome
            group.clear()

        for index, call in enumerate(calls):
            if self.is_parallel(call):
                group.append(index)
                continue
            await flush()
            results[index] = await self._run_one(call, ctx)
        await flush()
        return [r if r is not None else _error("no result") for r in results]

    def _check_arguments(self, tool: Tool, arguments: Any) -> str | None:
        if not isinstance(arguments, dict):
            return "arguments must be a JSON object"
        model = getattr(tool, "args_model", None)
        if isinstance(model, type) and issubclass(model, BaseModel):
            try:
                model.model_validate(arguments)
            except ValidationError as exc:
                return _format_validation(exc)
            return None
        try:
            schema = tool.parameters
        except Exception:
            return "the tool's argument schema is unavailable"
        problems = check_schema(arguments, schema) if isinstance(schema, dict) else []
        return "; ".join(problems) or None

    async def _run_one(self, call: ToolCallRequest, ctx: ToolContext) -> ToolOutcome:
        outcome = await self._outcome(call, ctx)
        # A result must serialise (the log, the model): a file name that is not UTF-8 comes
        # from the file system as lone surrogates, shown here as U+FFFD, whatever the tool.
        content = clean_text(outcome.content)
        return outcome if content is outcome.content else replace(outcome, content=content)

    async def _outcome(self, call: ToolCallRequest, ctx: ToolContext) -> ToolOutcome:
        tool = self._tools.get(call.name)
        if tool is None:
            known = ", ".join(sorted(self._tools)) or "none"
            return _error(f"unknown tool {call.name!r}; available tools: {known}")
        problem = self._check_arguments(tool, call.arguments)
        if problem is not None:
            return _error(f"invalid arguments for {call.name}: {problem}")
        declared = declaration_of(tool)
        if self._paths is not None:
            names = (*PATH_ARGUMENTS, *(declared.path_args() if declared is not None else ()))
            refused = await self._paths.refuse_hidden(
                call.arguments, ctx, paths=tuple(dict.fromkeys(names))
            )
            if refused is not None:
                return ToolOutcome(content=refused, is_error=True)
        if self._gate is not None:
            try:
                denied = await self._gate(call, ctx)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a broken gate denies: fail closed
                log.warning(
                    "plangate.tools.runtime.gate_failed tool=%s error=%s", call.name, type(exc)
                )
                denied = "the tool gate failed; the call was not run"
            if denied is not None:
                return ToolOutcome(content=denied, is_error=True)
        written = declared.path_args("write") if declared is not None else ()
        if self._paths is not None and written:
            refused = await self._paths.refuse_write(call.arguments, ctx, paths=written)
            if refused is not None:
                return ToolOutcome(content=refused, is_error=True)
        try:
            outcome = await tool.run(call.arguments, ctx)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # worker boundary: the model sees the failure, the turn goes on
            log.warning("plangate.tools.runtime.tool_failed tool=%s error=%s", call.name, type(exc))
            return _error(f"{call.name} failed: {type(exc).__name__}: {exc}")
        if not isinstance(outcome, ToolOutcome):
            return _error(f"{call.name} returned no result")
        return outcome


__all__ = ["PATH_ARGUMENTS", "Gate", "PathCheck", "ToolCallRequest", "ToolRuntime"]
