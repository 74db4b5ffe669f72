"""Closing what a dead process left open.

A pure function over a session's log: each ``tool/call`` without a ``tool/result`` gets a
synthetic interrupted result (so the history stays valid for the model), and a turn left open
gets ``turn/end {interrupted}``. :func:`load_session_events` reads a log and appends those
closures; it needs only the :class:`engine.ports.EventLog` protocol, so every store shares it.

:func:`attention_marks` says which of a log's events leave something for start-up to do (an
open turn, a live goal, an undecided ``/plan`` or approval). A store keeps the marks per session
as it appends, so start-up loads only the sessions that need it (docs/storage.md).
:func:`undecided_command` finds the ``/plan`` or approval such a session left undecided; the
session's first load (engine/sessions.py) decides it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from engine.events import (
    CommandRun,
    GoalChange,
    PlanChanged,
    PlanMode,
    SessionEvent,
    StoredEvent,
    ToolCall,
    ToolResult,
    TurnEnd,
    TurnStart,
)
from engine.ports import EventLog
from engine.projections import TAKE_BACK_COMMANDS

INTERRUPTED_TOOL_TEXT = "interrupted: the process stopped before this tool finished"


def interrupted_closures(events: Iterable[SessionEvent]) -> list[SessionEvent]:
    """The events that close an interrupted turn, or ``[]`` when nothing is open."""
    open_turn: str | None = None
    pending: dict[str, ToolCall] = {}
    for event in events:
        if isinstance(event, TurnStart):
            open_turn = event.turn_id
            pending.clear()
        elif isinstance(event, TurnEnd):
            open_turn = None
            pending.clear()
        elif isinstance(event, ToolCall):
            pending[event.call_id] = event
        elif isinstance(event, ToolResult):
            pending.pop(event.call_id, None)
    closures: list[SessionEvent] = [
        ToolResult(
            call_id=call.call_id,
            name=call.name,
            content=INTERRUPTED_TOOL_TEXT,
            is_error=True,
            interrupted=True,
        )
        for call in pending.values()
    ]
    if open_turn is not None:
        closures.append(TurnEnd(turn_id=open_turn, outcome="interrupted"))
    return closures


async def load_session_events(log: EventLog, session_id: str) -> list[StoredEvent]:
    """A session's whole log, closing a turn that a dead process left open.

    The caller must own the session (its controller, one per process): a turn that another
    live process is running would be closed as interrupted too.
    """
    await close_interrupted_turn(log, session_id)
    return await log.read(session_id)


_TURN_MARKS = ("turn/start", "turn/end")
_TURN_TOOLS = ("turn/start", "turn/end", "tool/call", "tool/result")


async def close_interrupted_turn(log: EventLog, session_id: str) -> list[StoredEvent]:
    """Append the closures of a turn a dead process left open; return them (``[]`` if none).

    Reads only the turn marks, then the last turn's tool events, so loading a long session
    stays cheap. The same ownership rule as :func:`load_session_events` applies.
    """
    marks = await log.read(session_id, types=_TURN_MARKS)
    if not marks or not isinstance(marks[-1].event, TurnStart):
        return []
    tail = await log.read(session_id, after_seq=marks[-1].seq - 1, types=_TURN_TOOLS)
    closures = interrupted_closures(stored.event for stored in tail)
    return await log.append(session_id, closures) if closures else []


# Commands that leave a decision pending until a plan change; the ones that take it back are
# engine.projections.TAKE_BACK_COMMANDS (the plan-mode fold clears a pending /plan on them).
PENDING_COMMANDS = frozenset({"plan", "approve"})


def pending_mark(event: SessionEvent) -> bool | None:
    """The one rule of "a decision left pending": ``True`` for a command that leaves one
    (:data:`PENDING_COMMANDS`), ``False`` for what decides it or takes it back (a plan change,
    ``plan/mode`` or ``plan/changed``, or a take-back command), ``None`` for any other event.
    Of a log's events, the last that it names says whether something is pending.

    :func:`undecided_command` and :func:`attention_marks` both read it; migration 3 in
    storage/migrations.py keeps a frozen SQL copy (it says why).
    """
    if isinstance(event, PlanChanged | PlanMode):
        return False
    if isinstance(event, CommandRun):
        if event.name in PENDING_COMMANDS:
            return True
        if event.name in TAKE_BACK_COMMANDS:
            return False
    return None


def undecided_command(events: Sequence[SessionEvent], name: str) -> CommandRun | None:
    """The last ``command/run`` called ``name`` (one of :data:`PENDING_COMMANDS`) if nothing
    decided or took it back since (:func:`pending_mark`): a dead process logged it and never
    committed it. Another pending command in between neither decides nor is it."""
    for event in reversed(events):
        mark = pending_mark(event)
        if mark is False:
            return None
        if mark and isinstance(event, CommandRun) and event.name == name:
            return event
    return None


@dataclass(frozen=True, slots=True)
class AttentionMarks:
    """The last word of some events on each mark; ``None`` where they say nothing."""

    open_turn: bool | None = None
    live_goal: bool | None = None
    undecided: bool | None = None

    @property
    def touched(self) -> bool:
        return self.row() != (None, None, None)

    def row(self) -> tuple[bool | None, bool | None, bool | None]:
        return self.open_turn, self.live_goal, self.undecided

    @property
    def needs_attention(self) -> bool:
        return bool(self.open_turn or self.live_goal or self.undecided)


def attention_marks(events: Iterable[SessionEvent]) -> AttentionMarks:
    """What ``events``, appended in order, say about the session's start-up marks.

    A superset on purpose: a marked session that needs nothing is loaded for nothing, never
    the reverse. ``open_turn``: the last turn mark is a ``turn/start``. ``live_goal``: the
    last goal revision is an active snapshot. ``undecided``: the last event
    :func:`pending_mark` names is a pending command.
    """
    open_turn: bool | None = None
    live_goal: bool | None = None
    undecided: bool | None = None
    for event in events:
        if isinstance(event, TurnStart):
            open_turn = True
        elif isinstance(event, TurnEnd):
            open_turn = False
        elif isinstance(event, GoalChange):
            live_goal = event.snapshot is not None and event.snapshot.phase == "active"
        else:
            mark = pending_mark(event)
            if mark is not None:
                undecided = mark
    return AttentionMarks(open_turn, live_goal, undecided)
