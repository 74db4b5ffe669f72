"""What each tool does, declared once: the registry every rule reads (docs/security.md).

A tool's safety must not come from its name. Each tool carries a :class:`Declaration`: its
effects (per operation where one tool has several, like the ``plan`` tool's ``op``), which of
its arguments are paths (read or written), and, for a writing tool, how the file reads after
the call (the approval preview's diff). Everything that judges a call reads the declaration,
never the tool's name:

- the plan gate (engine.plan.gate.check_gate over the effect x plan-state table
  :data:`GATE_TABLE`);
- tool approvals (a ``shell`` call follows the bash policy, a ``write`` call asks when
  ``PLANGATE_ASK_WRITES`` is on) and their preview;
- progress, the one rule both the stuck detector and a goal's idle rounds read
  (engine.progress.rule): a step that may change files is judged by the workspace snapshot;
- the boundary (the declared path arguments, read or written, are checked before the call).

:class:`ToolRegistry` is the one list of the tools a running agent has; a tool without a
declaration, or an operation its declaration does not name, has the effect ``undeclared``,
which is refused while a plan is being written and in goal rounds.

:data:`BUILTIN` holds the declarations of plangate's own tools (each tool class points at its
entry); a tool added later brings its own ``declaration`` and needs no other file changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

# What a call can do. ``checklist``: changes the plan's tasks (add, start, complete, skip);
# ``plan``: starts a plan (init); ``review``: sends the plan for the owner's review (submit);
# ``ask``: asks the person a question and waits; ``undeclared``: anything not declared.
Effect = Literal[
    "read",
    "write",
    "shell",
    "network",
    "ask",
    "send",
    "plan",
    "review",
    "checklist",
    "todo",
    "goal",
    "undeclared",
]
EFFECTS: tuple[Effect, ...] = (
    "read",
    "write",
    "shell",
    "network",
    "ask",
    "send",
    "plan",
    "review",
    "checklist",
    "todo",
    "goal",
    "undeclared",
)
PathUse = Literal["read", "write"]
# The file's text after a write, from its text before and the call's arguments (None: the
# write would not apply, or cannot be told in advance).
AfterWrite = Callable[[str, Mapping[str, Any]], "str | None"]

# The plan states the gate knows (engine.plan.types.PlanState) plus the goal-round column,
# which applies on top of the plan state's own rule.
GateColumn = Literal["none", "pre_init", "post_init", "active", "goal_round"]
GATE_COLUMNS: tuple[GateColumn, ...] = ("none", "pre_init", "post_init", "active", "goal_round")
# A cell: allow, deny with a refusal code, or ``md-only``: a write whose every written path is
# the session plan .md (post-init; the size limit applies), ``md-frozen``: any write but to
# the .md (Active).
Cell = str
ALLOW = "allow"
MD_ONLY = "md-only"
MD_FROZEN = "md-frozen"


@dataclass(frozen=True, slots=True)
class Declaration:
    """What one tool does.

    ``effects``: the tool's effects when it has one operation. ``ops``: the effects per value of
    the ``op_key`` argument (an op not listed is undeclared). ``flags``: a boolean argument that
    adds an effect when it is ``true`` (bash's ``network``). ``paths``: the arguments that name
    a path, and whether the tool reads or writes it. ``after``: for a writing tool, the file's
    text after the call (the approval preview). ``summary``: one line for the docs' table.
    """

    effects: frozenset[Effect] = frozenset()
    ops: Mapping[str, frozenset[Effect]] = field(default_factory=dict)
    op_key: str = "op"
    flags: Mapping[str, Effect] = field(default_factory=dict)
    paths: Mapping[str, PathUse] = field(default_factory=dict)
    after: AfterWrite | None = None
    summary: str = ""

    def effects_of(self, args: Mapping[str, Any]) -> frozenset[Effect]:
        """The effects of one call with ``args`` (``{"undeclared"}`` for an unknown op)."""
        if self.ops:
            op = args.get(self.op_key)
            found = self.ops.get(op) if isinstance(op, str) else None
            if found is None:
                return frozenset({"undeclared"})
            base = found
        else:
            base = self.effects or frozenset({"undeclared"})
        extra = {effect for name, effect in self.flags.items() if args.get(name) is True}
        return base | extra

    def path_args(self, use: PathUse | None = None) -> tuple[str, ...]:
        """The argument names that carry a path (only those read or written, with ``use``)."""
        return tuple(name for name, how in self.paths.items() if use is None or how == use)

    def all_effects(self) -> frozenset[Effect]:
        """Every effect any call of the tool can have (for the docs' table)."""
        every: set[Effect] = set(self.effects)
        for effects in self.ops.values():
            every |= effects
        every |= set(self.flags.values())
        return frozenset(every)


UNDECLARED: frozenset[Effect] = frozenset({"undeclared"})


def declare(
    *effects: Effect,
    paths: Mapping[str, PathUse] | None = None,
    flags: Mapping[str, Effect] | None = None,
    after: AfterWrite | None = None,
    summary: str = "",
) -> Declaration:
    """A one-operation tool's declaration: ``declare("write", paths={"path": "write"})``."""
    return Declaration(
        effects=frozenset(effects),
        flags=dict(flags or {}),
        paths=dict(paths or {}),
        after=after,
        summary=summary,
    )


def declaration_of(tool: object) -> Declaration | None:
    """The tool's declaration, ``None`` when it has none (every call is then undeclared)."""
    found = getattr(tool, "declaration", None)
    return found if isinstance(found, Declaration) else None


def effects_of(declared: Declaration | None, args: Mapping[str, Any]) -> frozenset[Effect]:
    """The effects of a call of a tool declared ``declared`` (undeclared without one)."""
    return declared.effects_of(args) if declared is not None else UNDECLARED


# --- the gate: effect x plan state --------------------------------------------------------

# Refusal codes the gate returns; their texts are in engine.plan.gate (GATE_TEXTS) and
# engine.plan.refusals (the checklist ones).
GATE_TABLE: dict[Effect, dict[GateColumn, Cell]] = {
    "read": {
        "none": ALLOW,
        "pre_init": ALLOW,
        "post_init": ALLOW,
        "active": ALLOW,
        "goal_round": ALLOW,
    },
    "write": {
        "none": ALLOW,
        "pre_init": "gate-pre-init-write",
        "post_init": MD_ONLY,
        "active": MD_FROZEN,
        "goal_round": ALLOW,
    },
    "shell": {
        "none": ALLOW,
        "pre_init": ALLOW,  # the workspace is mounted read-only
        "post_init": "gate-editing-bash",
        "active": ALLOW,
        "goal_round": ALLOW,
    },
    "network": {
        "none": ALLOW,  # approvals ask (leaving the sandbox)
        "pre_init": ALLOW,
        "post_init": "gate-editing-network",
        "active": ALLOW,
        "goal_round": ALLOW,  # approvals deny: nobody can answer
    },
    "ask": {
        "none": ALLOW,
        "pre_init": ALLOW,
        "post_init": ALLOW,
        "active": ALLOW,
        "goal_round": "gate-round-ask",
    },
    "send": {
        "none": ALLOW,
        "pre_init": "gate-editing-send",
        "post_init": "gate-editing-send",
        "active": ALLOW,
        "goal_round": ALLOW,
    },
    "plan": {
        "none": ALLOW,
        "pre_init": ALLOW,
        "post_init": "plan-live",
        "active": "plan-live",
        "goal_round": ALLOW,  # a design init is refused by the plan itself
    },
    "review": {
        "none": ALLOW,  # refused by the plan itself: nothing to review
        "pre_init": ALLOW,
        "post_init": ALLOW,
        "active": ALLOW,
        "goal_round": "gate-round-ask",
    },
    "checklist": {
        "none": ALLOW,
        "pre_init": "pre-init-checklist-blocked",
        "post_init": "editing-checklist-blocked",
        "active": ALLOW,
        "goal_round": ALLOW,
    },
    "todo": {
        "none": ALLOW,
        "pre_init": ALLOW,
        "post_init": ALLOW,
        "active": ALLOW,
        "goal_round": ALLOW,
    },
    "goal": {
        "none": ALLOW,
        "pre_init": ALLOW,
        "post_init": ALLOW,
        "active": ALLOW,
        "goal_round": ALLOW,
    },
    "undeclared": {
        "none": ALLOW,
        "pre_init": "gate-undeclared",
        "post_init": "gate-undeclared",
        "active": ALLOW,
        "goal_round": "gate-undeclared",
    },
}


def gate_cells(effects: Iterable[Effect], column: GateColumn) -> list[Cell]:
    """The table's cells for a call's effects in one column, denials first."""
    cells = {GATE_TABLE[effect][column] for effect in effects}
    special = (ALLOW, MD_ONLY, MD_FROZEN)
    return sorted(cells, key=lambda c: (c in special, c))


# --- the one list of tools -----------------------------------------------------------------


class ToolRegistry:
    """The tools one agent has, by name, with their declarations."""

    def __init__(self, tools: Iterable[Any]) -> None:
        self._tools: dict[str, Any] = {}
        for tool in tools:
            if tool.name in self._tools:
                raise ValueError(f"duplicate tool name {tool.name!r}")
            self._tools[tool.name] = tool

    def __iter__(self) -> Any:
        return iter(self._tools.values())

    def names(self) -> list[str]:
        return list(self._tools)

    def get(self, name: str) -> Any | None:
        return self._tools.get(name)

    def declaration(self, name: str) -> Declaration | None:
        """The declaration of the tool called ``name`` (``None``: unknown or undeclared)."""
        tool = self._tools.get(name)
        return declaration_of(tool) if tool is not None else None

    def effects(self, name: str, args: Mapping[str, Any]) -> frozenset[Effect]:
        """The effects of one call (``{"undeclared"}`` for an unknown or undeclared tool)."""
        return effects_of(self.declaration(name), args)


# --- plangate's own tools ------------------------------------------------------------------


def _write_file_after(before: str, args: Mapping[str, Any]) -> str | None:
    content = args.get("content")
    return content if isinstance(content, str) else None


def _edit_file_after(before: str, args: Mapping[str, Any]) -> str | None:
    old, new = args.get("old_text"), args.get("new_text")
    if not isinstance(old, str) or not isinstance(new, str) or not old:
        return None
    count = before.count(old)
    if args.get("replace_all") is True and count:
        return before.replace(old, new)
    return before.replace(old, new, 1) if count == 1 else None


_PLAN_OPS: dict[str, frozenset[Effect]] = {
    "show": frozenset({"read"}),
    "init": frozenset({"plan"}),  # file_path: an import reads a workspace file
    "submit": frozenset({"review"}),
    "add_tasks": frozenset({"checklist"}),
    "add_task": frozenset({"checklist"}),
    "start": frozenset({"checklist"}),
    "complete": frozenset({"checklist"}),
    "skip": frozenset({"checklist"}),
}

BUILTIN: dict[str, Declaration] = {
    "read_file": declare("read", paths={"path": "read"}, summary="read a file"),
    "list_files": declare("read", paths={"path": "read"}, summary="list a folder"),
    "grep": declare("read", paths={"path": "read"}, summary="search files"),
    "write_file": declare(
        "write", paths={"path": "write"}, after=_write_file_after, summary="write a whole file"
    ),
    "edit_file": declare(
        "write", paths={"path": "write"}, after=_edit_file_after, summary="replace text in a file"
    ),
    "bash": declare("shell", flags={"network": "network"}, summary="run a command in the sandbox"),
    "ask_user": declare("ask", summary="ask the owner a question"),
    "send_file": declare("send", paths={"path": "read"}, summary="attach a file to the chat"),
    "plan": Declaration(
        ops=_PLAN_OPS, paths={"file_path": "read"}, summary="the plan and its checklist"
    ),
    "todo_write": declare("todo", summary="replace the todo list"),
    "get_goal": declare("read", summary="show the goal"),
    "create_goal": declare("goal", summary="propose a goal"),
    "update_goal": declare("goal", summary="report the goal complete or blocked"),
}


def effects_table(declarations: Mapping[str, Declaration] | None = None) -> str:
    """The Markdown table of tools, operations, effects and path arguments (docs/security.md
    carries it; a test keeps the two the same)."""
    found = BUILTIN if declarations is None else declarations
    lines = [
        "| tool | what it is for | operation | effects | path arguments |",
        "|---|---|---|---|---|",
    ]
    for name, declared in found.items():
        paths = ", ".join(f"`{arg}` ({use})" for arg, use in declared.paths.items()) or "-"
        flags = "".join(f"; +{eff} when `{arg}: true`" for arg, eff in declared.flags.items())
        rows = (
            [(f"`{declared.op_key}={op}`", effects) for op, effects in declared.ops.items()]
            if declared.ops
            else [("-", declared.effects)]
        )
        for op, effects in rows:
            shown = ", ".join(e for e in EFFECTS if e in effects) + flags
            lines.append(f"| `{name}` | {declared.summary or '-'} | {op} | {shown} | {paths} |")
    return "\n".join(lines)


def gate_table() -> str:
    """The Markdown table of effect against plan state (docs/security.md carries it)."""
    head = "| effect | " + " | ".join(f"`{c}`" for c in GATE_COLUMNS) + " |"
    lines = [head, "|---" * (len(GATE_COLUMNS) + 1) + "|"]
    for effect in EFFECTS:
        cells = " | ".join(GATE_TABLE[effect][c] for c in GATE_COLUMNS)
        lines.append(f"| `{effect}` | {cells} |")
    return "\n".join(lines)


__all__ = [
    "ALLOW",
    "BUILTIN",
    "EFFECTS",
    "GATE_COLUMNS",
    "GATE_TABLE",
    "MD_FROZEN",
    "MD_ONLY",
    "UNDECLARED",
    "AfterWrite",
    "Declaration",
    "Effect",
    "GateColumn",
    "PathUse",
    "ToolRegistry",
    "declaration_of",
    "declare",
    "effects_of",
    "effects_table",
    "gate_cells",
    "gate_table",
]
