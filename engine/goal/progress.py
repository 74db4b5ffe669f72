"""A goal's idle rounds: did a round make progress? (pure over events)

Progress is work, one rule for the stuck detector and this count (engine.progress.rule): a
task's status changed, a file in the workspace changed, or the goal's state changed. The agent
decides it after each step of a round and logs ``progress/made``; a round made progress when
its events hold one (or a ``workspace/changed`` an earlier version wrote). A todo rewrite, a
``plan show``, reads, searches and commands that change no file are idle, however varied.
:func:`idle_streak` counts a goal's idle rounds in a row from a log; anything the owner does
to the goal between rounds (a ``goal/change`` outside a round: Resume, an edit, a budget
raise) or a message of the owner's starts the count again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from engine.events import (
    GoalChange,
    GoalRoundSource,
    ProgressMade,
    SessionEvent,
    TurnEnd,
    UserMessage,
    WorkspaceChanged,
)
from engine.goal.service import GoalService
from engine.goal.types import NO_PROGRESS
from engine.ports import EventLog

log = logging.getLogger("plangate.goal.progress")

# The event types the two functions below read (a filtered log read needs no more).
PROGRESS_EVENT_TYPES = frozenset(
    {"user/message", "goal/change", "turn/end", "progress/made", "workspace/changed"}
)


def turn_made_progress(events: Sequence[SessionEvent]) -> bool:
    """``True`` when the events of one turn say it made progress (see the module rules)."""
    return any(
        isinstance(event, ProgressMade | WorkspaceChanged) and _counts(event) for event in events
    )


def _counts(event: ProgressMade | WorkspaceChanged) -> bool:
    return isinstance(event, WorkspaceChanged) or bool(event.kinds)


class IdleCounter:
    """:func:`idle_streak` fed one event at a time (the driver keeps one per session)."""

    def __init__(self, goal_id: str) -> None:
        self.goal_id = goal_id
        self.streak = 0
        self._round: list[SessionEvent] | None = None

    def feed(self, event: SessionEvent) -> None:
        if isinstance(event, UserMessage):
            source = event.source
            if isinstance(source, GoalRoundSource) and source.goal_id == self.goal_id:
                self._round = []
            else:
                self._round = None
                self.streak = 0  # the owner spoke: the count starts again
        elif self._round is not None:
            if isinstance(event, TurnEnd):
                self.streak = 0 if turn_made_progress(self._round) else self.streak + 1
                self._round = None
            else:
                self._round.append(event)
        elif isinstance(event, GoalChange):
            self.streak = 0  # the owner (or a limit) changed the goal between rounds


def idle_streak(events: Iterable[SessionEvent], goal_id: str) -> int:
    """How many of the goal's last rounds in a row made no progress (0 after any that did).

    A round is its goal-source ``user/message`` up to its ``turn/end``.
    """
    counter = IdleCounter(goal_id)
    for event in events:
        counter.feed(event)
    return counter.streak


__all__ = [
    "PROGRESS_EVENT_TYPES",
    "IdleCounter",
    "IdleRoundWatch",
    "idle_streak",
    "turn_made_progress",
]


class IdleRoundWatch:
    """After each settled goal round: block the goal ``no-progress`` once ``limit`` rounds in a
    row were idle. The count is folded from the log, so it survives a restart."""

    def __init__(self, goals: GoalService, log: EventLog, *, limit: int) -> None:
        self._goals = goals
        self._log = log
        self.limit = limit
        self._counters: dict[str, tuple[int, IdleCounter]] = {}

    async def streak(self, session_id: str, goal_id: str) -> int:
        """The goal's idle rounds in a row, as the log says now."""
        last_seq, counter = self._counters.get(session_id, (0, IdleCounter(goal_id)))
        if counter.goal_id != goal_id:
            last_seq, counter = 0, IdleCounter(goal_id)
        for stored in await self._log.read(
            session_id, after_seq=last_seq, types=PROGRESS_EVENT_TYPES
        ):
            counter.feed(stored.event)
            last_seq = stored.seq
        self._counters[session_id] = (last_seq, counter)
        return counter.streak

    async def round_settled(self, session_id: str, source: GoalRoundSource) -> None:
        """Called by the round driver once a round of ``source`` ran to its end."""
        goal = await self._goals.round_goal(session_id, source)
        if goal is None:
            return
        if goal.rounds_left <= 0:
            return  # the cap stops it anyway: round-limit, whose fix comes first
        idle = await self.streak(session_id, goal.id)
        if idle < self.limit:
            return
        log.info("plangate.goal.progress.blocked session=%s idle_rounds=%d", session_id, idle)
        await self._goals.block(
            session_id,
            goal.ref,
            code=NO_PROGRESS,
            message=(
                f"{idle} rounds in a row changed nothing (no file, no task status, no goal "
                "change); give it a hint or change the objective, then Resume"
            ),
        )
