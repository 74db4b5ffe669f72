"""The system prompt: ordered sections (docs/agent.md).

Each section has an order and renders text or nothing. The plan policy section (order 50) is
present only while the plan is Editing and shows template B; the state section (order 90) is
rendered from the projections and the live plan (plan status and checklist, goal, todos), never
from a summary. The goal round prompt itself is the goal driver's.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from engine.agent.ports import PlanPromptView
from engine.events import TodoItem
from engine.goal.types import GoalSnapshot


@dataclass(frozen=True, slots=True)
class PromptInputs:
    """What the sections are rendered from."""

    workspace: str
    plan: PlanPromptView = field(default_factory=PlanPromptView)
    goal: GoalSnapshot | None = None
    todos: Sequence[TodoItem] | None = None
    tool_names: Sequence[str] = ()
    # What the workspace is, when it is more than a folder (a plan's git worktree).
    workspace_note: str = ""


@dataclass(frozen=True, slots=True)
class PromptSection:
    order: int
    name: str
    render: Callable[[PromptInputs], str]


TEMPLATE_B = """\
# {Plan title}
## Context
- **Problem:** {what is wrong, missing, or painful today}
- **Target state:** {what "done" looks like for this session's scope}
- **Intent:** {why now: priority, user ask, or tradeoff driving this work}
- **Constraints:** {optional}
- **Out of scope:** {optional}
## Implementation steps
1. {Step title} — {what to do, files/modules, commands if any}
   - Done when: {optional acceptance criterion}
2. {Step title} — {what to do}
   - Done when: `{a command}` passes
## Checks
- `{optional command the whole plan must pass before it is done}`
## Risks
## Open questions"""


def _identity(inputs: PromptInputs) -> str:
    return (
        "You are plangate, a coding agent working in a project for a small team that steers "
        "you from a chat. Be concise: your final message of a turn is posted in the chat, so "
        "say what you did and what is next in a few lines. Work with the tools; do not invent "
        "file contents you have not read."
    )


def _workspace(inputs: PromptInputs) -> str:
    return (
        f"Workspace: {inputs.workspace}\n"
        "Relative paths resolve against the workspace; file tools refuse paths outside it "
        "(the session plan .md aside). bash runs in the workspace with a timeout; long output "
        "is cut. Prefer edit_file for small changes and read a file before you edit it. "
        "When you need the user's decision, call ask_user and end your turn."
        + (f"\n{inputs.workspace_note}" if inputs.workspace_note else "")
    )


def _plan_policy(inputs: PromptInputs) -> str:
    plan = inputs.plan
    if not plan.is_editing:
        return ""
    if plan.phase == "pre_init":
        where = (
            "No plan file exists yet. Explore first: read files and run read-only commands "
            "(bash is allowed now, but project files may not be written). When you understand "
            "the task, call plan with op=init, a title and mode=design; it returns the path of "
            "the plan .md."
        )
    else:
        where = (
            f"The plan file is {plan.md_path}. Write the plan there with write_file or "
            "edit_file; it is the only file you may change now, and bash is disabled until the "
            "plan is approved."
        )
    return (
        "## Plan mode (Editing)\n"
        "The owner asked for a plan before any change to the project. " + where + "\n"
        "Rules: investigate without changing anything; write a decision-complete plan in "
        "the outline below (## Context with Problem, Target state and Intent filled; "
        "## Implementation steps with numbered steps, optional 'Done when:' lines; a command in "
        "backticks that a Done when says passes is a check plangate runs, read-only, before the "
        "step counts as done, so name only commands that work in this workspace); do not use "
        "todo_write as a substitute for the plan; when it is ready call plan with op=submit, "
        "fix whatever it reports missing, then end your turn and wait: the owner approves "
        "with a button.\n"
        "Template B:\n" + TEMPLATE_B
    )


_STATUS_MARK = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]", "deferred": "[-]"}


def _plan_state(plan: PlanPromptView) -> str:
    if plan.phase == "none":
        return "Plan: none."
    if plan.phase == "pre_init":
        return "Plan: planning (Editing, no plan file yet)."
    title = json.dumps(plan.title, ensure_ascii=False)
    if plan.phase == "post_init":
        return f"Plan: {title}, Editing (revision {plan.revision}), file {plan.md_path}."
    lines = [f"Plan: {title}, Active (revision {plan.revision})."]
    if not plan.tasks:
        lines.append("Checklist: empty (call plan add_tasks to build it from the plan).")
    for task in sorted(plan.tasks, key=lambda t: (t.order, t.id)):
        mark = _STATUS_MARK.get(task.status, "[ ]")
        lines.append(f"{mark} {task.id}. {task.title}")
    return "\n".join(lines)


def _goal_state(goal: GoalSnapshot | None) -> str:
    if goal is None:
        return "Goal: none."
    objective = json.dumps(goal.objective, ensure_ascii=False)
    text = (
        f"Goal ({goal.source}): {objective}, {goal.phase}, "
        f"rounds {goal.rounds_started}/{goal.max_goal_rounds}."
    )
    if goal.blocked is not None:
        text += f" Blocked: {goal.blocked.code}: {goal.blocked.message}"
    return text


def _todo_state(todos: Sequence[TodoItem] | None) -> str:
    if not todos:
        return "Todos: none standing."
    marks = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}
    return "Todos:\n" + "\n".join(f"{marks[t.status]} {t.content}" for t in todos)


def _state(inputs: PromptInputs) -> str:
    return "\n".join(
        [
            "## Current state (live; this overrides anything older in the conversation)",
            _plan_state(inputs.plan),
            _goal_state(inputs.goal),
            _todo_state(inputs.todos),
        ]
    )


DEFAULT_SECTIONS: tuple[PromptSection, ...] = (
    PromptSection(10, "identity", _identity),
    PromptSection(20, "workspace", _workspace),
    PromptSection(50, "plan:policy", _plan_policy),
    PromptSection(90, "state", _state),
)


def build_system_prompt(
    inputs: PromptInputs, sections: Sequence[PromptSection] = DEFAULT_SECTIONS
) -> str:
    """The system prompt: non-empty sections joined in ascending ``order``."""
    rendered = (s.render(inputs) for s in sorted(sections, key=lambda s: s.order))
    return "\n\n".join(text for text in rendered if text)


__all__ = [
    "DEFAULT_SECTIONS",
    "TEMPLATE_B",
    "PromptInputs",
    "PromptSection",
    "build_system_prompt",
]
