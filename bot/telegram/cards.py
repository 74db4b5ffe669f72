"""Pure builders of the plan card and the goal card (docs/telegram.md).

A card is one message: title, status, a progress bar, a window of tasks around the current
one with counts, and the buttons for its state. Builders take plain values (the sidecar, a
goal snapshot) and return a ``CardView``; they make no Telegram calls. The raw HTML always
fits Telegram's 4,096 UTF-16 units. Buttons carry callback data bound to the revision they
were drawn for (``bot.presses``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from telegram import InlineKeyboardButton, InlineKeyboardMarkup

from bot import presses as cb

# The labels, statuses and texts are every channel's (bot.cardview); Telegram fits them to
# its message in HTML here.
from bot.cardview import (
    ACTION_LABELS,
    RAISE_CAP,
    RETRY,
    clock_of,
    current_index,
    every_text,
    names_and,
    progress_bar,
    task_order,
)
from bot.cardview import APPROVE as APPROVE
from bot.cardview import BLOCKED_FIX as _BLOCKED_FIX
from bot.cardview import CANCEL as CANCEL
from bot.cardview import CLEAR as CLEAR
from bot.cardview import DISCARD as DISCARD
from bot.cardview import DISCARD_CHANGES as DISCARD_CHANGES
from bot.cardview import GOAL_PHASE as _GOAL_PHASE
from bot.cardview import KEEP_BRANCH as KEEP_BRANCH
from bot.cardview import KEEP_PLANNING as KEEP_PLANNING
from bot.cardview import MERGE as MERGE
from bot.cardview import PAUSE as PAUSE
from bot.cardview import PLAN_STATUS as _PLAN_STATUS
from bot.cardview import PUSH_BRANCH as PUSH_BRANCH
from bot.cardview import RESUME as RESUME
from bot.cardview import REVISE as REVISE
from bot.cardview import START as START
from bot.cardview import TASK_ICON as _TASK_ICON
from bot.cardview import YES_CLEAR as YES_CLEAR
from bot.cardview import YES_DISCARD as YES_DISCARD
from bot.cardview import YES_DISCARD_CHANGES as YES_DISCARD_CHANGES
from bot.telegram.render import (
    TELEGRAM_TEXT_LIMIT,
    escape,
    escape_within,
    markdown_to_html,
    utf16_len,
)
from engine.api import (
    CardActions,
    PlanCardState,
    branch_actions,
    extract_work_items,
    goal_actions,
    how_it_ended,
    plan_actions,
    plan_checks,
    runner_file,
)
from engine.checks.types import CheckResult
from engine.events import GoalCheck
from engine.goal.types import GoalSnapshot
from engine.plan.types import PlanSidecar, PlanTask
from engine.text import clip, fmt_tokens
from engine.worktree.types import DECIDING, FileStat, WorktreeView

Button = tuple[str, str]  # (label, callback data)

# Files listed on the Done card before "… N more files".
FILES_SHOWN = (40, 20, 10, 5, 0)

BAR_CELLS = 10
WINDOW_BEFORE = 2
WINDOW_AFTER = 6
MAX_TITLE_CHARS = 120


@dataclass(frozen=True, slots=True)
class CardView:
    """What a card shows: HTML text and rows of (label, callback data) buttons."""

    text: str
    buttons: tuple[tuple[Button, ...], ...] = ()

    def without_buttons(self) -> CardView:
        """The same card with no keyboard (a stale card, or a non-owner's copy)."""
        return CardView(self.text, ())


def to_markup(view: CardView) -> InlineKeyboardMarkup | None:
    """The card's keyboard for PTB, or ``None`` when it has no buttons."""
    if not view.buttons:
        return None
    return InlineKeyboardMarkup(
        [
            [InlineKeyboardButton(label, callback_data=data) for label, data in row]
            for row in view.buttons
        ]
    )


# ---- plan card -------------------------------------------------------------------------


def clip_line(text: str, limit: int = MAX_TITLE_CHARS) -> str:
    """Plain text on one line, at most ``limit`` characters, escaped for HTML."""
    return escape(clip(text, limit, one_line=True))


def task_window(
    tasks: Sequence[PlanTask], *, before: int = WINDOW_BEFORE, after: int = WINDOW_AFTER
) -> list[str]:
    """HTML lines for the tasks around the current one, with counts of what is hidden."""
    ordered = sorted(tasks, key=task_order)
    if not ordered:
        return []
    cur = current_index(ordered)
    lo, hi = max(0, cur - before), min(len(ordered), cur + after + 1)
    lines: list[str] = []
    if lo > 0:
        lines.append(f"<i>… {lo} earlier</i>")
    for t in ordered[lo:hi]:
        line = f"{_TASK_ICON.get(t.status, '⬜')} {clip_line(t.id, 12)}. {clip_line(t.title)}"
        if t.checks:
            line += " 🧪"
        lines.append(f"<b>{line}</b>" if t.status == "in_progress" else line)
    if hi < len(ordered):
        lines.append(f"<i>… {len(ordered) - hi} more</i>")
    return lines


def _rows(
    actions: CardActions,
    data: Callable[[str], str],
    *,
    raise_cap: int | None = None,
    retry: bool = False,
) -> tuple[tuple[Button, ...], ...]:
    """The engine's card actions drawn as buttons: a label each, callback data bound
    (``retry``: Resume reads Retry, the run paused on its project's setup)."""

    def label(action: str) -> str:
        if action == cb.PLAN_RAISE_CAP:
            return RAISE_CAP.format(tokens=fmt_tokens(raise_cap or 0))
        if action == cb.PLAN_RESUME and retry:
            return RETRY
        return ACTION_LABELS[action]

    return tuple(tuple((label(a), data(a)) for a in row) for row in actions)


def _plan_buttons(
    state: PlanCardState,
    plan_id: str,
    revision: int,
    *,
    raise_cap: int | None = None,
    actions: CardActions | None = None,
    retry: bool = False,
) -> tuple[tuple[Button, ...], ...]:
    """The plan card's buttons: ``actions`` as the engine gave them (by default its table's
    for ``state``), bound to the plan's id and revision."""
    if actions is None:
        actions = plan_actions(state, raise_cap=raise_cap)
    return _rows(
        actions, lambda a: cb.plan_data(a, plan_id, revision), raise_cap=raise_cap, retry=retry
    )


def _branch_buttons(
    view: WorktreeView, actions: CardActions | None = None
) -> tuple[tuple[Button, ...], ...]:
    """The Done card's branch buttons, bound to the finished plan's id and revision."""
    if actions is None:
        actions = branch_actions(view)
    return _rows(actions, lambda a: cb.plan_data(a, view.plan_id, view.revision))


def _stat(f: FileStat) -> str:
    counts = "binary" if f.added is None else f"+{f.added} −{f.removed or 0}"
    return f"{clip_line(f.path, 90)} <i>{counts}</i>"


def worktree_lines(view: WorktreeView, *, files: int | None, patch: bool) -> list[str]:
    """The card's lines about the plan's worktree. At Done: the branch, the diffstat, up to
    ``files`` file lines (all with ``None``), and the whole diff when ``patch``."""
    branch = clip_line(view.branch, 100)
    base = f" from {clip_line(view.base, 60)}" if view.base else ""
    if view.phase in ("in_place", "failed"):
        return [f"📁 {escape(clip(view.message or 'works in place', 300, one_line=True))}"]
    if view.phase in ("live", "creating"):
        return [
            f"🌿 Working in its own worktree on <code>{branch}</code>{base}.",
            # What git shares (docs/projects.md, "What the agent of one plan can read").
            "<i>Other plans and chats in this project can read this branch through git; a "
            "separate clone listed as its own project keeps work apart.</i>",
        ]
    if view.phase not in DECIDING:
        return [f"🌿 {escape(clip(view.message, 300, one_line=True))}"] if view.message else []
    count = len(view.files)
    noun = "file" if count == 1 else "files"
    lines = [f"🌿 <code>{branch}</code>{base}: {count} {noun}, +{view.added} −{view.removed}"]
    if patch and view.patch:
        lines.append(f"<pre>{escape(view.patch.rstrip())}</pre>")
    else:
        shown = view.files if files is None else view.files[:files]
        lines.extend(_stat(f) for f in shown)
        if len(shown) < count:
            lines.append(f"<i>… {count - len(shown)} more files</i>")
        if view.patch_name:
            lines.append(f"<i>The whole diff is attached as {escape(view.patch_name)}.</i>")
    if view.left_out:
        nested = ", ".join(clip_line(path, 80) for path in view.left_out[:5])
        more = f" and {len(view.left_out) - 5} more" if len(view.left_out) > 5 else ""
        lines.append(
            f"⚠️ Not part of the branch: {escape(nested)}{more} (a nested repository or "
            "submodule; plangate never stages or enters one)."
        )
    if view.message:
        lines.append(f"⚠️ {escape(clip(view.message, 500, one_line=True))}")
    if view.confirm_drop:
        lines.append("<i>Discard these changes? The worktree and the branch are removed.</i>")
    return lines


def patch_inline(
    sidecar: PlanSidecar, state: PlanCardState, view: WorktreeView, *, note: str | None = None
) -> bool:
    """The whole diff fits on the Done card (else it goes as the ``.patch`` document)."""
    if not view.patch or view.phase not in DECIDING or len(view.patch) > TELEGRAM_TEXT_LIMIT:
        return False  # (a diff longer than a message is never escaped just to be measured)
    # Measured on the card at its narrowest (the last task only, no checks' proof): when it
    # fits there, the card is drawn with it at some width.
    tasks = sidecar.tasks
    window = [_counts(tasks), *task_window(tasks, before=0, after=0)] if tasks else []
    lines = [*_plan_head(sidecar, state), "", *window]
    lines += ["", *worktree_lines(view, files=None, patch=True)]
    return _fit(lines, note) is not None


def build_plan_card(
    sidecar: PlanSidecar | None,
    state: PlanCardState,
    *,
    note: str | None = None,
    markdown: str | None = None,
    attached: bool = False,
    approvals: Sequence[str] = (),
    approvals_needed: int = 1,
    worktree: WorktreeView | None = None,
    raise_cap: int | None = None,
    steps: Sequence[tuple[str, Sequence[str]]] | None = None,
    checks: Sequence[tuple[str, str]] | None = None,
    actions: CardActions | None = None,
    branch: CardActions | None = None,
    retry: bool = False,
    output: str | None = None,
) -> CardView:
    """The plan card for this sidecar in this state; ``note`` is one extra line of plain text.

    ``actions`` and ``branch``: the card's actions as the engine's card data lists them
    (without them, the engine's table for ``state`` and ``worktree``). ``retry``: the
    paused run's Resume reads Retry (its project setup failed); ``output`` is the end of that
    setup's output, shown under the tasks.

    ``approvals``: who approved this revision so far, when it needs ``approvals_needed``.
    ``raise_cap``: a run the daily cap paused also offers "Raise cap to <tokens>".

    In review the card carries the plan itself (``markdown``, rendered) when it fits one
    message; otherwise (or with ``attached``: the ``.md`` went as a document) it lists the
    plan's steps with their Done when lines. ``steps`` and ``checks`` are as the engine parsed
    them (once per revision, off the loop); without them they are parsed here from
    ``markdown``.
    """
    if sidecar is None or state == "none":
        return CardView(_fit(["📋 <b>No plan</b>"], note) or "No plan")
    head = _plan_head(sidecar, state, approvals=approvals, needed=approvals_needed)
    tasks = sidecar.tasks
    buttons = _plan_buttons(
        state, sidecar.id, sidecar.revision, raise_cap=raise_cap, actions=actions, retry=retry
    )
    if worktree is not None:
        buttons = buttons or _branch_buttons(worktree, branch)
    if state in ("review", "confirm_discard") and markdown and not tasks:
        return CardView(
            _review_text(head, markdown, note, attached=attached, steps=steps, checks=checks),
            buttons,
        )
    # The worktree's section (the branch, the diff at Done), widest first; it is kept apart
    # from the checks' proof above it.
    branch_sections: list[list[str]] = [[]]
    if worktree is not None:
        inline = patch_inline(sidecar, state, worktree, note=note)
        files: list[int | None] = [None] if inline else [None, *FILES_SHOWN]
        branch_sections = [["", *worktree_lines(worktree, files=f, patch=inline)] for f in files]
    if not tasks:
        body = ["", "No checklist yet: /execute seeds it."] if sidecar.status == "Active" else []
        for section in branch_sections:
            text = _fit(head + body + section, note)
            if text is not None:
                return CardView(text, buttons)
        return CardView(_fit(head + body, note) or escape("Plan card too long."), buttons)
    counts = _counts(tasks)
    proof = checks_proof(sidecar) if state == "done" else []
    if output:
        proof = [*proof, "", f"<pre>{escape(clip(output, 1500))}</pre>"]
    # Narrow the window until the card fits (long titles full of "&" can be large).
    for before, after in ((WINDOW_BEFORE, WINDOW_AFTER), (1, 3), (0, 1), (0, 0)):
        window = task_window(tasks, before=before, after=after)
        for shown in (proof, proof[:12], proof[:4], []):
            for section in branch_sections:
                text = _fit([*head, "", counts, *window, *shown, *section], note)
                if text is not None:
                    return CardView(text, buttons)
    return CardView(_fit(head, note) or escape("Plan card too long to show."), buttons)


def _counts(tasks: Sequence[PlanTask]) -> str:
    done = sum(1 for t in tasks if t.status in ("completed", "deferred"))
    skipped = sum(1 for t in tasks if t.status == "deferred")
    return progress_bar(done, len(tasks)) + (f" ({skipped} skipped)" if skipped else "")


def _plan_head(
    sidecar: PlanSidecar,
    state: PlanCardState,
    *,
    approvals: Sequence[str] = (),
    needed: int = 1,
) -> list[str]:
    title = escape_within(sidecar.title or "New plan", 400, one_line=True)
    status = _PLAN_STATUS[state]
    if sidecar.revising is not None and sidecar.status == "Editing":
        status = "Revising — " + status[0].lower() + status[1:]
    head = [f"📋 <b>{title}</b>", f"<i>{escape(status)}</i>"]
    line = approval_line(sidecar, state, approvals=approvals, needed=needed)
    return [*head, line] if line else head


def approval_line(
    sidecar: PlanSidecar, state: PlanCardState, *, approvals: Sequence[str], needed: int
) -> str | None:
    """Who approved: "✅ Approved by Ana" on an approved plan, "👍 1 of 2 approvals: Ana"
    while a review waits for more (HTML)."""
    if sidecar.status == "Active" and sidecar.approved_by and state != "revise_offer":
        # People by their names, never by an id: an approval recorded without one is
        # "someone" (an older sidecar, a front end that knew no name).
        names = [a.name or "someone" for a in sidecar.approved_by if a.user_id is not None]
        if names:
            return "✅ Approved by " + clip_line(names_and(names), 200)
    if state in ("review", "confirm_discard", "written") and needed > 1:
        who = f": {names_and(list(approvals))}" if approvals else ""
        return clip_line(f"👍 {len(approvals)} of {needed} approvals{who}", 200)
    return None


def review_fits(
    sidecar: PlanSidecar,
    markdown: str,
    *,
    state: PlanCardState,
    note: str | None = None,
    approvals: Sequence[str] = (),
    approvals_needed: int = 1,
) -> bool:
    """True when the whole plan text fits on the card drawn with this state and note."""
    body = _plan_body(markdown)
    head = _plan_head(sidecar, state, approvals=approvals, needed=approvals_needed)
    return bool(body) and _fit([*head, "", body], note) is not None


# A review card is redrawn many times at one revision: its plan text is rendered (and its
# steps extracted) once, not on every draw on the event loop.
@functools.lru_cache(maxsize=16)
def _plan_body(markdown: str) -> str:
    """The plan's Markdown as card HTML, its leading ``# Title`` left to the card's head."""
    if len(markdown) > 8 * TELEGRAM_TEXT_LIMIT:
        return ""  # cannot fit one message anyway (the card lists the steps)
    lines = markdown.strip().splitlines()
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
    return markdown_to_html("\n".join(lines).strip())


@functools.lru_cache(maxsize=16)
def _plan_steps(markdown: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The plan's steps with their Done when lines (extracted once per plan text)."""
    return tuple(
        (item.title, tuple(item.acceptance_criteria)) for item in extract_work_items(markdown)
    )


# ---- checks (docs/checks.md): what the owner approves, and the proof at Done ------------

CHECK_MARK = "🧪"


@functools.lru_cache(maxsize=16)
def _review_checks(markdown: str) -> tuple[tuple[str, str], ...]:
    """Every check the plan names with where: ``(command, "step N" | "whole plan")``."""
    found: list[tuple[str, str]] = []
    for n, item in enumerate(extract_work_items(markdown), start=1):
        found.extend((command, f"step {n}") for command in item.checks)
    found.extend((command, "whole plan") for command in plan_checks(markdown))
    return tuple(found)


def review_checks_block(
    markdown: str, *, limit: int = 20, checks: Sequence[tuple[str, str]] | None = None
) -> list[str]:
    """The review card's 🧪 block: the commands that must pass, as the owner approves them
    (``checks`` as the engine parsed them, else parsed here)."""
    if checks is None:
        checks = _review_checks(markdown)
    if not checks:
        return []
    lines = [f"{CHECK_MARK} <b>Checks</b> (plangate runs them before a step counts as done)"]
    for command, where in checks[:limit]:
        lines.append(f"{CHECK_MARK} <code>{clip_line(command, 200)}</code> · {where}")
    if len(checks) > limit:
        lines.append(f"<i>… {len(checks) - limit} more checks</i>")
    return lines


def _result_line(result: CheckResult, where: str = "") -> str:
    mark = "✅" if result.passed else "❌"
    suffix = f" · {escape(where)}" if where else ""
    return f"{mark} <code>{clip_line(result.command, 200)}</code> {how_it_ended(result)}{suffix}"


def checks_proof(sidecar: PlanSidecar) -> list[str]:
    """The Done card's proof block: every check with plangate's result, and the watched
    files that changed during the run ("changed tests")."""
    lines: list[str] = []
    for task in sorted(sidecar.tasks, key=task_order):
        ran = {r.command: r for r in task.check_results}
        for command in task.checks:
            result = ran.get(command)
            if result is not None:
                lines.append(_result_line(result, f"task {task.id}"))
            else:  # skipped with the owner's approval, or carried without a record
                state = "skipped" if task.status == "deferred" else "not run"
                lines.append(f"⏭ <code>{clip_line(command, 200)}</code> {state} · task {task.id}")
    plan_ran = {r.command for r in sidecar.check_results}
    lines.extend(_result_line(r, "whole plan") for r in sidecar.check_results)
    lines.extend(
        f"⏭ <code>{clip_line(command, 200)}</code> skipped · whole plan"
        for command in sidecar.checks
        if command not in plan_ran
    )
    if not lines and not sidecar.changed_tests:
        return []
    block = ["", f"{CHECK_MARK} <b>Checks</b>", *lines]
    # What decides what a check runs (a conftest.py, a package.json, a unittest.py put on the
    # import path) is named apart from the tests: a check can pass because it moved.
    runners = [p for p in sidecar.changed_tests if runner_file(p)]
    tests = [p for p in sidecar.changed_tests if not runner_file(p)]
    for label, changed in (("✏️ changed tests", tests), ("⚠️ changed what runs the checks", runners)):
        if changed:
            more = f" (+{len(changed) - 10} more)" if len(changed) > 10 else ""
            block.append(f"{label}: {clip_line(', '.join(changed[:10]), 600)}{more}")
    return block


MAX_STEP_LINES = 400


def _review_text(
    head: list[str],
    markdown: str,
    note: str | None,
    *,
    attached: bool,
    steps: Sequence[tuple[str, Sequence[str]]] | None = None,
    checks: Sequence[tuple[str, str]] | None = None,
) -> str:
    body = "" if attached else _plan_body(markdown)
    if checks is None:
        checks = _review_checks(markdown)
    block_lines = review_checks_block(markdown, checks=checks)
    if body:
        for block in (block_lines, block_lines[:6], []):
            whole = _fit([*head, "", body, *(["", *block] if block else [])], note)
            if whole is not None:
                return whole
    # Too long for one message: the .md document carries the text, the card the steps.
    if steps is None:
        steps = _plan_steps(markdown)
    lines = [*head, "", "<i>The whole plan is attached as plan.md.</i>", ""]
    # No card holds more than a few hundred step lines (4,096 characters), so a plan of
    # thousands of steps is not clipped and escaped whole on every draw.
    for limit in (min(len(steps), MAX_STEP_LINES), 40, 20, 10, 5, 0):
        shown: list[str] = []
        for i, (step, criteria) in enumerate(steps[:limit], start=1):
            shown.append(f"{i}. {clip_line(step)}")
            shown.extend(f"   <i>Done when: {clip_line(c)}</i>" for c in criteria[:2])
            shown.extend(
                f"   {CHECK_MARK} <code>{clip_line(command, 200)}</code>"
                for command, where in checks
                if where == f"step {i}"
            )
        if limit < len(steps):
            shown.append(f"<i>… {len(steps) - limit} more steps</i>")
        shown.extend(
            f"{CHECK_MARK} <code>{clip_line(command, 200)}</code> · whole plan"
            for command, where in checks
            if where == "whole plan"
        )
        text = _fit([*lines, *shown], note)
        if text is not None:
            return text
    return _fit(head, note) or escape("Plan card too long to show.")


# ---- goal card -------------------------------------------------------------------------


def _goal_buttons(
    goal: GoalSnapshot, *, armed: bool, confirm_clear: bool, actions: CardActions | None = None
) -> tuple[tuple[Button, ...], ...]:
    if actions is None:
        actions = goal_actions(goal, armed=armed, confirm_clear=confirm_clear)
    return _rows(actions, lambda a: cb.goal_data(a, goal.id, goal.revision))


def build_goal_card(
    goal: GoalSnapshot | None,
    *,
    armed: bool,
    confirm_clear: bool = False,
    note: str | None = None,
    tokens_used: int = 0,
    last_check: GoalCheck | None = None,
    actions: CardActions | None = None,
) -> CardView:
    """The goal card: objective, phase (and whether it runs now), rounds and tokens against
    the budget, its checks and their last run, why it is blocked and the fix, buttons
    (``actions`` as the engine's card data lists them; without them, its table's)."""
    if goal is None:
        return CardView(_fit(["🎯 <b>No goal</b>"], note) or "No goal")
    phase = _GOAL_PHASE[goal.phase]
    if goal.phase == "active":
        phase += " — running" if armed else " — stopped"
    if goal.source == "task":
        phase = "Current task's acceptance criteria"
    lines = [f"🎯 <b>Goal</b> <i>{escape(phase)}</i>"]
    if confirm_clear:
        lines.append("<i>Clear this goal?</i>")
    lines.append(escape_within(goal.objective, 2000, one_line=True))
    if goal.source != "task":
        budget = f" / {goal.token_budget:,}" if goal.token_budget else ""
        lines.append(
            f"Rounds {progress_bar(goal.rounds_started, goal.max_goal_rounds)}"
            + f" · tokens {tokens_used:,}{budget}"
            + (f" · every {every_text(goal.schedule_s)}" if goal.schedule_s else "")
        )
    lines.extend(goal_checks_lines(goal, last_check))
    if goal.blocked is not None:
        code = clip_line(goal.blocked.code, 40)
        message = escape_within(goal.blocked.message, 500, one_line=True)
        lines.append(f"⚠️ {code}: {message}")
        fix = _BLOCKED_FIX.get(goal.blocked.code)
        if fix is not None:
            lines.append(f"<i>{escape(fix)}</i>")
    text = _fit(lines, note) or escape("Goal card too long to show.")
    buttons = _goal_buttons(goal, armed=armed, confirm_clear=confirm_clear, actions=actions)
    return CardView(text, buttons)


def goal_checks_lines(goal: GoalSnapshot, last: GoalCheck | None) -> list[str]:
    """The goal card's checks: the commands, and the last run (✅/❌, when, how long)."""
    if not goal.checks:
        return []
    listed = ", ".join(f"<code>{clip_line(c, 120)}</code>" for c in goal.checks[:5])
    more = f" (+{len(goal.checks) - 5})" if len(goal.checks) > 5 else ""
    lines = [f"{CHECK_MARK} Checks: {listed}{more}"]
    if last is None or last.goal_id != goal.id:
        return [*lines, "<i>Not run yet: they run when the agent reports the goal done.</i>"]
    results = last.run.results
    when = clock_of(results[-1].at) if results else ""
    took = f"{last.run.duration_s:.1f}s"
    if last.passed:
        return [*lines, f"✅ Checks passed {when} · {took}"]
    failed = last.run.failed
    what = (
        f": <code>{clip_line(failed.command, 120)}</code> {how_it_ended(failed)}" if failed else ""
    )
    return [*lines, f"❌ Checks failed {when} · {took}{what}"]


def _fit(lines: list[str], note: str | None) -> str | None:
    """Join lines (plus the note); ``None`` when the HTML is over Telegram's limit."""
    if note:
        lines = [*lines, "", escape_within(note, 500, one_line=True)]
    text = "\n".join(lines)
    return text if utf16_len(text) <= TELEGRAM_TEXT_LIMIT else None
