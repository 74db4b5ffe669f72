"""PlanService: applies the pure plan transitions under a per-session lock (docs/plan-lifecycle.md).

Order of every change: decide (engine.plan.machine) -> write the sidecar and ``.md`` through
the :class:`~engine.plan.store.PlanStore` -> append ``plan/mode`` (when Editing starts or
ends) and ``plan/changed`` to the event log -> set or clear the task goal. The sidecar is the
authority; the log is history. The lock covers one state change, never a model call or a
tool run.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engine.checks.runner import CheckRunner
from engine.checks.watch import snapshot
from engine.events import PlanChanged, PlanMode, SessionEvent
from engine.keys import PersonKey
from engine.plan import checklist, machine
from engine.plan.checklist import Gates
from engine.plan.criteria import TaskCriteriaSink
from engine.plan.digest import (
    DEFAULT_MAX_PLAN_KB,
    PlanDigest,
    PlanDigests,
    md_bytes,
    too_big_detail,
)
from engine.plan.gate import PlanGateView
from engine.plan.importer import read_import
from engine.plan.machine import (
    ClearCriteria,
    Context,
    CriteriaEffect,
    SetCriteria,
    TaskSpec,
    Transition,
)
from engine.plan.refusals import Refusal, refusal
from engine.plan.seeding import Seeding, default_seeding
from engine.plan.store import ArchiveReason, PlanStore
from engine.plan.types import (
    MAX_PAUSES,
    PlanApproval,
    PlanFlow,
    PlanPause,
    PlanSidecar,
    PlanState,
    is_editing,
)
from engine.ports import Clock, EventLog
from engine.projections import PlanModeState, apply_plan_mode_event

_log = logging.getLogger("plangate.plan.service")


def _all_checks(plan_checks: Sequence[str], items: Sequence[Any]) -> tuple[str, ...]:
    """Every check a plan names (the plan's, then each task's or work item's), once each."""
    found: list[str] = []
    for command in [*plan_checks, *(c for i in items for c in getattr(i, "checks", ()))]:
        if command not in found:
            found.append(command)
    return tuple(found)


CORRUPT_NOTICE = (
    "The plan file of this session could not be read; it was moved aside to {path}. "
    "The session continues without a plan."
)


@dataclass(frozen=True, slots=True)
class PlanResult:
    """The outcome of one operation: ``code`` is the refusal code, ``None`` on success."""

    text: str
    code: str | None
    state: PlanState
    revision: int
    plan_id: str | None = None
    seeded: int | None = None

    @property
    def ok(self) -> bool:
        return self.code is None


@dataclass(slots=True)
class _Live:
    sidecar: PlanSidecar | None
    md: str | None


@dataclass(frozen=True, slots=True)
class PlanChange:
    """A committed change: the sidecar before and after (``None`` when archived or deleted)."""

    session_id: str
    before: PlanSidecar | None
    after: PlanSidecar | None
    archived: str | None = None
    # The sidecar as it was archived (the last task completed), when ``archived`` is set.
    archived_sidecar: PlanSidecar | None = None


PlanListener = Callable[[PlanChange], Awaitable[None]]
# (session id, plan id, revision) -> who approved that revision, in order (engine.roles.votes).
ApproversLookup = Callable[[str, str, int], Awaitable[Sequence[PlanApproval]]]


class PlanService:
    """The plan lifecycle of every session.

    ``criteria`` receives task acceptance criteria (the GoalService); ``seeding`` defaults to
    the real extractor and reconciler; ``checks`` runs the checks a task's completion needs
    (docs/checks.md; without it a task with checks cannot complete). Reads are served from a
    per-session cache that every write goes through, so one process must own a session's plan
    files.
    """

    def __init__(
        self,
        store: PlanStore,
        log: EventLog,
        *,
        criteria: TaskCriteriaSink | None = None,
        clock: Clock = time.time,
        new_id: Callable[[], str] = lambda: uuid.uuid4().hex,
        seeding: Seeding | None = None,
        checks: CheckRunner | None = None,
        max_plan_bytes: int = DEFAULT_MAX_PLAN_KB * 1024,
        approvers: ApproversLookup | None = None,
        listeners: Sequence[PlanListener] = (),
        workspace_for: Callable[[str], Awaitable[Path]] | None = None,
    ) -> None:
        """``listeners`` hear every committed change first, in order, before any added later
        (the worktrees: a plan's worktree is made before the cards redraw). ``workspace_for``
        is where a session's work and checks happen now (a plan's worktree once made): the
        snapshot of what the checks watch is taken there at approval."""
        self._workspace_for = workspace_for
        self._store = store
        self._checks = checks
        self._approvers = approvers
        self.max_plan_bytes = max_plan_bytes
        self._digests: PlanDigests | None = None
        self._log = log
        self._criteria = criteria
        self._clock = clock
        self._new_id = new_id
        self._seeding = seeding
        self._locks: dict[str, asyncio.Lock] = {}
        self._live: dict[str, _Live] = {}
        self._notices: dict[str, list[str]] = {}
        self._listeners: list[PlanListener] = list(listeners)
        # Sessions whose task checks are running now, and what (for the card's note).
        self._checking: dict[str, str] = {}
        # Committed changes with their criteria effect, applied and announced by _deliver.
        self._undelivered: list[tuple[PlanChange, CriteriaEffect]] = []

    def forget(self, session_id: str) -> None:
        """Drop what this process holds of the session's plan (its chat moved to another
        replica): the next read loads the files again."""
        self._live.pop(session_id, None)
        self._notices.pop(session_id, None)
        self._checking.pop(session_id, None)

    def add_listener(self, listener: PlanListener) -> None:
        """Call ``listener(change)`` after every committed change (cards redraw from it)."""
        self._listeners.append(listener)

    async def _deliver(self) -> None:
        """Apply committed criteria effects, then tell the listeners; call with no plan lock held.

        The criteria sink (the goal service) notifies its own listeners, which read the plan
        back; the plan lock is not reentrant, so this must run after it is released. Shielded:
        a caller cancelled meanwhile (``/stop``) must not lose a committed change's effects,
        which may belong to another session.
        """
        await asyncio.shield(self._deliver_all())

    async def _deliver_all(self) -> None:
        while self._undelivered:
            change, effect = self._undelivered.pop(0)
            try:
                await self._apply_criteria(change.session_id, effect)
            except Exception as exc:  # the plan change is committed; the label is secondary
                _log.warning(
                    "plangate.plan.service.criteria_failed %s: %s", type(exc).__name__, exc
                )
            for listener in self._listeners:
                try:
                    await listener(change)
                except Exception as exc:  # a card redraw must never undo a committed change
                    _log.warning(
                        "plangate.plan.service.listener_failed %s: %s", type(exc).__name__, exc
                    )

    # --- plumbing ---------------------------------------------------------------------------

    def _lock(self, session_id: str) -> asyncio.Lock:
        return self._locks.setdefault(session_id, asyncio.Lock())

    def _seed(self) -> Seeding:
        if self._seeding is None:
            self._seeding = default_seeding()
        return self._seeding

    @property
    def digests(self) -> PlanDigests:
        """The per-revision cache of what each plan text parses to (engine.plan.digest)."""
        if self._digests is None:
            seeding = self._seed()
            self._digests = PlanDigests(
                max_bytes=self.max_plan_bytes,
                validate=seeding.validate,
                extract=seeding.extract,
                plan_checks=seeding.plan_checks,
            )
        return self._digests

    async def digest(self, session_id: str) -> PlanDigest | None:
        """The live ``.md``'s size check, template B problems and steps: cached per
        (plan id, revision), worked out in a thread; ``None`` without a plan text."""
        async with self._lock(session_id):
            live = await self._load_locked(session_id)
        if live.sidecar is None or live.md is None:
            return None
        return await self.digests.of(live.sidecar.id, live.sidecar.revision, live.md)

    def _digest_of(self, live: _Live, text: str, ready: PlanDigest | None) -> PlanDigest:
        """``ready`` when it was made for this very text, else made here (under the lock)."""
        sidecar = live.sidecar
        key = (sidecar.id if sidecar else "", sidecar.revision if sidecar else 0, len(text))
        if ready is not None and ready.key == key and live.md == text:
            return ready
        return self.digests.cached(*key[:2], text) or self.digests.make(text, key)

    def _now(self) -> str:
        return datetime.fromtimestamp(self._clock(), UTC).isoformat()

    async def _context(self, session_id: str, *, autonomous: bool = False) -> Context:
        return Context(
            session_id=session_id,
            now=self._now(),
            new_plan_id=self._new_id(),
            md_path=str(await self._store.md_path(session_id)),
            autonomous=autonomous,
        )

    async def _load_locked(self, session_id: str) -> _Live:
        live = self._live.get(session_id)
        if live is not None:
            return live
        loaded = await self._store.load(session_id)
        if loaded.corrupt is not None:
            self._notices.setdefault(session_id, []).append(
                CORRUPT_NOTICE.format(path=loaded.corrupt)
            )
        sidecar, md = loaded.sidecar, loaded.md
        if sidecar is not None and loaded.disposition != "live":
            # Legacy Completed archives silently; legacy Cancelled archives as discarded.
            reason: ArchiveReason = (
                "completed" if loaded.disposition == "archive_completed" else "discarded"
            )
            await self._store.archive(session_id, sidecar, reason=reason)
            sidecar, md = None, None
        live = _Live(sidecar=sidecar, md=md)
        self._live[session_id] = live
        await self._repair_mode_locked(session_id, machine.state_of(sidecar, md))
        return live

    async def _repair_mode_locked(self, session_id: str, state: PlanState) -> None:
        # The sidecar wins over the log: a disagreeing last plan/mode gets a repairing one.
        mode = PlanModeState()
        for stored in await self._log.read(session_id, types=("plan/mode", "command/run")):
            mode = apply_plan_mode_event(mode, stored.event)
        if mode.active != is_editing(state):
            await self._log.append(session_id, [PlanMode(active=is_editing(state))])

    def _result(self, live: _Live, text: str, code: str | None = None) -> PlanResult:
        sidecar = live.sidecar
        return PlanResult(
            text=text,
            code=code,
            state=machine.state_of(sidecar, live.md),
            revision=sidecar.revision if sidecar is not None else 0,
            plan_id=sidecar.id if sidecar is not None else None,
        )

    async def _commit_locked(self, session_id: str, live: _Live, t: Transition) -> PlanResult:
        before = machine.state_of(live.sidecar, live.md)
        old_revision = live.sidecar.revision if live.sidecar is not None else 0
        new = _Live(sidecar=t.sidecar, md=t.md if t.md is not None else live.md)
        if t.set_aside_md:
            await self._store.set_aside_md(session_id)
            new = _Live(sidecar=t.sidecar, md=t.md)
        if t.archive is not None and t.sidecar is not None:
            await self._store.archive(session_id, t.sidecar, reason=t.archive)
            new = _Live(sidecar=None, md=None)
        elif t.sidecar is None:
            await self._store.delete(session_id)
            new = _Live(sidecar=None, md=None)
        else:
            await self._store.save(session_id, t.sidecar, md=t.md)
        self._live[session_id] = new
        after = machine.state_of(new.sidecar, new.md)
        revision = t.sidecar.revision if t.sidecar is not None else old_revision + 1
        events: list[SessionEvent] = []
        if is_editing(before) != is_editing(after):
            events.append(PlanMode(active=is_editing(after)))
        plan_id = (
            t.sidecar.id
            if t.sidecar is not None
            else (live.sidecar.id if live.sidecar is not None else None)
        )
        events.append(
            PlanChanged(status=after, revision=revision, plan_id=plan_id, reason=t.reason)
        )
        await self._log.append(session_id, events)
        change = PlanChange(
            session_id=session_id,
            before=live.sidecar,
            after=new.sidecar,
            archived=t.archive,
            archived_sidecar=t.sidecar if t.archive is not None else None,
        )
        # The criteria effect and the listeners run after the lock is released (both lead to
        # code that reads the plan back): _deliver.
        self._undelivered.append((change, t.criteria))
        return PlanResult(
            text=t.text,
            code=None,
            state=after,
            revision=revision,
            plan_id=plan_id if new.sidecar is not None else None,
            seeded=t.seeded,
        )

    async def _apply_criteria(self, session_id: str, effect: CriteriaEffect) -> None:
        if self._criteria is None:
            return
        if isinstance(effect, SetCriteria):
            await self._criteria.set_task_criteria(
                session_id,
                task_id=effect.task_id,
                title=effect.title,
                criteria=list(effect.criteria),
            )
        elif isinstance(effect, ClearCriteria):
            await self._criteria.clear_task_criteria(session_id)

    async def _run(
        self,
        session_id: str,
        decide: Callable[[_Live, Context], Transition | Refusal | None],
        *,
        autonomous: bool = False,
    ) -> PlanResult:
        async with self._lock(session_id):
            live = await self._load_locked(session_id)
            ctx = await self._context(session_id, autonomous=autonomous)
            outcome = decide(live, ctx)
            if outcome is None:
                return self._result(live, "")
            if isinstance(outcome, Refusal):
                return self._result(live, outcome.text, outcome.code)
            result = await self._commit_locked(session_id, live, outcome)
        await self._deliver()
        return result

    # --- reads ------------------------------------------------------------------------------

    async def current(self, session_id: str) -> PlanSidecar | None:
        """The live sidecar, or ``None`` for NoPlan (loads and repairs on first use)."""
        async with self._lock(session_id):
            return (await self._load_locked(session_id)).sidecar

    async def state(self, session_id: str) -> PlanState:
        """``"none" | "pre_init" | "post_init" | "active"``."""
        async with self._lock(session_id):
            live = await self._load_locked(session_id)
            return machine.state_of(live.sidecar, live.md)

    async def revision(self, session_id: str) -> int:
        """The live plan's revision (0 without a plan); buttons are bound to it."""
        sidecar = await self.current(session_id)
        return sidecar.revision if sidecar is not None else 0

    async def md_text(self, session_id: str) -> str | None:
        """The session ``.md`` as last written (``None`` without one)."""
        async with self._lock(session_id):
            return (await self._load_locked(session_id)).md

    async def md_path(self, session_id: str) -> Path:
        """The absolute path of the session ``.md`` (existing or not)."""
        return await self._store.md_path(session_id)

    async def gate_view(self, session_id: str) -> PlanGateView:
        """What :func:`engine.plan.gate.check_gate` needs, read at each tool call."""
        async with self._lock(session_id):
            live = await self._load_locked(session_id)
        state = machine.state_of(live.sidecar, live.md)
        return PlanGateView(
            state=state,
            md_path=await self._store.md_path(session_id),
            max_md_bytes=self.max_plan_bytes,
            md_bytes=md_bytes(live.md) if state == "post_init" and live.md else 0,
        )

    def take_notices(self, session_id: str) -> list[str]:
        """Messages for the user (a corrupt sidecar moved aside); each is returned once."""
        return self._notices.pop(session_id, [])

    async def show(self, session_id: str) -> PlanResult:
        """The ``plan show`` text."""
        md_path = str(await self._store.md_path(session_id))
        async with self._lock(session_id):
            live = await self._load_locked(session_id)
            return self._result(live, checklist.render_show(live.sidecar, live.md, md_path))

    # --- owner / command-plane operations ---------------------------------------------------

    async def enter_pre_init(
        self, session_id: str, *, working_directory: str | None = None
    ) -> PlanResult:
        """``/plan`` from NoPlan: durable pre-init Editing (refused in Editing and Active)."""

        def decide(live: _Live, ctx: Context) -> Transition | Refusal:
            ctx = Context(
                session_id=ctx.session_id,
                now=ctx.now,
                new_plan_id=ctx.new_plan_id,
                md_path=ctx.md_path,
                working_directory=working_directory,
            )
            return machine.enter_pre_init(live.sidecar, live.md, ctx)

        return await self._run(session_id, decide)

    async def approve(
        self, session_id: str, *, revision: int, actor: PersonKey | None
    ) -> PlanResult:
        """Approve the post-init plan at ``revision``: template B must be valid.

        Seeds the checklist from the ``.md`` (or reconciles it against ``revising.tasks``
        on re-approval, minting a new plan id); zero items leave Active with empty tasks.
        ``approved_by`` records the approvers the lookup names for this revision (else the
        actor alone).
        """
        seeding = self._seed()
        approved_by: tuple[PlanApproval, ...] = ()
        current = await self.current(session_id)
        if self._approvers is not None and current is not None:
            # Read before the lock (it reads the log); approve_check refuses a stale revision.
            approved_by = tuple(await self._approvers(session_id, current.id, revision))
        # Parsed once before the lock, off the loop (the digest), and the snapshot of what the
        # checks watch taken from it (file IO); reused under the lock when the text is the same.
        ready = await self.digest(session_id)
        before = await self.md_text(session_id)
        early = list(ready.items) if ready is not None else []
        baseline = await self._baseline(session_id, before, early)

        def decide(live: _Live, ctx: Context) -> Transition | Refusal:
            sidecar = live.sidecar
            text = live.md if live.md is not None else (sidecar.description if sidecar else "")
            checked = machine.approve_check(sidecar, live.md, revision)
            if isinstance(checked, Refusal):
                return checked
            digest = self._digest_of(live, text, ready)
            if digest.too_big:
                return self._too_big(digest)
            if digest.problems:
                return refusal("approve-template", list(digest.problems))
            items = list(digest.items)
            if checked.revising is not None:
                tasks, next_id = seeding.reconcile(
                    previous=checked.revising.tasks,
                    previous_plan_id=checked.revising.plan_id,
                    items=items,
                    next_task_id=checked.next_task_id,
                )
            else:
                tasks, next_id = seeding.seed(items, next_task_id=checked.next_task_id)
            plan_checks = tuple(seeding.plan_checks(text))
            watched = _all_checks(plan_checks, tasks)
            inp = machine.ApproveInput(
                revision=revision,
                actor=actor,
                tasks=tuple(tasks),
                next_task_id=next_id,
                approved_by=approved_by
                if sidecar is not None and current is not None and sidecar.id == current.id
                else (),
                checks=plan_checks,
                # Taken before the lock from the same text (else the approval is stale).
                check_baseline=baseline[1] if baseline and baseline[0] == watched else None,
            )
            return machine.approve(sidecar, live.md, inp, ctx)

        result = await self._run(session_id, decide)
        if result.ok:
            await self._baseline_where_checked(session_id)
            await self._finish_carried(session_id)
        return result

    async def _baseline_where_checked(self, session_id: str) -> None:
        """Take the approval's snapshot of what the checks watch again where they will run
        (the plan's worktree, made by a listener of the approval): the same files, compared
        with the same files at completion; never the owner's uncommitted files."""
        sidecar = await self.current(session_id)
        if self._workspace_for is None or sidecar is None or sidecar.check_baseline is None:
            return
        workspace = await self._workspace_for(session_id)
        if sidecar.working_directory and Path(sidecar.working_directory) == workspace:
            return
        watched = _all_checks(tuple(sidecar.checks), sidecar.tasks)
        taken = await asyncio.to_thread(snapshot, list(watched), workspace)
        async with self._lock(session_id):
            live = await self._load_locked(session_id)
            now = live.sidecar
            if now is None or (now.id, now.revision) != (sidecar.id, sidecar.revision):
                return
            updated = now.model_copy(update={"check_baseline": taken})
            await self._store.save(session_id, updated)
            self._live[session_id] = _Live(sidecar=updated, md=live.md)

    async def _finish_carried(self, session_id: str) -> PlanResult | None:
        """A re-approval that carried every task over as done: the plan's ``## Checks`` run
        and it is archived (or its last task opens again when they fail)."""
        sidecar = await self.current(session_id)
        if not checklist.carried_over(sidecar):
            return None
        assert sidecar is not None
        run = None
        if sidecar.checks and self._checks is not None and self._workspace_for is not None:
            workspace = await self._workspace_for(session_id)
            md_path = await self._store.md_path(session_id)
            run = await self._checks.run(
                list(sidecar.checks),
                session_id=session_id,
                workspace=workspace,
                hidden=[md_path.parent],
                baseline=sidecar.check_baseline,
                watch=list(_all_checks(tuple(sidecar.checks), sidecar.tasks)),
            )
        plan_id = sidecar.id

        def decide(live: _Live, ctx: Context) -> Transition | Refusal:
            if live.sidecar is None or live.sidecar.id != plan_id:
                return refusal("checks-changed")
            return checklist.finish_carried(live.sidecar, live.md, ctx, run=run)

        return await self._run(session_id, decide)

    def _too_big(self, digest: PlanDigest) -> Refusal:
        return refusal("plan-too-big", [too_big_detail(digest.size_bytes, self.max_plan_bytes)])

    async def _baseline(
        self, session_id: str, text: str | None, items: Sequence[Any]
    ) -> tuple[tuple[str, ...], dict[str, str]] | None:
        """The snapshot of the files the checks of ``text`` (extracted as ``items``) watch
        (docs/checks.md "changed tests"); ``None`` without checks or a workspace."""
        sidecar = await self.current(session_id)
        if sidecar is None or not text or not sidecar.working_directory:
            return None
        watched = _all_checks(tuple(self._seed().plan_checks(text)), items)
        if not watched:
            return None
        workspace = Path(sidecar.working_directory)
        return watched, await asyncio.to_thread(snapshot, list(watched), workspace)

    async def revise(self, session_id: str) -> PlanResult:
        """Active design plan -> Editing; the checklist is kept in ``revising``."""
        return await self._run(
            session_id, lambda live, ctx: machine.revise(live.sidecar, live.md, ctx)
        )

    async def discard(self, session_id: str) -> PlanResult:
        """Archive as discarded; pre-init clears the flag; a revision restores the Active plan."""
        return await self._run(
            session_id, lambda live, ctx: machine.discard(live.sidecar, live.md, ctx)
        )

    async def abandon(self, session_id: str) -> PlanResult:
        """For ``/new``: archive a live plan as abandoned (no-op without one)."""
        return await self._run(
            session_id, lambda live, ctx: machine.abandon(live.sidecar, live.md, ctx)
        )

    async def set_flow(
        self, session_id: str, flow: PlanFlow, *, plan_id: str | None = None
    ) -> bool:
        """Store the channel's card keys; no revision bump, no events (buttons stay valid).

        Returns False, writing nothing, when there is no live plan (or, with ``plan_id``,
        when the live plan is another one): checked under the session's lock.
        """
        async with self._lock(session_id):
            live = await self._load_locked(session_id)
            if live.sidecar is None or (plan_id is not None and live.sidecar.id != plan_id):
                return False
            updated = live.sidecar.model_copy(update={"flow": flow})
            await self._store.save(session_id, updated)
            self._live[session_id] = _Live(sidecar=updated, md=live.md)
            return True

    async def record_pause(self, session_id: str, pause: PlanPause) -> bool:
        """Keep one stop of the run in the sidecar's ``pauses`` (no revision bump, no event:
        the ``run/paused`` event is the log's record; this is the plan's own, archived with it).

        Returns False, writing nothing, when there is no live plan.
        """
        async with self._lock(session_id):
            live = await self._load_locked(session_id)
            if live.sidecar is None:
                return False
            stamped = pause.model_copy(update={"at": pause.at or self._now()})
            pauses = [*live.sidecar.pauses, stamped][-MAX_PAUSES:]
            updated = live.sidecar.model_copy(update={"pauses": pauses})
            await self._store.save(session_id, updated)
            self._live[session_id] = _Live(sidecar=updated, md=live.md)
            return True

    async def fork(self, source_id: str, target_id: str) -> None:
        """Copy the plan files of ``source_id`` to a new session ``target_id``."""
        async with self._lock(source_id):
            await self._store.fork(source_id, target_id)
        self._live.pop(target_id, None)

    # --- the agent's operations (the plan tool) ---------------------------------------------

    async def md_written(self, session_id: str) -> PlanResult:
        """Call after a successful write of the session ``.md``: mirror it into the sidecar.

        Syncs ``description``, bumps ``revision`` and appends ``plan/changed``; does nothing
        outside post-init Editing or when the text did not change.
        """
        async with self._lock(session_id):
            live = await self._load_locked(session_id)
            md = await self._store.read_md(session_id)
            live = _Live(sidecar=live.sidecar, md=md)
            self._live[session_id] = live
            if md is not None and md_bytes(md) > self.max_plan_bytes:
                # Not mirrored into the sidecar (nor parsed for the card): submit and Approve
                # refuse it with its size until it is cut down.
                _log.info("plangate.plan.md_too_big session=%s bytes=%d", session_id, len(md))
                return self._result(live, "", "plan-too-big")
            ctx = await self._context(session_id)
            outcome = machine.md_written(live.sidecar, md, ctx)
            if outcome is None or isinstance(outcome, Refusal):
                return self._result(live, "")
            result = await self._commit_locked(session_id, live, outcome)
        await self._deliver()
        return result

    async def init(
        self,
        session_id: str,
        *,
        title: str,
        mode: str | None = None,
        tasks: Sequence[TaskSpec] = (),
        file_path: str | None = None,
        workspace: Path,
        autonomous: bool = False,
    ) -> PlanResult:
        """``plan init``; import reads ``file_path`` only inside ``workspace``."""
        imported: tuple[TaskSpec, ...] | str = ()
        if file_path is not None:
            imported = read_import(file_path, workspace, extract=self._seed().extract)
        inp = machine.InitInput(
            title=title, mode=mode, tasks=tuple(tasks), file_path=file_path, imported=imported
        )

        def decide(live: _Live, ctx: Context) -> Transition | Refusal:
            ctx = Context(
                session_id=ctx.session_id,
                now=ctx.now,
                new_plan_id=ctx.new_plan_id,
                md_path=ctx.md_path,
                working_directory=str(workspace),
                autonomous=autonomous,
            )
            return machine.init(live.sidecar, live.md, inp, ctx)

        return await self._run(session_id, decide, autonomous=autonomous)

    async def add_tasks(self, session_id: str, tasks: Sequence[TaskSpec]) -> PlanResult:
        """Active only; new tasks are ``source: agent``."""
        return await self._run(
            session_id, lambda live, ctx: checklist.add_tasks(live.sidecar, live.md, tasks, ctx)
        )

    async def start(self, session_id: str, task_id: str | None = None) -> PlanResult:
        """Start ``task_id`` or the next startable task; never approves."""
        return await self._run(
            session_id, lambda live, ctx: checklist.start(live.sidecar, live.md, task_id, ctx)
        )

    async def gates(self, session_id: str, task_id: str | None = None) -> Gates | None:
        """The checks finishing ``task_id`` (or the task in progress) needs; ``None`` when it
        cannot be finished now (the operation itself then says why)."""
        async with self._lock(session_id):
            live = await self._load_locked(session_id)
            found = checklist.gates(live.sidecar, live.md, task_id)
        return found if isinstance(found, Gates) else None

    async def complete(
        self,
        session_id: str,
        task_id: str | None = None,
        evidence: str | None = None,
        *,
        workspace: Path | None = None,
    ) -> PlanResult:
        """Complete the in-progress task (or ``task_id``); the last one archives the plan.

        A task with checks: they run first in ``workspace`` (no lock held meanwhile), and the
        task completes only if all pass and it is still the same task with the same checks;
        otherwise the refusal carries plangate's record of the run (docs/checks.md).
        """
        need = await self.gates(session_id, task_id)
        if need is None or not need.checked or self._checks is None or workspace is None:
            return await self._run(
                session_id,
                lambda live, ctx: checklist.complete(live.sidecar, live.md, task_id, evidence, ctx),
            )
        sidecar = await self.current(session_id)
        assert sidecar is not None  # gates found a task to finish
        plan_id = sidecar.id
        md_path = await self._store.md_path(session_id)
        listed = ", ".join(f"`{c}`" for c in need.commands)
        self._checking[session_id] = f"task {need.task.id}: {listed}"
        try:
            await self._announce(session_id, sidecar)
            run = await self._checks.run(
                list(need.commands),
                session_id=session_id,
                workspace=workspace,
                hidden=[md_path.parent],
                baseline=sidecar.check_baseline,
                watch=list(_all_checks(tuple(sidecar.checks), sidecar.tasks)),
            )
        finally:
            self._checking.pop(session_id, None)

        def decide(live: _Live, ctx: Context) -> Transition | Refusal:
            if live.sidecar is None or live.sidecar.id != plan_id:
                return refusal("checks-changed")
            return checklist.complete(live.sidecar, live.md, need.task.id, None, ctx, run=run)

        result = await self._run(session_id, decide)
        if not result.ok:  # nothing committed: the card drops its "running checks" note
            await self._announce(session_id, await self.current(session_id))
        return result

    def checking(self, session_id: str) -> str | None:
        """What plangate is checking in this session right now (``None``: nothing)."""
        return self._checking.get(session_id)

    async def _announce(self, session_id: str, sidecar: PlanSidecar | None) -> None:
        """Tell the listeners the card should be redrawn though nothing was committed."""
        change = PlanChange(session_id=session_id, before=sidecar, after=sidecar)
        self._undelivered.append((change, None))
        await self._deliver()

    async def skip(
        self,
        session_id: str,
        task_id: str | None = None,
        reason: str | None = None,
        *,
        owner_approved: bool = False,
    ) -> PlanResult:
        """Defer the in-progress task (or ``task_id``) with a reason; a task with checks
        only ``owner_approved`` (the tool asked the owner)."""
        return await self._run(
            session_id,
            lambda live, ctx: checklist.skip(
                live.sidecar, live.md, task_id, reason, ctx, owner_approved=owner_approved
            ),
        )

    async def submit(self, session_id: str) -> PlanResult:
        """Ask for review: validates template B; records ``submitted_revision`` (no bump)."""
        ready = await self.digest(session_id)  # parsed off the loop, before the lock

        def decide(live: _Live, ctx: Context) -> Transition | Refusal:
            text = live.md if live.md is not None else ""
            state = machine.state_of(live.sidecar, live.md)
            missing: Sequence[str] = []
            if state == "post_init":
                digest = self._digest_of(live, text, ready)
                if digest.too_big:
                    return self._too_big(digest)
                missing = digest.problems
            return machine.submit(live.sidecar, live.md, missing, ctx)

        return await self._run(session_id, decide)
