"""UsageMeter: the usage ledger's async shell, the budget check before each model call.

The agent asks :meth:`UsageMeter.check` before every model call and hands each call's
``model/usage`` record to :meth:`UsageMeter.recorded` once it is in the log. Sums per session,
turn and goal are folded lazily from a session's log on first need; the day's sum (the daily
cap is for the whole bot) is read once at start-up from every session's records of the UTC day
(:class:`UsageHistory`), so all of it survives a restart. A refused goal round blocks its goal
``budget-limit`` here, with the one line that says which limit and how to raise it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from engine.events import (
    CommandRun,
    GoalRoundSource,
    MessageSource,
    ModelUsageRecord,
    StoredEvent,
)
from engine.goal.service import GoalService
from engine.goal.types import BUDGET_LIMIT
from engine.model.types import ModelReply
from engine.ports import Clock, EventLog
from engine.usage.ledger import (
    BudgetRefusal,
    SessionUsage,
    Totals,
    chars_to_tokens,
    check_call,
    day_key,
    day_start,
    estimate_completion,
    estimate_prompt,
    fmt_tokens,
    reset_text,
    summary_line,
)

log = logging.getLogger("plangate.usage.meter")

USAGE_TYPES = frozenset({ModelUsageRecord.model_fields["type"].default})
# The owner's ``/usage cap`` is logged as this command; the last one (any session) stands.
CAP_COMMAND = "usage_cap"

FooterMode = Literal["off", "private", "on"]


@runtime_checkable
class UsageHistory(Protocol):
    """A log that can be asked across every session (start-up only)."""

    async def read_types_since(
        self, types: Collection[str], *, since_at: float
    ) -> list[StoredEvent]: ...

    async def last_command(self, name: str) -> StoredEvent | None:
        """The newest ``command/run`` named ``name`` in any session (greatest ``at``, the
        later append on a tie), or ``None``; no other event is decoded."""
        ...


@dataclass(frozen=True, slots=True)
class UsageConfig:
    """Prices per million tokens (both or none), the daily cap and the reply footer."""

    daily_tokens: int | None = None
    price_input: float | None = None
    price_output: float | None = None
    # "private": the footer on closing replies in private chats only; "on": everywhere.
    footer: FooterMode = "private"


class UsageMeter:
    """Usage sums for every session of this process and the checks against the limits."""

    def __init__(
        self,
        log: EventLog,
        *,
        goals: GoalService | None = None,
        config: UsageConfig = UsageConfig(),
        clock: Clock = time.time,
    ) -> None:
        self._log = log
        self._goals = goals
        self.config = config
        self._clock = clock
        self._sessions: dict[str, SessionUsage] = {}
        self._days: dict[str, Totals] = {}
        self._cap_override: int | None = None
        # Whether a session's chat is private (the composition root knows chats; we do not).
        self.is_private: Callable[[str], bool] = lambda _session_id: False

    # --- start-up -------------------------------------------------------------------------

    async def load(self) -> None:
        """Read today's records of every session and the owner's last cap (start-up)."""
        if not isinstance(self._log, UsageHistory):
            return
        today = day_start(self._clock())
        for stored in await self._log.read_types_since(USAGE_TYPES, since_at=today):
            if isinstance(stored.event, ModelUsageRecord):
                self._day(stored.at).add(stored.event)
        # One indexed lookup: a year of commands is not decoded to find the last cap.
        last = await self._log.last_command(CAP_COMMAND)
        if last is not None and isinstance(last.event, CommandRun):
            cap = last.event.data.get("cap")
            if isinstance(cap, int) and not isinstance(cap, bool) and cap >= 1:
                self._cap_override = cap

    # --- reading --------------------------------------------------------------------------

    @property
    def daily_cap(self) -> int | None:
        """The cap in force: the owner's last ``/usage cap``, else ``PLANGATE_DAILY_TOKENS``."""
        return self._cap_override if self._cap_override is not None else self.config.daily_tokens

    def set_daily_cap(self, cap: int) -> None:
        """Apply an owner's ``/usage cap`` (the caller logs it as ``command/run usage_cap``)."""
        self._cap_override = cap

    def today(self) -> Totals:
        return self._days.get(day_key(self._clock()), Totals())

    async def session(self, session_id: str) -> SessionUsage:
        """The session's sums: folded from its log on first use, then kept up to date by
        :meth:`recorded` (every call of this process goes through it; no read per call)."""
        usage = self._sessions.get(session_id)
        if usage is None:
            usage = SessionUsage()
            for stored in await self._log.read(session_id, types=USAGE_TYPES):
                usage.apply(stored)
            # Another first use may have finished while this one read: keep the first.
            usage = self._sessions.setdefault(session_id, usage)
        return usage

    async def goal_tokens(self, session_id: str, goal_id: str) -> int:
        return (await self.session(session_id)).goal_tokens(goal_id)

    # --- the check and the record ---------------------------------------------------------

    async def check(
        self, session_id: str, source: MessageSource, *, chars: int | None, extra_chars: int = 0
    ) -> tuple[BudgetRefusal | None, int]:
        """Whether a call of ``chars`` request characters may start, and its prompt estimate.

        ``chars=None``: the request is the session's last one plus ``extra_chars`` (a goal
        round's check before its message is logged). A refused goal round blocks its goal
        ``budget-limit`` (the daily cap and the goal budget both: either way no round can run
        until the owner raises the limit, or the day turns, and resumes).
        """
        usage = await self.session(session_id)
        if chars is None:
            chars = (usage.last.request_chars if usage.last is not None else 0) + extra_chars
        estimate = estimate_prompt(chars, usage.last)
        goal_used = goal_budget = None
        goal = None
        if isinstance(source, GoalRoundSource) and self._goals is not None:
            goal = await self._goals.get(session_id)
            if goal is not None and goal.id == source.goal_id:
                goal_budget = goal.token_budget
                goal_used = usage.goal_tokens(goal.id)
        now = self._clock()
        refusal = check_call(
            estimate=estimate,
            day_used=self.today().tokens,
            daily_cap=self.daily_cap,
            goal_used=goal_used,
            goal_budget=goal_budget,
            now=now,
        )
        if refusal is not None:
            log.info(
                "plangate.usage.meter.refused session=%s kind=%s used=%d estimate=%d limit=%d",
                session_id,
                refusal.kind,
                refusal.used,
                refusal.estimate,
                refusal.limit,
            )
            if goal is not None and goal.phase == "active" and self._goals is not None:
                await self._goals.block(
                    session_id, goal.ref, code=BUDGET_LIMIT, message=refusal.message
                )
        return refusal, estimate

    def record_for(
        self,
        *,
        turn_id: str,
        source: MessageSource,
        reply: ModelReply,
        chars: int,
        estimate: int,
    ) -> ModelUsageRecord:
        """The ``model/usage`` record of one call: the server's figures, or an estimate."""
        goal_id = source.goal_id if isinstance(source, GoalRoundSource) else None
        usage = reply.usage
        if usage is None:
            completion = estimate_completion(
                reply.text,
                ((c.name, c.arguments or {"raw": c.raw_arguments}) for c in reply.tool_calls),
            )
            return ModelUsageRecord(
                turn_id=turn_id,
                prompt_tokens=estimate if estimate else chars_to_tokens(chars),
                completion_tokens=completion,
                estimated=True,
                goal_id=goal_id,
                request_chars=chars,
                prompt_estimate=estimate,
            )
        return ModelUsageRecord(
            turn_id=turn_id,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            cached_tokens=min(usage.cached_tokens, usage.prompt_tokens),
            goal_id=goal_id,
            request_chars=chars,
            prompt_estimate=estimate,
        )

    async def recorded(self, stored: list[StoredEvent]) -> None:
        """Fold the just-appended events into the session's and the day's sums."""
        for item in stored:
            if not isinstance(item.event, ModelUsageRecord):
                continue
            # apply() skips what a first load just read from the log (by seq).
            (await self.session(item.session_id)).apply(item)
            self._day(item.at).add(item.event)

    # --- what people see ------------------------------------------------------------------

    def footer(self, session_id: str, usage: SessionUsage, turn_id: str) -> str | None:
        """The one-line footer of a turn's closing reply, when the setting wants one here."""
        mode = self.config.footer
        if mode == "off" or (mode == "private" and not self.is_private(session_id)):
            return None
        totals = usage.turns.get(turn_id)
        if totals is None:
            return None
        return "— " + summary_line(totals, self.config.price_input, self.config.price_output)

    async def report(self, session_id: str) -> str:
        """``/usage``: today, this session (with its biggest turns) and the live goal."""
        prices = (self.config.price_input, self.config.price_output)
        usage = await self.session(session_id)
        today = self.today()
        cap = self.daily_cap
        lines = [f"Today (UTC): {summary_line(today, *prices)}"]
        if cap is not None:
            lines.append(
                f"Daily cap: {fmt_tokens(today.tokens)} of {fmt_tokens(cap)}; resets at "
                f"{reset_text(self._clock())}"
            )
        lines.append(f"This session: {summary_line(usage.total, *prices)}")
        biggest = [item for item in usage.biggest_turns() if item[1].tokens]
        if biggest:
            lines.append("Biggest turns:")
            lines.extend(
                f"  {turn_id[:8]}: {fmt_tokens(t.tokens)} tokens in {t.calls} calls"
                for turn_id, t in biggest
            )
        goal = await self._goals.get(session_id) if self._goals is not None else None
        if goal is not None and goal.source != "task":
            spent = usage.goals.get(goal.id, Totals())
            budget = f" of {fmt_tokens(goal.token_budget)} budget" if goal.token_budget else ""
            lines.append(
                f"Goal ({goal.phase}): {fmt_tokens(spent.tokens)} tokens{budget}, "
                f"{spent.calls} calls, rounds {goal.rounds_started}/{goal.max_goal_rounds}"
            )
        if prices[0] is None or prices[1] is None:
            lines.append("(No prices set: tokens only. Set PLANGATE_PRICE_INPUT and _OUTPUT.)")
        return "\n".join(lines)

    def _day(self, at: float) -> Totals:
        key = day_key(at)
        found = self._days.get(key)
        if found is None:
            found = self._days[key] = Totals()
        return found


__all__ = ["CAP_COMMAND", "FooterMode", "UsageConfig", "UsageHistory", "UsageMeter"]
