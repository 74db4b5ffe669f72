"""Stable refusal codes and their one fixed text each (docs/plan-json-spec.md lists them).

A refusal is a value, never an exception: the tool returns its text to the model as an error
result, a command returns it to the chat. Tests check the code; the text never varies, except
that ``template-incomplete`` and ``approve-template`` append the validator's list of what is
missing, ``checks-failed`` appends plangate's record of the failed run, and ``plan-too-big``
the plan's size against the limit.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Refusal:
    """A refused plan operation: ``code`` is stable, ``text`` names the allowed alternative."""

    code: str
    text: str


TEXTS: dict[str, str] = {
    # --- the plan text's size (PLANGATE_MAX_PLAN_KB) -----------------------------------------
    "plan-too-big": (
        "Refused (plan-too-big): the plan .md is over the size limit, so it cannot be saved, "
        "submitted or approved. Keep the plan short (steps, not code or logs; put long "
        "material in project files the steps name) and write it again."
    ),
    # --- plan tool: init ---------------------------------------------------------------------
    "plan-live": (
        "Refused (plan-live): this session already has a plan. Continue it (plan show); "
        "a new init needs the owner to /discard the current plan first."
    ),
    "title-required": (
        "Refused (title-required): init needs a non-empty title. Call plan init again with a title."
    ),
    "bad-mode": (
        'Refused (bad-mode): mode must be "design" or "checklist". '
        "Omit mode and let tasks decide (tasks: checklist, no tasks: design)."
    ),
    "design-with-tasks": (
        "Refused (design-with-tasks): a design plan starts without tasks; its checklist comes "
        'from the approved .md. Drop tasks for a design plan, or use mode="checklist".'
    ),
    "checklist-empty": (
        "Refused (checklist-empty): a checklist needs at least one task. Pass tasks, "
        "or omit mode (and tasks) for a design plan."
    ),
    "design-autonomous": (
        "Refused (design-autonomous): a goal round cannot open a design plan that waits for "
        'the owner. Use mode="checklist" with tasks, or keep working without a plan.'
    ),
    "import-outside-workspace": (
        "Refused (import-outside-workspace): plan import reads only files inside the workspace. "
        'Copy the file into the workspace, or pass tasks with mode="checklist".'
    ),
    "import-unreadable": (
        "Refused (import-unreadable): the import file cannot be read. Pass a file_path "
        "relative to the workspace that names an existing text file."
    ),
    "import-empty": (
        "Refused (import-empty): the import file holds no tasks. Import a file with tasks, "
        'or pass tasks with mode="checklist".'
    ),
    "bad-task": (
        "Refused (bad-task): every task needs a non-empty title; description is text; "
        "acceptance_criteria and dependencies are lists. Fix the tasks and call again."
    ),
    # --- plan tool: checklist ------------------------------------------------------------------
    "tasks-required": (
        "Refused (tasks-required): add_tasks needs a non-empty tasks list. "
        "Pass at least one task, or use add_task with a title."
    ),
    "unknown-dependency": (
        "Refused (unknown-dependency): a dependency names no task of this plan. "
        "Use task ids from plan show (or ids earlier in the same call)."
    ),
    "no-plan": (
        "Refused (no-plan): there is no plan in this session. "
        "Call plan init first (checklist with tasks, or design)."
    ),
    "pre-init-checklist-blocked": (
        "Refused (pre-init-checklist-blocked): plan mode is on but no plan exists yet. "
        "Call plan init first: design (no tasks) or checklist (with tasks)."
    ),
    "editing-checklist-blocked": (
        "Refused (editing-checklist-blocked): the plan is still being designed; checklist "
        "operations wait for the owner's approval. Edit the plan .md, then call plan submit."
    ),
    "unknown-task": "Refused (unknown-task): no task has that id. Use an id from plan show.",
    "task-in-progress": (
        "Refused (task-in-progress): another task is in progress. "
        "Complete it (plan complete) or skip it (plan skip) first."
    ),
    "task-not-pending": (
        "Refused (task-not-pending): only a pending task can be started. "
        "Pick a pending task from plan show, or call plan start without task_id."
    ),
    "dependencies-unmet": (
        "Refused (dependencies-unmet): that task depends on tasks not yet completed or "
        "deferred. Start one of those first, or call plan start without task_id."
    ),
    "no-startable-task": (
        "Refused (no-startable-task): no pending task has all its dependencies completed or "
        "deferred. Complete or skip the blocking tasks (plan show)."
    ),
    "no-task-in-progress": (
        "Refused (no-task-in-progress): no task is in progress. "
        "Pass task_id, or call plan start first."
    ),
    "task-finished": (
        "Refused (task-finished): that task is already completed or deferred. "
        "Pick another task from plan show."
    ),
    "reason-required": (
        "Refused (reason-required): skip needs a reason. Call plan skip again with reason."
    ),
    "submit-nothing-written": (
        "Refused (submit-nothing-written): there is no plan .md to review yet. "
        "Call plan init (design) and write the .md first."
    ),
    "submit-active": (
        "Refused (submit-active): the plan is already approved. "
        "Work the checklist: plan start, then plan complete or plan skip."
    ),
    "template-incomplete": (
        "Not sent (template-incomplete): the plan .md does not follow template B yet. "
        "Fix what is missing, then call plan submit again. Missing:"
    ),
    # --- plan tool: checks (docs/checks.md) ----------------------------------------------------
    "checks-failed": (
        "Not completed (checks-failed): a check failed, so the task stays in progress. Fix the "
        "cause (not the check), then call plan complete again. plangate ran:"
    ),
    "checks-changed": (
        "Not completed (checks-changed): the task's checks changed while they ran. "
        "Call plan complete again."
    ),
    "checks-unavailable": (
        "Refused (checks-unavailable): this task has checks and plangate cannot run them here, "
        "so it cannot be completed. Tell the owner."
    ),
    "skip-needs-owner": (
        "Refused (skip-needs-owner): this task has checks, so skipping it needs the owner's "
        "approval, and it was not given. Make the checks pass and complete the task instead."
    ),
    "unknown-op": (
        "Refused (unknown-op): op must be one of init, add_tasks, add_task, start, complete, "
        "skip, submit, show."
    ),
    # --- command plane (owner actions) --------------------------------------------------------
    "pre-init-already": "Already planning: this session is in plan mode.",
    "plan-active-revise": (
        "A plan is active. Revise it (the Revise button) or /discard it to plan anew."
    ),
    "approve-no-plan": "There is no plan to approve. Start one with /plan.",
    "approve-pre-init": (
        "Nothing to approve yet: the agent has not written the plan. Wait for it, or /discard."
    ),
    "approve-active": "The plan is already approved. /execute continues the checklist.",
    "approve-stale": (
        "This approval is out of date: the plan changed since. Review the latest plan card."
    ),
    "approve-template": "The plan is not ready to approve. Missing:",
    "revise-not-active": "Only an approved plan can be revised.",
    "revise-checklist": (
        "A checklist or imported plan has no plan text to revise. /discard it and /plan anew."
    ),
    "discard-nothing": "Nothing to discard.",
}


def refusal(code: str, detail: list[str] | None = None, *, report: str | None = None) -> Refusal:
    """The refusal for ``code``; ``detail`` lines follow the fixed text (only for lists);
    ``report`` (plangate's record of a failed check run) follows it verbatim."""
    text = TEXTS[code]
    if detail:
        text = text + "\n" + "\n".join(f"- {line}" for line in detail)
    if report:
        text = text + "\n" + report
    return Refusal(code=code, text=text)
