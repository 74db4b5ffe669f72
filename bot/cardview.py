"""The plan card and the goal card as channel-neutral text (docs/architecture.md, "Adding a
third channel").

The engine gives each card's data with its actions (``engine.api.PlanCardData``,
``GoalCardData``); this module turns it into what any front end shows: lines of styled spans
(plain, bold, italic, code, a preformatted block, or Markdown the channel renders in its own
format) and rows of buttons, each a label and the :class:`engine.api.Press` it sends. A front
end writes the spans in its own markup (Slack's mrkdwn, the console's plain text) and encodes
each press in its own button data; it decides nothing about what a card says.

The labels and the notes under a card's status are the same on every channel; Telegram's card
builder (bot/telegram/cards.py), which fits its cards to Telegram's 4,096 UTF-16 units, takes
them from here.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from engine.api import (
    GOAL_CANCEL,
    GOAL_CLEAR,
    GOAL_CLEAR_YES,
    GOAL_PAUSE,
    GOAL_RESUME,
    GOAL_START,
    PLAN_APPROVE,
    PLAN_CANCEL,
    PLAN_DISCARD,
    PLAN_DISCARD_YES,
    PLAN_DROP,
    PLAN_DROP_NO,
    PLAN_DROP_YES,
    PLAN_KEEP,
    PLAN_KEEP_BRANCH,
    PLAN_MERGE,
    PLAN_PUSH,
    PLAN_RAISE_CAP,
    PLAN_RESUME,
    PLAN_REVISE,
    SHORT_ID_LEN,
    CardActions,
    GoalCardData,
    PlanCardData,
    PlanCardState,
    Press,
    PressKind,
    current_task,
    extract_work_items,
    how_it_ended,
    plan_checks,
    runner_file,
    task_label,
)
from engine.checks.types import CheckResult
from engine.events import GoalCheck
from engine.goal.types import GoalSnapshot
from engine.plan.types import PlanSidecar, PlanTask
from engine.text import clip, fmt_tokens
from engine.worktree.types import DECIDING, WorktreeView

# Labels, exactly as docs/telegram.md lists them (tests match on them).
APPROVE = "✅ Approve"
KEEP_PLANNING = "✏️ Keep planning"
DISCARD = "🗑 Discard"
REVISE = "✏️ Revise plan"
CANCEL = "Cancel"
YES_DISCARD = "Yes, discard"
YES_CLEAR = "Yes, clear"
PAUSE = "⏸ Pause"
RESUME = "▶️ Resume"
# A paused run whose project setup failed: the same press runs the setup again.
RETRY = "▶️ Retry"
RAISE_CAP = "⬆️ Raise cap to {tokens}"
START = "▶️ Start"
CLEAR = "✖️ Clear"
# The Done card of a plan that ran in a git worktree (docs/projects.md).
MERGE = "🔀 Merge"
PUSH_BRANCH = "⬆️ Push branch"
KEEP_BRANCH = "🌿 Keep branch"
DISCARD_CHANGES = "🗑 Discard changes"
YES_DISCARD_CHANGES = "Yes, discard changes"

# Each card action's label (the actions themselves come from the engine: engine.api's table).
ACTION_LABELS: dict[str, str] = {
    PLAN_APPROVE: APPROVE,
    PLAN_KEEP: KEEP_PLANNING,
    PLAN_DISCARD: DISCARD,
    PLAN_DISCARD_YES: YES_DISCARD,
    PLAN_REVISE: REVISE,
    PLAN_CANCEL: CANCEL,
    PLAN_RESUME: RESUME,
    PLAN_MERGE: MERGE,
    PLAN_PUSH: PUSH_BRANCH,
    PLAN_KEEP_BRANCH: KEEP_BRANCH,
    PLAN_DROP: DISCARD_CHANGES,
    PLAN_DROP_YES: YES_DISCARD_CHANGES,
    PLAN_DROP_NO: CANCEL,
    GOAL_PAUSE: PAUSE,
    GOAL_RESUME: RESUME,
    GOAL_START: START,
    GOAL_CLEAR: CLEAR,
    GOAL_CLEAR_YES: YES_CLEAR,
    GOAL_CANCEL: CANCEL,
}

PLAN_STATUS: dict[PlanCardState, str] = {
    "none": "No plan",
    "planning": "Planning — exploring the project; nothing is changed",
    "written": "Planning — writing the plan",
    "review": "Ready for review",
    "active": "In progress",
    "paused": "Paused",
    "revise_offer": "In progress — revise the plan?",
    "confirm_discard": "Discard this plan?",
    "done": "Done",
}
TASK_ICON = {"completed": "✅", "in_progress": "▶️", "pending": "⬜", "deferred": "⏭"}
ENDED_NOTE = {
    "discarded": "🗑 Discarded: {title}",
    "abandoned": "📦 Set aside by /new: {title}",
}
BUSY_NOTE = "⏳ The agent is working…"
SETUP_NOTE = "🔧 Setting up the environment"
GOAL_PHASE = {"active": "Active", "paused": "Paused", "blocked": "Blocked", "complete": "Complete"}
# What the owner does about each blocked code (docs/goals.md has the same table).
BLOCKED_FIX = {
    "round-limit": "Raise the cap with /goal rounds N, then Resume.",
    "budget-limit": "Raise the budget with /goal budget 500k (or the daily cap with /usage cap), "
    "then Resume.",
    "no-progress": "Send a hint or sharpen the objective, then Resume.",
    "needs-approval": "Allow the command, then Resume.",
}
CHECK_MARK = "🧪"
BAR_CELLS = 10
WINDOW_BEFORE = 2
WINDOW_AFTER = 6
MAX_TITLE_CHARS = 120
# A plan text longer than this is listed as its steps on the card, not shown whole.
LONG_PLAN_CHARS = 12_000
MAX_STEPS_SHOWN = 60
MAX_FILES_SHOWN = 20

Style = Literal["plain", "bold", "italic", "code", "pre", "markdown"]


@dataclass(frozen=True, slots=True)
class Span:
    """A piece of a card's line: text, and how it is set (``markdown``: the plan's own text,
    which the channel renders in its format)."""

    text: str
    style: Style = "plain"


Line = tuple[Span, ...]
Button = tuple[str, Press]


@dataclass(frozen=True, slots=True)
class CardText:
    """What a card shows, on any channel: its lines and its rows of buttons."""

    lines: tuple[Line, ...]
    buttons: tuple[tuple[Button, ...], ...] = ()

    def plain(self) -> str:
        """The card as plain text, a line each (the plan's Markdown as text)."""
        return "\n".join(
            "".join(
                markdown_to_text(span.text) if span.style == "markdown" else span.text
                for span in line
            )
            for line in self.lines
        )

    def labels(self) -> list[str]:
        """The buttons' labels, row after row."""
        return [label for row in self.buttons for label, _ in row]

    def without_buttons(self) -> CardText:
        """The same card with no buttons (a stale card)."""
        return CardText(self.lines)


_MD_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
_MD_STRONG = re.compile(r"(\*\*|__)(.+?)\1")
_MD_CODE = re.compile(r"`([^`]+)`")
_MD_HEADING = re.compile(r"^#{1,6}\s+")
_MD_BULLET = re.compile(r"^(\s*)[-*+]\s+")


def markdown_to_text(text: str) -> str:
    """Markdown as plain text for a terminal: code fences, strong marks, inline code marks and
    heading marks dropped, a list item's mark a bullet, a link as ``text (url)``."""
    out: list[str] = []
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            line = _MD_HEADING.sub("", line)
            line = _MD_BULLET.sub(r"\1• ", line)
            line = _MD_LINK.sub(r"\1 (\2)", line)
            line = _MD_STRONG.sub(r"\2", line)
            line = _MD_CODE.sub(r"\1", line)
        out.append(line)
    return "\n".join(out)


def first_paragraph(markdown: str) -> str:
    """The first block of ``markdown`` with visible words (blocks are split at blank lines);
    a heading alone is joined by the block after it, so the summary says something."""
    blocks = [b.strip() for b in re.split(r"\n\s*\n", markdown[:20_000]) if b.strip()]
    if not blocks:
        return ""
    if blocks[0].startswith("#") and len(blocks) > 1:
        return blocks[0] + "\n\n" + blocks[1]
    return blocks[0]


def _line(*spans: Span | str) -> Line:
    return tuple(s if isinstance(s, Span) else Span(s) for s in spans if s)


def _one(text: str, limit: int = MAX_TITLE_CHARS) -> str:
    return clip(text, limit, one_line=True)


def progress_bar(done: int, total: int, *, cells: int = BAR_CELLS) -> str:
    """A text bar like ``▓▓▓░░░░░░░ 3/10``."""
    filled = 0 if total <= 0 else round(cells * done / total)
    return "▓" * filled + "░" * (cells - filled) + f" {done}/{total}"


def task_order(task: PlanTask) -> tuple[int, int, str]:
    """The order tasks are listed in: by their order, then by id (numbers as numbers)."""
    key = (int(task.id), "") if task.id.isdigit() else (1 << 62, task.id)
    return (task.order, *key)


def counts_line(tasks: Sequence[PlanTask]) -> str:
    """The checklist's progress bar, with how many were skipped."""
    done = sum(1 for t in tasks if t.status in ("completed", "deferred"))
    skipped = sum(1 for t in tasks if t.status == "deferred")
    return progress_bar(done, len(tasks)) + (f" ({skipped} skipped)" if skipped else "")


def current_index(tasks: Sequence[PlanTask]) -> int:
    """The task the card centres on: the one in progress, else the first pending, else the
    last."""
    for status in ("in_progress", "pending"):
        for i, t in enumerate(tasks):
            if t.status == status:
                return i
    return max(0, len(tasks) - 1)


def task_lines(
    tasks: Sequence[PlanTask], *, before: int = WINDOW_BEFORE, after: int = WINDOW_AFTER
) -> list[Line]:
    """The tasks around the current one (in bold), with counts of those not shown."""
    ordered = sorted(tasks, key=task_order)
    if not ordered:
        return []
    cur = current_index(ordered)
    lo, hi = max(0, cur - before), min(len(ordered), cur + after + 1)
    lines: list[Line] = []
    if lo > 0:
        lines.append(_line(Span(f"… {lo} earlier", "italic")))
    for t in ordered[lo:hi]:
        text = f"{TASK_ICON.get(t.status, '⬜')} {_one(t.id, 12)}. {_one(t.title)}"
        if t.checks:
            text += f" {CHECK_MARK}"
        lines.append(_line(Span(text, "bold" if t.status == "in_progress" else "plain")))
    if hi < len(ordered):
        lines.append(_line(Span(f"… {len(ordered) - hi} more", "italic")))
    return lines


def plan_note(data: PlanCardData, *, now: float) -> str | None:
    """The card's line under the status: working on what, waiting for whom, or why halted."""
    if data.waiting is not None:
        return f"👉 Waiting for you: {data.waiting}."
    if data.halted is not None:
        return f"⏸ {data.halted}"
    if data.setting_up:
        return SETUP_NOTE
    if data.checking is not None:
        return f"🧪 Running the checks of {data.checking}"
    if not data.busy or data.state not in ("planning", "written", "active"):
        return None
    if data.state != "active" or data.sidecar is None or not data.sidecar.tasks:
        return BUSY_NOTE
    task = current_task(data.sidecar.tasks)
    line = f"⏳ Working on {task_label(task)}" if task is not None else BUSY_NOTE
    if data.last_progress_at is not None:
        line += f" · last progress {_ago(now - data.last_progress_at)}"
    return line


def _ago(seconds: float) -> str:
    minutes = int(max(0.0, seconds) // 60)
    if minutes < 1:
        return "just now"
    return f"{minutes} min ago" if minutes < 120 else f"{minutes // 60} h ago"


def ended_note(data: PlanCardData) -> str | None:
    """What happened to a plan that just ended other than done (discarded, set aside)."""
    sidecar = data.sidecar
    if data.ended not in ENDED_NOTE or sidecar is None or data.ended is None:
        return None
    note = ENDED_NOTE[data.ended].format(title=sidecar.title or "Untitled plan")
    if data.worktree is not None and data.worktree.message:
        note += f" · {data.worktree.message}"  # what happened to its branch
    return note


def names_and(names: Sequence[str]) -> str:
    """``Ana``, ``Ana and Bo``, ``Ana, Bo and Cy``."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def approval_text(
    sidecar: PlanSidecar, state: PlanCardState, *, approvals: Sequence[str], needed: int
) -> str | None:
    """Who approved: "✅ Approved by Ana" on an approved plan, "👍 1 of 2 approvals: Ana"
    while a review waits for more (plain text)."""
    if sidecar.status == "Active" and sidecar.approved_by and state != "revise_offer":
        # People by their names, never by an id: an approval recorded without one is
        # "someone" (an older sidecar, a front end that knew no name).
        names = [a.name or "someone" for a in sidecar.approved_by if a.user_id is not None]
        if names:
            return "✅ Approved by " + _one(names_and(names), 200)
    if state in ("review", "confirm_discard", "written") and needed > 1:
        who = f": {names_and(list(approvals))}" if approvals else ""
        return _one(f"👍 {len(approvals)} of {needed} approvals{who}", 200)
    return None


def plan_status(sidecar: PlanSidecar, state: PlanCardState) -> str:
    """The plan card's status line (a plan being revised says so)."""
    status = PLAN_STATUS[state]
    if sidecar.revising is not None and sidecar.status == "Editing":
        status = "Revising — " + status[0].lower() + status[1:]
    return status


def action_label(action: str, *, raise_cap: int | None = None, retry: bool = False) -> str:
    """The label of a card action (``retry``: Resume reads Retry, the run paused on its
    project's setup)."""
    if action == PLAN_RAISE_CAP:
        return RAISE_CAP.format(tokens=fmt_tokens(raise_cap or 0))
    if action == PLAN_RESUME and retry:
        return RETRY
    return ACTION_LABELS[action]


def buttons(
    actions: CardActions,
    kind: PressKind,
    full_id: str,
    revision: int,
    *,
    raise_cap: int | None = None,
    retry: bool = False,
) -> tuple[tuple[Button, ...], ...]:
    """The engine's card actions as buttons: a label each, and the press it sends, bound to
    the card's id and revision."""
    short = full_id[:SHORT_ID_LEN]
    return tuple(
        tuple(
            (action_label(a, raise_cap=raise_cap, retry=retry), Press(kind, a, short, revision))
            for a in row
        )
        for row in actions
    )


# ---- plan card -------------------------------------------------------------------------


def plan_card_text(data: PlanCardData, *, now: float) -> CardText:
    """The plan card of the engine's card data (``now``: the wall clock, for "last
    progress ... ago")."""
    sidecar = data.sidecar
    ended = ended_note(data)
    if ended is not None or sidecar is None or data.state == "none":
        lines = [_line("📋 ", Span("No plan", "bold"))]
        return CardText(tuple(_with_note(lines, ended)))
    head = [
        _line("📋 ", Span(_one(sidecar.title or "New plan", 400), "bold")),
        _line(Span(plan_status(sidecar, data.state), "italic")),
    ]
    approved = approval_text(
        sidecar, data.state, approvals=data.approvals, needed=data.approvals_needed
    )
    if approved:
        head.append(_line(approved))
    rows = buttons(
        data.actions,
        "p",
        sidecar.id,
        sidecar.revision,
        raise_cap=data.raise_cap,
        retry=data.retry,
    )
    if not rows and data.worktree is not None and data.branch_actions:
        rows = buttons(data.branch_actions, "p", data.worktree.plan_id, data.worktree.revision)
    note = plan_note(data, now=now)
    tasks = sidecar.tasks
    if data.state in ("review", "confirm_discard") and data.markdown and not tasks:
        body = _review_lines(data.markdown, steps=data.steps, checks=data.checks)
        return CardText(tuple(_with_note([*head, (), *body], note)), rows)
    lines = list(head)
    if not tasks:
        if sidecar.status == "Active":
            lines += [(), _line("No checklist yet: /execute seeds it.")]
    else:
        lines += [(), _line(counts_line(tasks)), *task_lines(tasks)]
        if data.state == "done":
            lines += checks_proof(sidecar)
    if data.setup_tail:
        lines += [(), _line(Span(clip(data.setup_tail, 1500), "pre"))]
    if data.worktree is not None:
        lines += [(), *worktree_lines(data.worktree)]
    return CardText(tuple(_with_note(lines, note)), rows)


def _with_note(lines: list[Line], note: str | None) -> list[Line]:
    return [*lines, (), _line(_one(note, 500))] if note else lines


@functools.lru_cache(maxsize=16)
def _plan_body(markdown: str) -> str:
    """The plan's Markdown, its leading ``# Title`` left to the card's head."""
    lines = markdown.strip().splitlines()
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
    return "\n".join(lines).strip()


@functools.lru_cache(maxsize=16)
def _parsed(
    markdown: str,
) -> tuple[tuple[tuple[str, tuple[str, ...]], ...], tuple[tuple[str, str], ...]]:
    """The plan's steps with their Done when lines, and its checks with where."""
    items = extract_work_items(markdown)
    steps = tuple((item.title, tuple(item.acceptance_criteria)) for item in items)
    checks = [(c, f"step {n}") for n, item in enumerate(items, start=1) for c in item.checks]
    checks += [(c, "whole plan") for c in plan_checks(markdown)]
    return steps, tuple(checks)


def _review_lines(
    markdown: str,
    *,
    steps: Sequence[tuple[str, Sequence[str]]] | None,
    checks: Sequence[tuple[str, str]] | None,
) -> list[Line]:
    """The review card's body: the plan text (its steps when long) and the checks it names."""
    if steps is None or checks is None:
        parsed_steps, parsed_checks = _parsed(markdown)
        steps = parsed_steps if steps is None else steps
        checks = parsed_checks if checks is None else checks
    block: list[Line] = []
    if checks:
        block = [
            (),
            _line(
                f"{CHECK_MARK} ",
                Span("Checks", "bold"),
                " (plangate runs them before a step counts as done)",
            ),
        ]
        block += [
            _line(f"{CHECK_MARK} ", Span(_one(command, 200), "code"), f" · {where}")
            for command, where in checks[:20]
        ]
        if len(checks) > 20:
            block.append(_line(Span(f"… {len(checks) - 20} more checks", "italic")))
    body = _plan_body(markdown)
    if body and len(body) <= LONG_PLAN_CHARS:
        return [_line(Span(body, "markdown")), *block]
    lines: list[Line] = []
    for i, (step, criteria) in enumerate(steps[:MAX_STEPS_SHOWN], start=1):
        lines.append(_line(f"{i}. {_one(step)}"))
        lines += [_line("   ", Span(f"Done when: {_one(c)}", "italic")) for c in criteria[:2]]
    if len(steps) > MAX_STEPS_SHOWN:
        lines.append(_line(Span(f"… {len(steps) - MAX_STEPS_SHOWN} more steps", "italic")))
    return [*lines, *block]


def _result_line(result: CheckResult, where: str) -> Line:
    mark = "✅" if result.passed else "❌"
    return _line(
        f"{mark} ", Span(_one(result.command, 200), "code"), f" {how_it_ended(result)} · {where}"
    )


def checks_proof(sidecar: PlanSidecar) -> list[Line]:
    """The Done card's proof: every check with plangate's result, and the watched files that
    changed during the run."""
    lines: list[Line] = []
    for task in sorted(sidecar.tasks, key=task_order):
        ran = {r.command: r for r in task.check_results}
        for command in task.checks:
            result = ran.get(command)
            if result is not None:
                lines.append(_result_line(result, f"task {task.id}"))
            else:  # skipped with the owner's approval, or carried without a record
                state = "skipped" if task.status == "deferred" else "not run"
                lines.append(
                    _line("⏭ ", Span(_one(command, 200), "code"), f" {state} · task {task.id}")
                )
    plan_ran = {r.command for r in sidecar.check_results}
    lines += [_result_line(r, "whole plan") for r in sidecar.check_results]
    lines += [
        _line("⏭ ", Span(_one(command, 200), "code"), " skipped · whole plan")
        for command in sidecar.checks
        if command not in plan_ran
    ]
    if not lines and not sidecar.changed_tests:
        return []
    block = [(), _line(f"{CHECK_MARK} ", Span("Checks", "bold")), *lines]
    runners = [p for p in sidecar.changed_tests if runner_file(p)]
    tests = [p for p in sidecar.changed_tests if not runner_file(p)]
    for label, changed in (("✏️ changed tests", tests), ("⚠️ changed what runs the checks", runners)):
        if changed:
            more = f" (+{len(changed) - 10} more)" if len(changed) > 10 else ""
            block.append(_line(f"{label}: {_one(', '.join(changed[:10]), 600)}{more}"))
    return block


def worktree_lines(view: WorktreeView) -> list[Line]:
    """The card's lines about the plan's worktree: where it works; at Done the branch, its
    diffstat and the files changed."""
    if view.phase in ("in_place", "failed"):
        return [_line(f"📁 {_one(view.message or 'works in place', 300)}")]
    branch = Span(_one(view.branch, 100), "code")
    base = f" from {_one(view.base, 60)}" if view.base else ""
    if view.phase in ("live", "creating"):
        return [
            _line("🌿 Working in its own worktree on ", branch, f"{base}."),
            _line(
                Span(
                    "Other plans and chats in this project can read this branch through git; "
                    "a separate clone listed as its own project keeps work apart.",
                    "italic",
                )
            ),
        ]
    if view.phase not in DECIDING:
        return [_line(f"🌿 {_one(view.message, 300)}")] if view.message else []
    count = len(view.files)
    noun = "file" if count == 1 else "files"
    lines = [_line("🌿 ", branch, f"{base}: {count} {noun}, +{view.added} −{view.removed}")]
    for f in view.files[:MAX_FILES_SHOWN]:
        counts = "binary" if f.added is None else f"+{f.added} −{f.removed or 0}"
        lines.append(_line(_one(f.path, 90), " ", Span(counts, "italic")))
    if count > MAX_FILES_SHOWN:
        lines.append(_line(Span(f"… {count - MAX_FILES_SHOWN} more files", "italic")))
    if view.left_out:
        nested = ", ".join(_one(path, 80) for path in view.left_out[:5])
        more = f" and {len(view.left_out) - 5} more" if len(view.left_out) > 5 else ""
        lines.append(
            _line(
                f"⚠️ Not part of the branch: {nested}{more} (a nested repository or "
                "submodule; plangate never stages or enters one)."
            )
        )
    if view.message:
        lines.append(_line(f"⚠️ {_one(view.message, 500)}"))
    if view.confirm_drop:
        lines.append(
            _line(Span("Discard these changes? The worktree and the branch are removed.", "italic"))
        )
    return lines


# ---- goal card -------------------------------------------------------------------------


def goal_card_text(data: GoalCardData, *, note: str | None = None) -> CardText:
    """The goal card of the engine's card data: objective, phase (and whether it runs now),
    rounds and tokens against the budget, its checks and their last run, why it is blocked
    and the fix, and its buttons."""
    goal = data.goal
    if goal is None:
        return CardText(tuple(_with_note([_line("🎯 ", Span("No goal", "bold"))], note)))
    phase = GOAL_PHASE[goal.phase]
    if goal.phase == "active":
        phase += " — running" if data.armed else " — stopped"
    if goal.source == "task":
        phase = "Current task's acceptance criteria"
    lines = [_line("🎯 ", Span("Goal", "bold"), " ", Span(phase, "italic"))]
    if data.state == "confirm_clear":
        lines.append(_line(Span("Clear this goal?", "italic")))
    lines.append(_line(_one(goal.objective, 2000)))
    if goal.source != "task":
        budget = f" / {goal.token_budget:,}" if goal.token_budget else ""
        every = f" · every {every_text(goal.schedule_s)}" if goal.schedule_s else ""
        lines.append(
            _line(
                f"Rounds {progress_bar(goal.rounds_started, goal.max_goal_rounds)}"
                f" · tokens {data.tokens_used:,}{budget}{every}"
            )
        )
    lines += goal_checks_lines(goal, data.last_check)
    if goal.blocked is not None:
        lines.append(_line(f"⚠️ {_one(goal.blocked.code, 40)}: {_one(goal.blocked.message, 500)}"))
        fix = BLOCKED_FIX.get(goal.blocked.code)
        if fix is not None:
            lines.append(_line(Span(fix, "italic")))
    rows = buttons(data.actions, "g", goal.id, goal.revision)
    return CardText(tuple(_with_note(lines, note)), rows)


def goal_checks_lines(goal: GoalSnapshot, last: GoalCheck | None) -> list[Line]:
    """The goal card's checks: the commands, and the last run (✅/❌, when, how long)."""
    if not goal.checks:
        return []
    listed: list[Span | str] = [f"{CHECK_MARK} Checks: "]
    for i, command in enumerate(goal.checks[:5]):
        listed += [", " if i else "", Span(_one(command, 120), "code")]
    if len(goal.checks) > 5:
        listed.append(f" (+{len(goal.checks) - 5})")
    lines = [_line(*listed)]
    if last is None or last.goal_id != goal.id:
        return [
            *lines,
            _line(Span("Not run yet: they run when the agent reports the goal done.", "italic")),
        ]
    results = last.run.results
    when = clock_of(results[-1].at) if results else ""
    took = f"{last.run.duration_s:.1f}s"
    if last.passed:
        return [*lines, _line(f"✅ Checks passed {when} · {took}")]
    failed = last.run.failed
    if failed is None:
        return [*lines, _line(f"❌ Checks failed {when} · {took}")]
    return [
        *lines,
        _line(
            f"❌ Checks failed {when} · {took}: ",
            Span(_one(failed.command, 120), "code"),
            f" {how_it_ended(failed)}",
        ),
    ]


def clock_of(iso: str) -> str:
    """``2026-12-01T23:05:07+00:00`` -> ``23:05 UTC``."""
    time_part = iso.partition("T")[2]
    return f"{time_part[:5]} UTC" if len(time_part) >= 5 else ""


def every_text(seconds: int) -> str:
    """A goal's schedule as people write it: ``30m``, ``2h``, ``1d``."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


__all__ = [
    "ACTION_LABELS",
    "CardText",
    "Line",
    "Span",
    "first_paragraph",
    "goal_card_text",
    "markdown_to_text",
    "plan_card_text",
    "plan_note",
]
