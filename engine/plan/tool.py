"""The ``plan`` tool: one tool, one ``op`` argument (docs/plan-json-spec.md).

Argument names are a contract: ``init {title, mode?, tasks?, file_path?}``,
``add_tasks {tasks}``, ``add_task {title, description?, acceptance_criteria?, dependencies?}``
(alias of a one-task ``add_tasks``), ``start {task_id?}``, ``complete {task_id?, evidence?}``,
``skip {task_id?, reason}``, ``submit {}``, ``show {}``. Every mistake returns a fixed text
with a stable code (engine.plan.refusals) as an error result.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from engine.events import is_attended
from engine.plan.importer import parse_task_spec, parse_task_specs
from engine.plan.refusals import refusal
from engine.plan.service import PlanResult, PlanService
from engine.tools.base import ToolContext, ToolOutcome
from engine.tools.effects import BUILTIN

OPS = ("init", "add_tasks", "add_task", "start", "complete", "skip", "submit", "show")

_TASK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "description": {"type": "string"},
        "acceptance_criteria": {"type": "array", "items": {"type": "string"}},
        "dependencies": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["title"],
}

DESCRIPTION = (
    "Plan work before changing the project, and track a checklist. "
    "op=init {title, mode?, tasks?, file_path?}: no tasks (or mode=design) opens a design plan "
    "and returns the path of its .md, which you write in template B, then op=submit and end "
    "your turn so the owner can approve; tasks (or mode=checklist) start a checklist at once; "
    "file_path imports tasks from a workspace file. "
    "op=add_tasks {tasks} (add_task {title, ...} for one) appends tasks to an active checklist. "
    "op=start {task_id?} starts the next task; op=complete {task_id?, evidence?} and "
    "op=skip {task_id?, reason} finish the task in progress. A task with checks (commands its "
    "Done when names) completes only when plangate runs them and they pass (you get the "
    "failing output otherwise); skipping it asks the owner. op=show prints the plan."
)


def _opt_str(args: dict[str, Any], key: str) -> str | None:
    value = args.get(key)
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value if isinstance(value, str) else None


# Asks the owner about a call (``what`` is the line the owner reads): ``None`` when allowed,
# else the denial the model is told. A skip of a task with checks goes through it.
OwnerAsk = Callable[[ToolContext, str], Awaitable[str | None]]


def _outcome(result: PlanResult) -> ToolOutcome:
    return ToolOutcome(content=result.text, is_error=not result.ok)


class PlanTool:
    """The model-facing ``plan`` tool over a :class:`PlanService`."""

    name = "plan"
    declaration = BUILTIN["plan"]
    description = DESCRIPTION

    def __init__(self, plans: PlanService, *, ask_owner: OwnerAsk | None = None) -> None:
        self._plans = plans
        self._ask_owner = ask_owner

    @property
    def parameters(self) -> dict[str, Any]:
        """The JSON schema of the arguments object."""
        return {
            "type": "object",
            "properties": {
                "op": {"type": "string", "enum": list(OPS)},
                "title": {"type": "string"},
                "mode": {"type": "string", "enum": ["design", "checklist"]},
                "tasks": {"type": "array", "items": _TASK_SCHEMA},
                "file_path": {"type": "string"},
                "description": {"type": "string"},
                "acceptance_criteria": {"type": "array", "items": {"type": "string"}},
                "dependencies": {"type": "array", "items": {"type": "string"}},
                "task_id": {"type": "string"},
                "evidence": {"type": "string"},
                "reason": {"type": "string"},
            },
            "required": ["op"],
        }

    def is_concurrency_safe(self, args: dict[str, Any]) -> object:
        """Never: every op reads or changes the plan in order."""
        return False

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        """Dispatch on ``op``; refusals come back as error results with fixed texts."""
        op = args.get("op")
        sid = ctx.session_id
        plans = self._plans
        if op == "init":
            tasks = parse_task_specs(args.get("tasks"))
            title = args.get("title")
            if tasks is None:
                return _error("bad-task")
            mode = args.get("mode")
            return _outcome(
                await plans.init(
                    sid,
                    title=title if isinstance(title, str) else "",
                    mode=mode if mode is None or isinstance(mode, str) else str(mode),
                    tasks=tasks,
                    file_path=_opt_str(args, "file_path"),
                    workspace=ctx.workspace,
                    # A design plan waits for a review nobody could give.
                    autonomous=not is_attended(ctx.source),
                )
            )
        if op == "add_tasks":
            specs = parse_task_specs(args.get("tasks"))
            if specs is None:
                return _error("bad-task")
            return _outcome(await plans.add_tasks(sid, specs))
        if op == "add_task":
            spec = parse_task_spec({k: v for k, v in args.items() if k != "op"})
            if spec is None:
                return _error("bad-task")
            return _outcome(await plans.add_tasks(sid, [spec]))
        if op == "start":
            return _outcome(await plans.start(sid, _opt_str(args, "task_id")))
        if op == "complete":
            return _outcome(
                await plans.complete(
                    sid,
                    _opt_str(args, "task_id"),
                    _opt_str(args, "evidence"),
                    workspace=ctx.workspace,
                )
            )
        if op == "skip":
            return await self._skip(_opt_str(args, "task_id"), _opt_str(args, "reason"), ctx)
        if op == "submit":
            return _outcome(await plans.submit(sid))
        if op == "show":
            return _outcome(await plans.show(sid))
        return _error("unknown-op")

    async def _skip(self, task_id: str | None, reason: str | None, ctx: ToolContext) -> ToolOutcome:
        """A skip; a task with checks is skipped only once the owner allowed it."""
        plans = self._plans
        need = await plans.gates(ctx.session_id, task_id)
        if need is None or not need.checked or reason is None or not reason.strip():
            return _outcome(await plans.skip(ctx.session_id, task_id, reason))
        if self._ask_owner is None:
            return _error("skip-needs-owner")
        checks = ", ".join(f"`{c}`" for c in need.commands)
        what = f"skip task {need.task.id} ({need.task.title}) without its checks {checks}: {reason}"
        denied = await self._ask_owner(ctx, what)
        if denied is not None:
            return ToolOutcome(
                content=f"{refusal('skip-needs-owner').text}\n{denied}", is_error=True
            )
        return _outcome(await plans.skip(ctx.session_id, need.task.id, reason, owner_approved=True))


def _error(code: str) -> ToolOutcome:
    return ToolOutcome(content=refusal(code).text, is_error=True)
