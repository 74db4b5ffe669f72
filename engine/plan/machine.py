"""The plan lifecycle as pure transitions (docs/plan-lifecycle.md).

Every function takes the live sidecar (or ``None`` for NoPlan), the session ``.md`` text (or
``None``) and one input, and returns a :class:`Transition` (the new state plus what to do with
the files and the task goal) or a :class:`Refusal`. No IO here: the service persists the
result, then appends the events.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from engine.keys import PersonKey
from engine.plan.refusals import Refusal, refusal
from engine.plan.store import ArchiveReason
from engine.plan.types import (
    PlanApproval,
    PlanFlow,
    PlanRevising,
    PlanSidecar,
    PlanState,
    PlanTask,
    derive_state,
    is_editing,
)

SUBMITTED_TEXT = "sent for review; end your turn"


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """One task as the model (or an import file) describes it."""

    title: str
    description: str = ""
    acceptance_criteria: tuple[str, ...] = ()
    dependencies: tuple[str, ...] = ()
    # Only a Markdown import names checks; the model's own task lists never do.
    checks: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SetCriteria:
    task_id: str
    title: str
    criteria: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ClearCriteria:
    """The effect: clear the task goal that a started task's criteria set."""


CriteriaEffect = SetCriteria | ClearCriteria | None


@dataclass(frozen=True, slots=True)
class Transition:
    """The outcome of an accepted input.

    ``sidecar`` is the new live sidecar, ``None`` for NoPlan. With ``archive`` set the service
    writes ``sidecar`` (the final state) and moves both files to the archive; with ``sidecar``
    ``None`` and no ``archive`` it deletes the live files. ``md`` is written when not ``None``;
    with ``set_aside_md`` an ``.md`` already on disk is moved aside before the sidecar is written.
    """

    sidecar: PlanSidecar | None
    text: str
    md: str | None = None
    archive: ArchiveReason | None = None
    criteria: CriteriaEffect = None
    reason: str = ""
    seeded: int | None = None
    set_aside_md: bool = False


Result = Transition | Refusal


@dataclass(frozen=True, slots=True)
class Context:
    """Per-call facts the pure functions need: the clock (ISO text), ids, paths."""

    session_id: str
    now: str
    new_plan_id: str
    md_path: str = ""
    working_directory: str | None = None
    autonomous: bool = False
    extra: dict[str, object] = field(default_factory=dict)


def state_of(sidecar: PlanSidecar | None, md: str | None) -> PlanState:
    """The derived state; an ``.md`` next to a pre-init sidecar means post-init."""
    return derive_state(sidecar, md_exists=md is not None)


def touch(sidecar: PlanSidecar, ctx: Context, **update: object) -> PlanSidecar:
    # Every accepted change bumps the revision: buttons bound to the old one go stale.
    return sidecar.model_copy(
        update={**update, "revision": sidecar.revision + 1, "updated_at": ctx.now}
    )


# --- entering plan mode ----------------------------------------------------------------------


def enter_pre_init(sidecar: PlanSidecar | None, md: str | None, ctx: Context) -> Result:
    """``/plan`` from NoPlan: write the durable minimal pre-init sidecar.

    An ``.md`` left from NoPlan (the agent may write the path while ungated) is moved aside:
    next to the new sidecar it would read as post-init, approvable without any ``plan init``.
    """
    state = state_of(sidecar, md)
    if is_editing(state):
        return refusal("pre-init-already")
    if state == "active":
        return refusal("plan-active-revise")
    fresh = PlanSidecar(
        id=ctx.new_plan_id,
        session_id=ctx.session_id,
        status="Editing",
        pre_init_editing=True,
        created_at=ctx.now,
        updated_at=ctx.now,
        working_directory=ctx.working_directory,
        revision=1,
    )
    return Transition(sidecar=fresh, text="Plan mode is on.", reason="pre_init", set_aside_md=True)


# --- init --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InitInput:
    """``plan init``. With ``file_path`` set the call is an import whose tasks are ``imported``
    (or the refusal code reading the file produced)."""

    title: str
    mode: str | None
    tasks: tuple[TaskSpec, ...]
    file_path: str | None = None
    imported: tuple[TaskSpec, ...] | str = ()


def design_md_skeleton(title: str) -> str:
    """The ``.md`` a design init writes: template B with the title filled in."""
    return (
        f"# {title}\n\n"
        "## Context\n"
        "- **Problem:** \n"
        "- **Target state:** \n"
        "- **Intent:** \n\n"
        "## Implementation steps\n"
        "1. \n"
    )


def make_tasks(
    specs: Sequence[TaskSpec],
    *,
    next_task_id: int,
    existing: Sequence[PlanTask],
    source: Literal["plan", "agent"],
) -> tuple[list[PlanTask], int] | Refusal:
    known = {t.id for t in existing}
    order = max((t.order for t in existing), default=0)
    minted: list[PlanTask] = []
    batch_ids = [str(next_task_id + i) for i in range(len(specs))]
    allowed = known | set(batch_ids)
    for spec, task_id in zip(specs, batch_ids, strict=True):
        if not spec.title.strip():
            return refusal("bad-task")
        if any(dep not in allowed or dep == task_id for dep in spec.dependencies):
            return refusal("unknown-dependency")
        order += 1
        minted.append(
            PlanTask(
                id=task_id,
                order=order,
                title=spec.title.strip(),
                description=spec.description,
                acceptance_criteria=list(spec.acceptance_criteria),
                dependencies=list(spec.dependencies),
                source=source,
                checks=list(spec.checks),
            )
        )
    return minted, next_task_id + len(specs)


def init(sidecar: PlanSidecar | None, md: str | None, inp: InitInput, ctx: Context) -> Result:
    """``plan init``: design, checklist or import, and its disambiguation (docs/plan-lifecycle.md).

    Pre-init is not live: design upgrades it, checklist and import replace it.
    """
    state = state_of(sidecar, md)
    if state in ("post_init", "active"):
        return refusal("plan-live")
    if not inp.title.strip():
        return refusal("title-required")
    specs: tuple[TaskSpec, ...]
    if inp.file_path is not None:
        if isinstance(inp.imported, str):
            return refusal(inp.imported)
        specs = inp.imported
        if not specs:
            return refusal("import-empty")
        mode: Literal["design", "checklist", "import"] = "import"
    else:
        if inp.mode not in (None, "design", "checklist"):
            return refusal("bad-mode")
        specs = inp.tasks
        if inp.mode == "design" and specs:
            return refusal("design-with-tasks")
        if inp.mode == "checklist" and not specs:
            return refusal("checklist-empty")
        mode = "checklist" if specs else "design"
    title = inp.title.strip()
    base = PlanSidecar(
        id=sidecar.id if sidecar is not None and mode == "design" else ctx.new_plan_id,
        session_id=ctx.session_id,
        title=title,
        created_at=sidecar.created_at if sidecar is not None else ctx.now,
        updated_at=ctx.now,
        working_directory=ctx.working_directory,
        revision=(sidecar.revision if sidecar is not None else 0) + 1,
        mode=mode,
        flow=sidecar.flow if sidecar is not None else PlanFlow(),
    )
    if mode == "design":
        if ctx.autonomous:
            return refusal("design-autonomous")
        text = design_md_skeleton(title)
        upgraded = base.model_copy(
            update={"status": "Editing", "pre_init_editing": False, "description": text}
        )
        return Transition(
            sidecar=upgraded,
            md=text,
            reason="init_design",
            text=(
                f"Design plan created: {ctx.md_path}\n"
                "Write the plan into that file with write_file or edit_file, following "
                "template B (# title, ## Context with Problem / Target state / Intent, "
                "## Implementation steps as numbered steps, optional 'Done when:' lines). "
                "Then call plan submit and end your turn: the owner approves before any "
                "work starts. Only this file can be written until then; bash is off."
            ),
        )
    made = make_tasks(specs, next_task_id=1, existing=[], source="plan")
    if isinstance(made, Refusal):
        return made
    tasks, next_id = made
    active = base.model_copy(
        update={
            "status": "Active",
            "pre_init_editing": False,
            "tasks": tasks,
            "next_task_id": next_id,
        }
    )
    return Transition(
        sidecar=active,
        reason="init_" + mode,
        text=f"Checklist active with {len(tasks)} task(s). Call plan start now.",
    )


def submit(
    sidecar: PlanSidecar | None, md: str | None, missing: Sequence[str], ctx: Context
) -> Result:
    """``submit``: post-init only; ``missing`` is template B's validation of the ``.md``.

    Records ``submitted_revision`` and keeps the revision as it is.
    """
    state = state_of(sidecar, md)
    if state in ("none", "pre_init") or sidecar is None:
        return refusal("submit-nothing-written")
    if state == "active":
        return refusal("submit-active")
    if missing:
        return refusal("template-incomplete", list(missing))
    # No revision bump: the review is bound to the revision that was submitted.
    reviewed = sidecar.model_copy(update={"submitted_revision": sidecar.revision})
    return Transition(sidecar=reviewed, reason="submitted", text=SUBMITTED_TEXT)


def md_written(sidecar: PlanSidecar | None, md: str | None, ctx: Context) -> Result | None:
    """The session ``.md`` changed on disk: mirror it into ``description`` (post-init only).

    Returns ``None`` when there is nothing to mirror (no plan, or the text is unchanged).
    """
    if sidecar is None or md is None or state_of(sidecar, md) != "post_init":
        return None
    if sidecar.description == md and not sidecar.pre_init_editing:
        return None
    # Editing can never persist a checklist: tasks stay empty whatever the file says.
    updated = touch(sidecar, ctx, description=md, pre_init_editing=False, tasks=[])
    return Transition(sidecar=updated, reason="md", text="Plan text saved.")


# --- owner actions -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ApproveInput:
    """Approve at ``revision``. ``tasks``/``next_task_id`` come from seeding (or reconciling);
    the caller has checked template B first (``approve-template``)."""

    revision: int
    actor: PersonKey | None
    tasks: tuple[PlanTask, ...]
    next_task_id: int
    # Who approved, in order (engine.roles.votes); empty: the actor alone, now.
    approved_by: tuple[PlanApproval, ...] = ()
    # The plan's ``## Checks`` and the snapshot of what its checks watch (docs/checks.md).
    checks: tuple[str, ...] = ()
    check_baseline: dict[str, str] | None = None


def approve_check(
    sidecar: PlanSidecar | None, md: str | None, revision: int
) -> Refusal | PlanSidecar:
    """Whether approval at ``revision`` may go ahead (before any seeding is computed)."""
    state = state_of(sidecar, md)
    if state == "none" or sidecar is None:
        return refusal("approve-no-plan")
    if state == "pre_init":
        return refusal("approve-pre-init")
    if state == "active":
        return refusal("approve-active")
    if revision != sidecar.revision:
        return refusal("approve-stale")
    return sidecar


def approve(sidecar: PlanSidecar | None, md: str | None, inp: ApproveInput, ctx: Context) -> Result:
    """Editing post-init -> Active with the seeded checklist; sets ``approved_at``.

    Re-approval of a revision mints a new plan id. Zero items leave Active with empty tasks
    (the model-driven seed turn is the fallback).
    """
    checked = approve_check(sidecar, md, inp.revision)
    if isinstance(checked, Refusal):
        return checked
    update: dict[str, object] = {
        "status": "Active",
        "pre_init_editing": False,
        "tasks": list(inp.tasks),
        "next_task_id": inp.next_task_id,
        "approved_at": ctx.now,
        "approved_by": list(inp.approved_by)
        or ([PlanApproval(user_id=inp.actor, at=ctx.now)] if inp.actor is not None else []),
        "revising": None,
        "checks": list(inp.checks),
        "check_baseline": inp.check_baseline,
        "changed_tests": [],
    }
    if md is not None:
        update["description"] = md
    if checked.revising is not None:
        update["id"] = ctx.new_plan_id
    if checked.mode is None:
        update["mode"] = "design"
    updated = touch(checked, ctx, **update)
    return Transition(
        sidecar=updated,
        reason="approve",
        seeded=len(inp.tasks),
        text=f"Approved: {len(inp.tasks)} task(s) on the checklist.",
    )


def revise(sidecar: PlanSidecar | None, md: str | None, ctx: Context) -> Result:
    """Active design plan -> Editing; the checklist waits in ``revising``."""
    if state_of(sidecar, md) != "active" or sidecar is None:
        return refusal("revise-not-active")
    if sidecar.mode in ("checklist", "import") or (md is None and sidecar.mode != "design"):
        return refusal("revise-checklist")
    kept = PlanRevising(
        plan_id=sidecar.id,
        tasks=list(sidecar.tasks),
        approved_at=sidecar.approved_at,
        approved_by=list(sidecar.approved_by),
        md=md,
        mode=sidecar.mode,
    )
    updated = touch(sidecar, ctx, status="Editing", pre_init_editing=False, tasks=[], revising=kept)
    return Transition(
        sidecar=updated,
        reason="revise",
        criteria=ClearCriteria(),
        text="Revising the plan. What should change?",
    )


def discard(sidecar: PlanSidecar | None, md: str | None, ctx: Context) -> Result:
    """Discard: pre-init clears the flag; a revision restores the Active plan; else archive."""
    state = state_of(sidecar, md)
    if state == "none" or sidecar is None:
        return refusal("discard-nothing")
    if state == "pre_init":
        return Transition(
            sidecar=None, reason="discard", criteria=ClearCriteria(), text="Plan mode is off."
        )
    if sidecar.revising is not None and state == "post_init":
        kept = sidecar.revising
        restored = touch(
            sidecar,
            ctx,
            status="Active",
            tasks=list(kept.tasks),
            approved_at=kept.approved_at,
            approved_by=list(kept.approved_by),
            revising=None,
            description=kept.md if kept.md is not None else sidecar.description,
        )
        return Transition(
            sidecar=restored,
            md=kept.md,
            reason="discard_revision",
            text="Revision discarded; the approved plan continues.",
        )
    return Transition(
        sidecar=touch(sidecar, ctx),
        archive="discarded",
        reason="discard",
        criteria=ClearCriteria(),
        text="Plan discarded (archived).",
    )


def abandon(sidecar: PlanSidecar | None, md: str | None, ctx: Context) -> Result | None:
    """``/new``: archive a live plan as abandoned (a pre-init flag is just cleared)."""
    state = state_of(sidecar, md)
    if state == "none" or sidecar is None:
        return None
    if state == "pre_init":
        return Transition(sidecar=None, reason="abandon", criteria=ClearCriteria(), text="")
    return Transition(
        sidecar=touch(sidecar, ctx),
        archive="abandoned",
        reason="abandon",
        criteria=ClearCriteria(),
        text="Plan archived as abandoned.",
    )
