"""``/goal`` for the command plane: a pure parser and one apply function (docs/goals.md).

    /goal                        show the goal
    /goal <objective>            create and arm (or edit the objective of a goal not complete)
    /goal pause | resume | clear | done
    /goal rounds N               set the cap to N
    /goal <objective> --tokens 200k   create with a token budget (k and m suffixes)
    /goal budget 500k            set (raise) the token budget; Resume then continues
    /goal every 30m [objective]  set the schedule (s, m, h, d); creates and arms with objective
    /goal every off              back to "next round when idle"
    /goal <objective> --check "pytest -q"   create with checks (repeatable; docs/checks.md)
    /goal check add <command> | check list | check clear

Typed commands act on the goal as it is when they run (its current ref); buttons carry the ref
they were drawn for and call :class:`GoalService` directly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from engine.goal.fold import UNCHANGED, GoalRefusal, refusal
from engine.goal.service import GoalService
from engine.goal.types import GoalSnapshot
from engine.text import fmt_tokens, parse_tokens

USAGE = (
    'usage: /goal [objective [--tokens 200k] [--check "cmd"]... | pause | resume | clear | done '
    "| rounds N | budget 500k | every <N>s|m|h|d [objective] | every off "
    "| check add <cmd> | check list | check clear]"
)

_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_INTERVAL = re.compile(r"^(\d+)\s*([smhd])$", re.IGNORECASE)
_TOKENS_FLAG = re.compile(r"(?:^|\s)--tokens(?:\s+|=)(\S+)\s*$")
TOKENS_ERROR = "a token amount is a whole number like 5000, 200k or 1.5m"
# --check "cmd", --check 'cmd', --check=cmd or --check cmd (one word), anywhere, repeatable.
_CHECK_FLAG = re.compile(r"""(?:^|\s)--check(?:\s+|=)("(?:[^"\\]|\\.)*"|'[^']*'|\S+)""")


def _unquote(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return re.sub(r"\\(.)", r"\1", text[1:-1])
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1]
    return text


@dataclass(frozen=True, slots=True)
class GoalCommandSpec:
    """A parsed ``/goal``: ``action`` and its operands; ``error`` is set for a usage mistake."""

    action: Literal[
        "show",
        "set",
        "pause",
        "resume",
        "clear",
        "done",
        "rounds",
        "every",
        "budget",
        "usage",
        "check_add",
        "check_list",
        "check_clear",
    ]
    objective: str | None = None
    rounds: int | None = None
    schedule_s: int | None = None
    error: str | None = None
    token_budget: int | None = None
    # ``--check`` flags (``None``: none given, the goal's checks stay), or the command of
    # ``check add``.
    checks: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class GoalCommandResult:
    """What ``/goal`` did: a reply line, the goal after it, and the refusal when refused."""

    text: str
    goal: GoalSnapshot | None = None
    refused: GoalRefusal | None = None


def parse_interval(text: str) -> int | None:
    """``30m`` -> 1800; ``None`` when ``text`` is not ``<N><s|m|h|d>`` with N >= 1."""
    match = _INTERVAL.match(text.strip())
    if match is None or int(match.group(1)) < 1:
        return None
    return int(match.group(1)) * _UNITS_S[match.group(2).lower()]


def parse_goal_command(args: str) -> GoalCommandSpec:
    """Parse the text after ``/goal``. Pure; never raises."""
    text = args.strip()
    if not text:
        return GoalCommandSpec(action="show")
    head, _, rest = text.partition(" ")
    if head.lower() == "check":
        sub, _, command = rest.strip().partition(" ")
        command = _unquote(command)
        if sub.lower() == "add" and command:
            return GoalCommandSpec(action="check_add", checks=(command,))
        if sub.lower() in ("list", "clear") and not command:
            return GoalCommandSpec(action=f"check_{sub.lower()}")  # type: ignore[arg-type]
        # Anything else is an objective that starts with the word "check".
    flagged = [_unquote(m.group(1)) for m in _CHECK_FLAG.finditer(text)]
    checks: tuple[str, ...] | None = None
    if flagged:
        if not all(flagged):
            return GoalCommandSpec(action="usage", error="--check needs a command")
        checks = tuple(flagged)
        text = _CHECK_FLAG.sub("", text).strip()
        if not text:
            return GoalCommandSpec(action="usage", error="--check needs an objective before it")
        if text.split()[0].lower() in ("pause", "resume", "clear", "done", "rounds", "budget"):
            return GoalCommandSpec(action="usage", error="--check goes with an objective")
    budget: int | None = None
    flag = _TOKENS_FLAG.search(text)
    if flag is not None:
        budget = parse_tokens(flag.group(1))
        if budget is None:
            return GoalCommandSpec(action="usage", error=f"--tokens: {TOKENS_ERROR}")
        text = text[: flag.start()].strip()
        if not text:
            return GoalCommandSpec(action="usage", error="--tokens needs an objective before it")
    head, _, rest = text.partition(" ")
    word = head.lower()
    rest = rest.strip()
    if word in ("pause", "resume", "clear", "done") and not rest:
        return GoalCommandSpec(action=word)  # type: ignore[arg-type]
    if word == "budget" and budget is None:
        amount = parse_tokens(rest) if rest else None
        if amount is None:
            return GoalCommandSpec(action="usage", error=f"/goal budget: {TOKENS_ERROR}")
        return GoalCommandSpec(action="budget", token_budget=amount)
    if word == "rounds":
        if rest.isdigit() and int(rest) >= 1:
            return GoalCommandSpec(action="rounds", rounds=int(rest))
        return GoalCommandSpec(action="usage", error="/goal rounds needs a whole number >= 1")
    if word == "every":
        spec, _, objective = rest.partition(" ")
        if spec.lower() == "off" and not objective.strip():
            return GoalCommandSpec(action="every", schedule_s=None)
        interval = parse_interval(spec)
        if interval is None:
            return GoalCommandSpec(
                action="usage", error="/goal every needs an interval like 30m, 2h or 1d, or off"
            )
        return GoalCommandSpec(
            action="every",
            schedule_s=interval,
            objective=objective.strip() or None,
            token_budget=budget,
            checks=checks,
        )
    return GoalCommandSpec(action="set", objective=text, token_budget=budget, checks=checks)


def describe_goal(goal: GoalSnapshot | None, *, armed: bool) -> str:
    """One line for a reply: objective, phase, rounds and whether it runs here."""
    if goal is None:
        return "No goal. Set one with /goal <objective>."
    state: str = goal.phase
    if goal.phase == "active" and goal.source != "task":
        state = "running" if armed else "active, not running (press Resume or Start)"
    if goal.blocked is not None:
        state += f" ({goal.blocked.code}: {goal.blocked.message})"
    every = f", every {goal.schedule_s}s" if goal.schedule_s else ""
    budget = f", budget {fmt_tokens(goal.token_budget)} tokens" if goal.token_budget else ""
    text = (
        f"Goal: {goal.objective}\nStatus: {state}; rounds {goal.rounds_started}/"
        f"{goal.max_goal_rounds}{every}{budget}"
    )
    if goal.checks:
        text += "\nChecks: " + ", ".join(f"`{c}`" for c in goal.checks)
    return text


async def run_goal_command(
    goals: GoalService, session_id: str, spec: GoalCommandSpec
) -> GoalCommandResult:
    """Apply a parsed ``/goal`` for an owner; refusals come back in the result, never raised."""
    goal = await goals.get(session_id)

    def done(result: GoalSnapshot | GoalRefusal, lead: str) -> GoalCommandResult:
        if isinstance(result, GoalRefusal):
            return GoalCommandResult(text=f"Refused: {result.message}", goal=goal, refused=result)
        text = f"{lead}\n{describe_goal(result, armed=goals.is_armed(session_id))}"
        return GoalCommandResult(text=text, goal=result)

    live = goal is not None and goal.phase != "complete" and goal.source != "task"
    match spec.action:
        case "usage":
            return GoalCommandResult(text=f"{spec.error}\n{USAGE}")
        case "show":
            text = describe_goal(goal, armed=goals.is_armed(session_id))
            return GoalCommandResult(text=text, goal=goal)
        case "set":
            assert spec.objective is not None
            if live and goal is not None:
                edited = await goals.edit(
                    session_id,
                    goal.ref,
                    objective=spec.objective,
                    token_budget=UNCHANGED if spec.token_budget is None else spec.token_budget,
                    checks=UNCHANGED if spec.checks is None else spec.checks,
                )
                return done(edited, "Goal updated.")
            created = await goals.create(
                session_id,
                spec.objective,
                arm=True,
                token_budget=spec.token_budget,
                checks=spec.checks or (),
            )
            return done(created, "Goal set.")
        case "every":
            if live and goal is not None:
                edited = await goals.edit(
                    session_id,
                    goal.ref,
                    objective=spec.objective,
                    schedule_s=spec.schedule_s,
                    checks=UNCHANGED if spec.checks is None else spec.checks,
                )
                return done(edited, "Schedule updated.")
            if spec.objective is None:
                return GoalCommandResult(text="No goal to schedule.", refused=refusal("no-goal"))
            created = await goals.create(
                session_id,
                spec.objective,
                schedule_s=spec.schedule_s,
                arm=True,
                token_budget=spec.token_budget,
                checks=spec.checks or (),
            )
            return done(created, "Goal set.")
        case "check_add" | "check_list" | "check_clear":
            if goal is None or not live:
                return GoalCommandResult(text="There is no goal.", refused=refusal("no-goal"))
            if spec.action == "check_list":
                listed = "\n".join(f"- `{c}`" for c in goal.checks) or "No checks."
                return GoalCommandResult(text=f"Checks of the goal:\n{listed}", goal=goal)
            if spec.action == "check_clear":
                return done(await goals.edit(session_id, goal.ref, checks=()), "Checks cleared.")
            added = tuple(c for c in spec.checks or () if c not in goal.checks)
            edited = await goals.edit(session_id, goal.ref, checks=goal.checks + added)
            return done(edited, "Check added.")
        case "pause" | "resume" | "clear" | "done" | "rounds" | "budget":
            if goal is None:
                return GoalCommandResult(text="There is no goal.", refused=refusal("no-goal"))
            ref = goal.ref
            if spec.action == "pause":
                return done(await goals.pause(session_id, ref), "Paused.")
            if spec.action == "resume":
                return done(await goals.resume(session_id, ref), "Resumed.")
            if spec.action == "done":
                return done(await goals.complete(session_id, ref), "Marked complete.")
            if spec.action == "budget":
                edited = await goals.edit(session_id, ref, token_budget=spec.token_budget)
                lead = "Budget set." + (
                    " Press Resume to go on." if goal.phase == "blocked" else ""
                )
                return done(edited, lead)
            if spec.action == "rounds":
                return done(await goals.edit(session_id, ref, max_rounds=spec.rounds), "Cap set.")
            cleared = await goals.clear(session_id, ref)
            if isinstance(cleared, GoalRefusal):
                return GoalCommandResult(text=f"Refused: {cleared.message}", refused=cleared)
            return GoalCommandResult(text="Goal cleared.")


__all__ = [
    "USAGE",
    "GoalCommandResult",
    "GoalCommandSpec",
    "describe_goal",
    "parse_goal_command",
    "parse_interval",
    "run_goal_command",
]
