"""Usage accounting, the pure part: sums, estimates, the budget rule and a few formatters.

Everything here is a function of ``model/usage`` records (and the clock value passed in); the
async :class:`engine.usage.meter.UsageMeter` feeds it from the log and applies its answers.

The budget rule, used for the goal budget and the daily cap alike: a model call reserves its
estimated prompt tokens plus the ``max_tokens`` it sends before it goes out, and is made only if
``used + reserved + estimated prompt + MIN_COMPLETION_TOKENS <= limit`` (``reserved``: what the
calls still under way hold). Its ``max_tokens`` is the configured output limit, lowered to what
is left of each limit after its prompt. When it returns, its reservation is replaced by the
usage it reported. So however many chats call at once, a limit is passed only by what the prompt
estimates missed, never by a completion. The estimate is the session's last reported prompt
tokens plus a quarter of the characters the request grew by since that call (the conversation
only grows within a session), or a quarter of the whole request's characters when the session
has no earlier call.

A server's figures are checked before they count (:func:`plausible`): a count past
``MAX_PLAUSIBLE_TOKENS`` or a zero for a call that sent or returned something is a server's
error, and the call is counted by its estimate instead. So is a count below a tenth of
plangate's own estimate of the same thing (:func:`underreported`): no tokenizer packs ten
times what the quarter rule expects, so a server that says 1 token for a 10k-character request
is not believed, and budgets hold whatever it says.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from engine.events import ModelUsageRecord, StoredEvent
from engine.text import fmt_tokens, parse_tokens

# A rough tokenizer-free rule: English text and JSON run near four characters per token.
CHARS_PER_TOKEN = 4
DAY = 86_400.0

# The least completion room a call is made with: below it a reply could not say anything useful.
MIN_COMPLETION_TOKENS = 256
# No model reads or writes this many tokens in one call: a larger figure is a server's error.
MAX_PLAUSIBLE_TOKENS = 10_000_000


@dataclass(slots=True)
class Totals:
    """Sums over some model calls."""

    prompt: int = 0
    completion: int = 0
    cached: int = 0
    calls: int = 0
    estimated_calls: int = 0

    @property
    def tokens(self) -> int:
        return self.prompt + self.completion

    def add(self, record: ModelUsageRecord) -> None:
        # A record logged before figures were checked may hold a server's absurd count: its
        # prompt estimate (logged beside it) stands in, so one bad call cannot wreck a day.
        prompt, completion = record.prompt_tokens, record.completion_tokens
        if prompt > MAX_PLAUSIBLE_TOKENS or completion > MAX_PLAUSIBLE_TOKENS:
            prompt, completion = record.prompt_estimate, min(completion, MIN_COMPLETION_TOKENS)
        self.prompt += prompt
        self.completion += completion
        self.cached += min(record.cached_tokens, prompt)
        self.calls += 1
        self.estimated_calls += 1 if record.estimated else 0


@dataclass(slots=True)
class SessionUsage:
    """One session's sums (whole session, per turn, per goal) and its last call."""

    total: Totals = field(default_factory=Totals)
    turns: dict[str, Totals] = field(default_factory=dict)
    goals: dict[str, Totals] = field(default_factory=dict)
    last: ModelUsageRecord | None = None
    last_seq: int = 0

    def apply(self, stored: StoredEvent) -> None:
        """Fold one stored event; events at or before ``last_seq`` are skipped (idempotent)."""
        if stored.seq <= self.last_seq:
            return
        self.last_seq = stored.seq
        record = stored.event
        if not isinstance(record, ModelUsageRecord):
            return
        self.total.add(record)
        self.turns.setdefault(record.turn_id, Totals()).add(record)
        if record.goal_id is not None:
            self.goals.setdefault(record.goal_id, Totals()).add(record)
        self.last = record

    def goal_tokens(self, goal_id: str) -> int:
        found = self.goals.get(goal_id)
        return found.tokens if found is not None else 0

    def biggest_turns(self, count: int = 3) -> list[tuple[str, Totals]]:
        """The ``count`` turns that used the most tokens, biggest first."""
        ranked = sorted(self.turns.items(), key=lambda item: item[1].tokens, reverse=True)
        return ranked[:count]


# --- estimates ------------------------------------------------------------------------------


# What a message's JSON adds around its text (role, keys, quotes), as the estimate counts it.
MESSAGE_OVERHEAD_CHARS = 16


def request_chars(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> int:
    """The size of a request as the estimate counts it: the text of every message (content,
    tool-call names and arguments) plus a fixed overhead per message, and the tool specs as
    JSON. Cheaper than serialising the whole request, and as good for a quarter-rule."""
    total = len(json.dumps(list(tools), ensure_ascii=False)) if tools else 0
    for message in messages:
        total += MESSAGE_OVERHEAD_CHARS
        content = message.get("content")
        if isinstance(content, str):
            total += len(content)
        elif isinstance(content, list):
            total += sum(_part_chars(part) for part in content)
        elif content is not None:
            total += len(json.dumps(content, ensure_ascii=False))
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            total += len(str(function.get("name", ""))) + len(str(function.get("arguments", "")))
    return total


# What an image part counts, as the context budget counts it (engine.agent.context): its
# data URL is hundreds of kilobytes a model reads as about a thousand tokens.
IMAGE_PART_CHARS = 3_000


def _part_chars(part: object) -> int:
    if isinstance(part, dict):
        if part.get("type") == "image_url":
            return IMAGE_PART_CHARS
        text = part.get("text")
        if isinstance(text, str):
            return len(text)
    return len(json.dumps(part, ensure_ascii=False))


def chars_to_tokens(chars: int) -> int:
    return math.ceil(max(0, chars) / CHARS_PER_TOKEN)


def estimate_prompt(chars: int, last: ModelUsageRecord | None) -> int:
    """Estimated prompt tokens of a request of ``chars`` characters (see the module rule)."""
    if last is None or last.request_chars <= 0 or chars < last.request_chars:
        return chars_to_tokens(chars)
    return last.prompt_tokens + chars_to_tokens(chars - last.request_chars)


def plausible(*, prompt: int, completion: int, request_chars: int, replied: bool) -> bool:
    """Whether a server's usage figures for one call can be true: neither past
    ``MAX_PLAUSIBLE_TOKENS``, no zero prompt for a request that had characters, no zero
    completion for a reply with text or tool calls."""
    if not 0 <= prompt <= MAX_PLAUSIBLE_TOKENS or not 0 <= completion <= MAX_PLAUSIBLE_TOKENS:
        return False
    if prompt == 0 and request_chars > 0:
        return False
    return not (completion == 0 and replied)


# A server's count below 1/UNDERREPORT_RATIO of plangate's own estimate is not believed.
UNDERREPORT_RATIO = 10


def underreported(reported: int, estimate: int) -> bool:
    """Whether a server's count is below a tenth of plangate's own estimate of it."""
    return reported * UNDERREPORT_RATIO < estimate


def estimate_completion(text: str, tool_calls: Iterable[tuple[str, dict[str, Any]]]) -> int:
    """Estimated completion tokens of a reply the server gave no usage for."""
    chars = len(text) + sum(
        len(name) + len(json.dumps(args, ensure_ascii=False)) for name, args in tool_calls
    )
    return chars_to_tokens(chars)


# --- the budget rule ------------------------------------------------------------------------

RefusalKind = Literal["daily-cap", "goal-budget"]


@dataclass(frozen=True, slots=True)
class BudgetRefusal:
    """A model call not made: which limit, the figures, the one line that says so and the
    ``message`` a goal blocked by it carries."""

    kind: RefusalKind
    limit: int
    used: int
    estimate: int
    line: str
    message: str


def would_cross(used: int, estimate: int, limit: int | None) -> bool:
    """The budget rule: ``True`` when a call that needs ``estimate`` tokens must not start
    (``used + estimate > limit``); never with no limit."""
    return limit is not None and used + estimate > limit


def completion_room(
    *,
    prompt: int,
    max_output: int,
    day_used: int,
    daily_cap: int | None,
    goal_used: int | None = None,
    goal_budget: int | None = None,
) -> int:
    """The ``max_tokens`` a call with ``prompt`` estimated prompt tokens may send: the output
    limit, lowered to what each limit leaves after the prompt (never below 1)."""
    room = max_output
    if daily_cap is not None:
        room = min(room, daily_cap - day_used - prompt)
    if goal_budget is not None and goal_used is not None:
        room = min(room, goal_budget - goal_used - prompt)
    return max(1, room)


def check_call(
    *,
    estimate: int,
    day_used: int,
    daily_cap: int | None,
    goal_used: int | None = None,
    goal_budget: int | None = None,
    day_reserved: int = 0,
    goal_reserved: int = 0,
    now: float,
) -> BudgetRefusal | None:
    """``None`` when the call may start; else the refusal (the daily cap is checked first).

    ``estimate`` is what the call needs at least (its prompt estimate and the least completion
    room); ``*_reserved`` is what calls under way hold against each limit."""
    if would_cross(day_used + day_reserved, estimate, daily_cap):
        assert daily_cap is not None
        held = f" ({fmt_tokens(day_reserved)} more held by calls under way)" if day_reserved else ""
        line = (
            f"Daily token cap reached: {fmt_tokens(day_used)} of {fmt_tokens(daily_cap)} used "
            f"today{held}, the next call needs about {fmt_tokens(estimate)}. It resets at "
            f"{reset_text(now)}; the owner can raise it with /usage cap <tokens>."
        )
        message = (
            f"the daily token cap ({fmt_tokens(daily_cap)}) is reached; it resets at "
            f"{reset_text(now)}. Raise it with /usage cap <tokens> or wait, then Resume"
        )
        return BudgetRefusal("daily-cap", daily_cap, day_used, estimate, line, message)
    if goal_used is not None and would_cross(goal_used + goal_reserved, estimate, goal_budget):
        assert goal_budget is not None
        held = f" ({fmt_tokens(goal_reserved)} more held)" if goal_reserved else ""
        message = (
            f"token budget used: {fmt_tokens(goal_used)}{held} of {fmt_tokens(goal_budget)}, "
            f"the next call needs about {fmt_tokens(estimate)}; raise it with "
            "/goal budget <tokens>, then Resume"
        )
        line = f"Goal blocked (budget-limit): {message}."
        return BudgetRefusal("goal-budget", goal_budget, goal_used, estimate, line, message)
    return None


# --- days, money, amounts -------------------------------------------------------------------


def raised_cap(cap: int, used: int) -> int:
    """The cap one "Raise cap" press sets: twice what the day has used or allowed."""
    return 2 * max(cap, used, 1)


def day_start(at: float) -> float:
    """The start of the UTC day ``at`` falls in (the usage day is the UTC calendar day)."""
    return math.floor(at / DAY) * DAY


def day_key(at: float) -> str:
    return dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%d")


def reset_text(now: float) -> str:
    """When the daily cap resets: ``00:00 UTC (in 3h 12m)``."""
    left = int(day_start(now) + DAY - now)
    hours, minutes = divmod(max(60, left) // 60, 60)
    return f"00:00 UTC (in {hours}h {minutes:02d}m)"


def cost(totals: Totals, price_input: float | None, price_output: float | None) -> float | None:
    """Money for ``totals`` at prices per million tokens; ``None`` without both prices (or for
    sums too large for a float, which no honest bill reaches)."""
    if price_input is None or price_output is None:
        return None
    try:
        value = (totals.prompt * price_input + totals.completion * price_output) / 1_000_000
    except OverflowError:
        return None
    return value if math.isfinite(value) else None


def fmt_cost(value: float | None) -> str:
    return "" if value is None else f"${value:,.4f}"


def summary_line(totals: Totals, price_input: float | None, price_output: float | None) -> str:
    """``12,345 tokens (9,000 in, 3,345 out, 1,000 cached) in 3 calls, $0.0123``."""
    text = (
        f"{fmt_tokens(totals.tokens)} tokens ({fmt_tokens(totals.prompt)} in, "
        f"{fmt_tokens(totals.completion)} out"
        + (f", {fmt_tokens(totals.cached)} cached" if totals.cached else "")
        + f") in {totals.calls} call{'s' if totals.calls != 1 else ''}"
    )
    if totals.estimated_calls:
        text += f", {totals.estimated_calls} estimated"
    money = fmt_cost(cost(totals, price_input, price_output))
    return text + (f", {money}" if money else "")


__all__ = [
    "CHARS_PER_TOKEN",
    "MAX_PLAUSIBLE_TOKENS",
    "MIN_COMPLETION_TOKENS",
    "BudgetRefusal",
    "SessionUsage",
    "Totals",
    "chars_to_tokens",
    "check_call",
    "completion_room",
    "cost",
    "day_key",
    "day_start",
    "estimate_completion",
    "estimate_prompt",
    "fmt_tokens",
    "parse_tokens",
    "plausible",
    "request_chars",
    "reset_text",
    "summary_line",
    "underreported",
    "would_cross",
]
