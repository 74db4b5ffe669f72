"""UsageMeter: the usage ledger's async shell, the budget check before each model call.

The agent asks :meth:`UsageMeter.reserve` before every model call: the call's prompt estimate
plus the ``max_tokens`` it will send are held against the daily cap and its goal's budget while
it is under way (so six chats calling at once cannot all pass a cap that fits one), and
:meth:`UsageMeter.recorded` replaces the hold by the call's ``model/usage`` record once it is in
the log (:meth:`UsageMeter.release` drops a hold whose call failed). Sums per session,
turn and goal are folded lazily from a session's log on first need; the day's sum (the daily
cap is for the whole bot) is read once at start-up from every session's records of the UTC day
(:class:`UsageHistory`), so all of it survives a restart. A refused goal round blocks its goal
``budget-limit`` here, with the one line that says which limit and how to raise it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Literal, Protocol, TypeVar, runtime_checkable

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
    MIN_COMPLETION_TOKENS,
    BudgetRefusal,
    SessionUsage,
    Totals,
    chars_to_tokens,
    check_call,
    completion_room,
    day_key,
    day_start,
    estimate_completion,
    estimate_prompt,
    fmt_tokens,
    plausible,
    reset_text,
    summary_line,
    underreported,
)

log = logging.getLogger("plangate.usage.meter")

USAGE_TYPES = frozenset({ModelUsageRecord.model_fields["type"].default})
# The owner's ``/usage cap`` is logged as this command; the last one (any session) stands.
CAP_COMMAND = "usage_cap"

FooterMode = Literal["off", "private", "on"]
_K = TypeVar("_K")


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
    # The ``max_tokens`` of a call when no limit is near (PLANGATE_MAX_OUTPUT_TOKENS).
    max_output_tokens: int = 4096


@dataclass(slots=True, eq=False)
class Reservation:
    """What one model call under way holds against the limits: its prompt estimate and the
    ``max_tokens`` it sends. Released once (settled by its record, or dropped)."""

    session_id: str
    goal_id: str | None
    day: str
    chars: int
    prompt_estimate: int
    max_tokens: int
    released: bool = field(default=False)

    @property
    def tokens(self) -> int:
        return self.prompt_estimate + self.max_tokens


class UsageMeter:
    """Usage sums for every session of this process and the checks against the limits."""

    def __init__(
        self,
        log: EventLog,
        *,
        goals: GoalService | None = None,
        config: UsageConfig = UsageConfig(),
        clock: Clock = time.time,
        is_private: Callable[[str], bool] = lambda _session_id: False,
    ) -> None:
        """``is_private(session_id)``: whether the session's chat is private (the footer's
        ``private`` mode; ``engine.bindings.ChatBindings.is_private``)."""
        self._log = log
        self._goals = goals
        self.config = config
        self._clock = clock
        self._sessions: dict[str, SessionUsage] = {}
        self._days: dict[str, Totals] = {}
        self._cap_override: int | None = None
        # What the calls under way hold: per UTC day, and per (session, goal).
        self._held_day: dict[str, int] = {}
        self._held_goal: dict[tuple[str, str], int] = {}
        self._is_private = is_private
        # Servers whose figures were found too small, each logged once.
        self._doubted: set[str] = set()

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

    async def reserve(
        self,
        session_id: str,
        source: MessageSource,
        *,
        chars: int | None,
        extra_chars: int = 0,
        replacing: Reservation | None = None,
    ) -> Reservation | BudgetRefusal:
        """Hold what a call of ``chars`` request characters may use, or refuse it.

        ``chars=None``: the request is the session's last one plus ``extra_chars`` (a goal
        round's check before its message is logged). ``replacing``: the hold taken when this
        call's goal round was admitted; it is swapped for this one and the call is never
        refused (an admitted round makes its call, with what room is left). A refused goal
        round blocks its goal ``budget-limit`` (the daily cap and the goal budget both: either
        way no round can run until the owner raises the limit, or the day turns, and resumes).
        """
        usage = await self.session(session_id)
        goal = None
        goal_id: str | None = None
        if isinstance(source, GoalRoundSource) and self._goals is not None:
            goal = await self._goals.get(session_id)
            if goal is not None and goal.id == source.goal_id:
                goal_id = goal.id
        # From here to the hold nothing awaits: no other call can take the same room.
        if replacing is not None:
            self.release(replacing)
        if chars is None:
            chars = (usage.last.request_chars if usage.last is not None else 0) + extra_chars
        estimate = estimate_prompt(chars, usage.last)
        goal_used = goal_budget = None
        goal_held = 0
        if goal is not None and goal_id is not None:
            goal_budget = goal.token_budget
            goal_used = usage.goal_tokens(goal_id)
            goal_held = self._held_goal.get((session_id, goal_id), 0)
        now = self._clock()
        day = day_key(now)
        day_used, day_held = self.today().tokens, self._held_day.get(day, 0)
        max_output = max(1, self.config.max_output_tokens)
        if replacing is None:
            refusal = check_call(
                estimate=estimate + min(MIN_COMPLETION_TOKENS, max_output),
                day_used=day_used,
                daily_cap=self.daily_cap,
                goal_used=goal_used,
                goal_budget=goal_budget,
                day_reserved=day_held,
                goal_reserved=goal_held,
                now=now,
            )
            if refusal is not None:
                log.info(
                    "plangate.usage.meter.refused session=%s kind=%s used=%d held=%d "
                    "estimate=%d limit=%d",
                    session_id,
                    refusal.kind,
                    refusal.used,
                    day_held if refusal.kind == "daily-cap" else goal_held,
                    refusal.estimate,
                    refusal.limit,
                )
                if goal is not None and goal.phase == "active" and self._goals is not None:
                    await self._goals.block(
                        session_id, goal.ref, code=BUDGET_LIMIT, message=refusal.message
                    )
                return refusal
        max_tokens = completion_room(
            prompt=estimate,
            max_output=max_output,
            day_used=day_used + day_held,
            daily_cap=self.daily_cap,
            goal_used=None if goal_used is None else goal_used + goal_held,
            goal_budget=goal_budget,
        )
        held = Reservation(session_id, goal_id, day, chars, estimate, max_tokens)
        self._held_day[day] = day_held + held.tokens
        if goal_id is not None:
            self._held_goal[(session_id, goal_id)] = goal_held + held.tokens
        return held

    def release(self, held: Reservation) -> None:
        """Drop a hold (idempotent): its call settled, failed or was never made."""
        if held.released:
            return
        held.released = True
        _take(self._held_day, held.day, held.tokens)
        if held.goal_id is not None:
            _take(self._held_goal, (held.session_id, held.goal_id), held.tokens)

    def held_today(self) -> int:
        """Tokens the calls under way hold against today's cap."""
        return self._held_day.get(day_key(self._clock()), 0)

    def cap_reached(self) -> bool:
        """Whether the daily cap leaves no room for another call (the signal a checklist run
        reads to pause for the cap rather than call it stalled)."""
        cap = self.daily_cap
        return cap is not None and self.today().tokens + self.held_today() >= cap

    def record_for(
        self,
        *,
        turn_id: str,
        source: MessageSource,
        reply: ModelReply,
        chars: int,
        estimate: int,
        server: str = "",
    ) -> ModelUsageRecord:
        """The ``model/usage`` record of one call: the server's figures when they can be true,
        else an estimate (marked so, and logged: a server's absurd count never counts).

        A figure below a tenth of plangate's own estimate (the prompt's: the larger of the
        budget check's ``estimate`` and the quarter rule on ``chars``; the reply's: the quarter
        rule on its text and calls) is replaced by that estimate, and the record is marked
        estimated; the first time for a ``server`` it is logged."""
        goal_id = source.goal_id if isinstance(source, GoalRoundSource) else None
        usage = reply.usage
        replied = bool(reply.text) or bool(reply.tool_calls)
        if usage is not None and not plausible(
            prompt=usage.prompt_tokens,
            completion=usage.completion_tokens,
            request_chars=chars,
            replied=replied,
        ):
            log.warning(
                "plangate.usage.meter.implausible turn=%s prompt=%s completion=%s chars=%d "
                "(counted by the estimate)",
                turn_id,
                _shown_count(usage.prompt_tokens),
                _shown_count(usage.completion_tokens),
                chars,
            )
            usage = None
        completion = max(
            estimate_completion(
                reply.text,
                ((c.name, c.arguments or {"raw": c.raw_arguments}) for c in reply.tool_calls),
            ),
            # What arrived, refused arguments included (only a prefix of them is kept).
            chars_to_tokens(reply.arrived_chars),
        )
        if usage is None:
            return ModelUsageRecord(
                turn_id=turn_id,
                prompt_tokens=estimate if estimate else chars_to_tokens(chars),
                completion_tokens=completion,
                estimated=True,
                goal_id=goal_id,
                request_chars=chars,
                prompt_estimate=estimate,
            )
        own_prompt = max(estimate, chars_to_tokens(chars))
        low_prompt = underreported(usage.prompt_tokens, own_prompt)
        low_completion = underreported(usage.completion_tokens, completion)
        if low_prompt or low_completion:
            if server not in self._doubted:
                self._doubted.add(server)
                log.warning(
                    "plangate.usage.meter.underreported server=%s prompt=%d (estimate %d) "
                    "completion=%d (estimate %d): counted by the estimate where a figure is "
                    "below a tenth of it (logged once per server)",
                    server or "?",
                    usage.prompt_tokens,
                    own_prompt,
                    usage.completion_tokens,
                    completion,
                )
            prompt = own_prompt if low_prompt else usage.prompt_tokens
            return ModelUsageRecord(
                turn_id=turn_id,
                prompt_tokens=prompt,
                completion_tokens=completion if low_completion else usage.completion_tokens,
                cached_tokens=min(usage.cached_tokens, prompt),
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

    def cut_record(
        self,
        *,
        turn_id: str,
        source: MessageSource,
        chars: int,
        estimate: int,
        arrived_chars: int,
    ) -> ModelUsageRecord:
        """The ``model/usage`` record of a streamed call cut short (``/stop``, a broken
        stream): no server count comes, but the prompt was sent and ``arrived_chars`` of the
        reply arrived, and both were paid for. Estimated: the prompt as the budget check saw
        it, the reply by the quarter rule."""
        return ModelUsageRecord(
            turn_id=turn_id,
            prompt_tokens=max(estimate, chars_to_tokens(chars)),
            completion_tokens=chars_to_tokens(arrived_chars),
            estimated=True,
            goal_id=source.goal_id if isinstance(source, GoalRoundSource) else None,
            request_chars=chars,
            prompt_estimate=estimate,
        )

    async def recorded(self, stored: list[StoredEvent], held: Reservation | None = None) -> None:
        """Fold the just-appended events into the session's and the day's sums, and release
        ``held`` (the call's hold) in the same step, so its tokens are never counted twice
        nor, in between, not at all."""
        usages = [item for item in stored if isinstance(item.event, ModelUsageRecord)]
        sessions = [await self.session(item.session_id) for item in usages]
        for item, usage in zip(usages, sessions, strict=True):
            assert isinstance(item.event, ModelUsageRecord)
            # apply() skips what a first load just read from the log (by seq).
            usage.apply(item)
            self._day(item.at).add(item.event)
        if held is not None:
            self.release(held)

    # --- what people see ------------------------------------------------------------------

    def footer(self, session_id: str, usage: SessionUsage, turn_id: str) -> str | None:
        """The one-line footer of a turn's closing reply, when the setting wants one here."""
        mode = self.config.footer
        if mode == "off" or (mode == "private" and not self._is_private(session_id)):
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


def _take(held: dict[_K, int], key: _K, tokens: int) -> None:
    left = held.get(key, 0) - tokens
    if left > 0:
        held[key] = left
    else:
        held.pop(key, None)


def _shown_count(value: int) -> str:
    """A count for the log: a 400-digit figure is shown by its size, not its digits."""
    text = str(value)
    return text if len(text) <= 12 else f"{text[:3]}...({len(text)} digits)"


__all__ = [
    "CAP_COMMAND",
    "FooterMode",
    "Reservation",
    "UsageConfig",
    "UsageHistory",
    "UsageMeter",
]
