"""Stuck, not slow: the one detector that stops an unattended run (docs/agent.md "Stuck").

An approved checklist run and a goal's rounds go on by themselves; what stops them is this
module. It reads the steps themselves, not a step count:

- ``repeat``: the same tool call with the same result ``repeats`` times in a row (4);
- ``error``: the same call failing with the same error ``errors`` times in a row (3);
- ``monologue``: ``monologue`` replies in a row with no tool call (3);
- ``alternation``: two different steps taking turns, A-B-A-B-A-B (6 steps);
- ``compaction``: ``compactions`` steps in a row whose own turn no longer fit the context
  (its older results elided) without any progress (10);

and, as a generous outer bound on real progress (engine.progress.rule: a task's status, a
file in the workspace, the goal's state changed): ``no-progress`` after ``progress_steps``
steps (60) or ``progress_s`` seconds (30 minutes) without any, and ``task-tokens`` once the task in
progress used ``task_tokens`` (off by default).

Calls are compared by tool name and canonical arguments (sorted JSON), results by a hash.
The history is the steps since the owner last spoke or pressed Resume (:meth:`StuckWatch.reset`).
The patterns are pure functions over that history (:func:`detect`); :class:`StuckWatch` is the
small stateful wrapper a session keeps.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from engine.text import clip

Pattern = Literal[
    "repeat", "error", "monologue", "alternation", "compaction", "no-progress", "task-tokens"
]

DEFAULT_REPEATS = 4
DEFAULT_ERRORS = 3
DEFAULT_MONOLOGUE = 3
ALTERNATION_STEPS = 6
DEFAULT_COMPACTIONS = 10
DEFAULT_PROGRESS_STEPS = 60
DEFAULT_PROGRESS_S = 30 * 60.0

# The longest history any pattern needs; older steps are dropped.
_KEEP = 64
# The argument shown after a tool's name when a call is named on the card.
_SHOWN_ARGS = ("path", "pattern", "command", "op", "query", "url")


@dataclass(frozen=True, slots=True)
class StuckLimits:
    """The detector's thresholds (the settings in docs/configuration.md)."""

    repeats: int = DEFAULT_REPEATS
    errors: int = DEFAULT_ERRORS
    monologue: int = DEFAULT_MONOLOGUE
    compactions: int = DEFAULT_COMPACTIONS
    progress_steps: int = DEFAULT_PROGRESS_STEPS
    progress_s: float = DEFAULT_PROGRESS_S
    # Tokens the task in progress may use (None: no per-task budget).
    task_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One tool call of a step as the detector compares it."""

    name: str
    args: str  # canonical JSON of the arguments
    result: str  # a hash of the result text
    is_error: bool
    shown: str  # how the card names the call: ``read_file README.md``


@dataclass(frozen=True, slots=True)
class Step:
    """One model step: its tool calls (none for a plain reply) and what the step changed."""

    calls: tuple[CallRecord, ...] = ()
    # The context could not hold the step's own turn (older results of it were elided).
    compacted: bool = False
    # Progress as engine.progress.rule decides it: a task's status, a file, the goal.
    progress: bool = False

    @property
    def key(self) -> tuple[tuple[str, str, str], ...]:
        """Calls and results: two steps with equal keys did the same and saw the same."""
        return tuple((c.name, c.args, c.result) for c in self.calls)

    @property
    def call_key(self) -> tuple[tuple[str, str], ...]:
        return tuple((c.name, c.args) for c in self.calls)

    @property
    def shown(self) -> str:
        return ", ".join(c.shown for c in self.calls) or "a reply"


@dataclass(frozen=True, slots=True)
class Verdict:
    """Why the run stops: the pattern, the evidence (what repeated), the card's words."""

    pattern: Pattern
    evidence: str
    text: str
    steps: int


def canonical_args(arguments: Mapping[str, Any]) -> str:
    """The arguments as sorted, compact JSON: equal calls give equal text."""
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def result_hash(content: str) -> str:
    """A short hash of a tool result (the detector never keeps the text itself)."""
    return hashlib.sha256(content.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def describe_call(name: str, arguments: Mapping[str, Any]) -> str:
    """``read_file README.md``: the tool and its main argument, one short line."""
    for key in _SHOWN_ARGS:
        value = arguments.get(key)
        if isinstance(value, str) and value:
            return clip(f"{name} {value}", 60, one_line=True)
    return name


def call_record(
    name: str, arguments: Mapping[str, Any], content: str, *, is_error: bool
) -> CallRecord:
    """A tool call and its result, as the detector compares them."""
    return CallRecord(
        name=name,
        args=canonical_args(arguments),
        result=result_hash(content),
        is_error=is_error,
        shown=describe_call(name, arguments),
    )


# --- the patterns: pure functions over the history, newest step last -----------------------


def _tail(history: Sequence[Step], count: int) -> Sequence[Step] | None:
    return history[-count:] if count > 0 and len(history) >= count else None


def repeated(history: Sequence[Step], count: int) -> Verdict | None:
    """The same call(s) with the same result(s), ``count`` steps in a row."""
    tail = _tail(history, count)
    if tail is None or not tail[-1].calls or any(c.is_error for c in tail[-1].calls):
        return None
    if any(step.key != tail[-1].key for step in tail):
        return None
    shown = tail[-1].shown
    return Verdict("repeat", shown, f"`{shown}` {count} times with the same result", count)


def failing(history: Sequence[Step], count: int) -> Verdict | None:
    """The same call(s) failing with the same error, ``count`` steps in a row."""
    tail = _tail(history, count)
    if tail is None or not tail[-1].calls or not any(c.is_error for c in tail[-1].calls):
        return None
    if any(step.key != tail[-1].key for step in tail):
        return None
    shown = tail[-1].shown
    return Verdict("error", shown, f"`{shown}` failed {count} times with the same error", count)


def monologue(history: Sequence[Step], count: int) -> Verdict | None:
    """``count`` replies in a row with no tool call and no progress."""
    tail = _tail(history, count)
    if tail is None or any(step.calls or step.progress for step in tail):
        return None
    return Verdict(
        "monologue", "no tool call", f"{count} replies in a row without a tool call", count
    )


def alternating(history: Sequence[Step], steps: int = ALTERNATION_STEPS) -> Verdict | None:
    """Two different steps taking turns (A-B-A-B...) over ``steps`` steps."""
    tail = _tail(history, steps)
    if tail is None or not tail[-1].calls or not tail[-2].calls:
        return None
    first, second = tail[-2].key, tail[-1].key
    if first == second:
        return None
    if any(step.key != (first if i % 2 == 0 else second) for i, step in enumerate(tail)):
        return None
    a, b = tail[-2].shown, tail[-1].shown
    return Verdict("alternation", f"{a} | {b}", f"`{a}` and `{b}` in turn for {steps} steps", steps)


def compacting(history: Sequence[Step], count: int) -> Verdict | None:
    """``count`` steps in a row over the context budget without any progress."""
    tail = _tail(history, count)
    if tail is None or any(not step.compacted or step.progress for step in tail):
        return None
    return Verdict(
        "compaction",
        "context over budget",
        f"the context overflowed {count} steps in a row with no progress",
        count,
    )


def detect(history: Sequence[Step], limits: StuckLimits) -> Verdict | None:
    """The first loop the newest steps show, or ``None``."""
    return (
        failing(history, limits.errors)
        or repeated(history, limits.repeats)
        or alternating(history)
        or monologue(history, limits.monologue)
        or compacting(history, limits.compactions)
    )


# --- the stateful wrapper ------------------------------------------------------------------


@dataclass(slots=True)
class StuckWatch:
    """One session's watch: the history since the owner's last word, the progress clock."""

    limits: StuckLimits = field(default_factory=StuckLimits)
    history: list[Step] = field(default_factory=list)
    steps_without_progress: int = 0
    last_progress_at: float | None = None
    # The task in progress and the tokens used since it started.
    task_id: str | None = None
    task_tokens: int = 0

    def reset(self, *, now: float) -> None:
        """The owner spoke or pressed Resume: every count starts afresh."""
        self.history.clear()
        self.steps_without_progress = 0
        self.last_progress_at = now
        self.task_tokens = 0

    def observe(
        self, step: Step, *, now: float, task_id: str | None = None, tokens: int = 0
    ) -> Verdict | None:
        """Account for the step that just ended; a verdict means stop now."""
        if self.last_progress_at is None:
            self.last_progress_at = now
        self.history.append(step)
        del self.history[:-_KEEP]
        if task_id != self.task_id:
            self.task_id, self.task_tokens = task_id, 0
        self.task_tokens += tokens
        if step.progress:
            self.steps_without_progress = 0
            self.last_progress_at = now
        else:
            self.steps_without_progress += 1
        found = detect(self.history, self.limits)
        if found is not None:
            return found
        limits = self.limits
        if self.steps_without_progress >= limits.progress_steps:
            n = self.steps_without_progress
            return Verdict(
                "no-progress", f"{n} steps", f"no task or workspace change in {n} steps", n
            )
        idle_s = now - self.last_progress_at
        if not step.progress and idle_s >= limits.progress_s:
            minutes = int(idle_s // 60)
            return Verdict(
                "no-progress",
                f"{minutes} min",
                f"no task or workspace change in {minutes} minutes",
                self.steps_without_progress,
            )
        budget = limits.task_tokens
        if budget is not None and task_id is not None and self.task_tokens >= budget:
            used = self.task_tokens
            return Verdict(
                "task-tokens",
                f"{used} tokens",
                f"the task used {used:,} tokens (its budget is {budget:,})",
                self.steps_without_progress,
            )
        return None


__all__ = [
    "ALTERNATION_STEPS",
    "CallRecord",
    "Pattern",
    "Step",
    "StuckLimits",
    "StuckWatch",
    "Verdict",
    "alternating",
    "call_record",
    "canonical_args",
    "compacting",
    "describe_call",
    "detect",
    "failing",
    "monologue",
    "repeated",
    "result_hash",
]
