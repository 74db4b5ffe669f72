"""The audit trail of approvals, read from a session's log (docs/roles.md).

Every approval names who gave it and when: a plan's ``command/run`` ``approve`` and
``approval_vote`` (``actor`` and ``data.name``), a tool call's ``approval/decided`` (``actor``
and ``actor_name``, its command from the matching ``approval/requested``), a session rule's
``approval/rule``. :func:`last_decisions` turns the newest of them into lines for ``/status``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from engine.events import ApprovalDecided, ApprovalRequested, CommandRun, StoredEvent
from engine.keys import PersonKey, key_label
from engine.ports import EventLog
from engine.text import clip

AUDIT_TYPES = frozenset({"command/run", "approval/requested", "approval/decided"})
_PLAN_VOTES = frozenset({"approve", "approval_vote"})
_TOOL_DECISIONS = {
    "once": "allowed once",
    "session": "allowed for the session",
    "deny": "denied",
}


def _who(actor: PersonKey | None, name: str) -> str:
    return name or (key_label(actor) if actor is not None else "someone")


def _when(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%H:%M UTC")


def plan_line(actor: PersonKey | None, name: str, at: float, *, final: bool) -> str:
    """The audit line of a plan approval: the one that approved it, or one of several."""
    if final:
        return f"✅ Plan approved by {_who(actor, name)}, {_when(at)}"
    return f"👍 Plan approval by {_who(actor, name)}, {_when(at)}"


def tool_line(
    command: str, decision: str, actor: PersonKey | None, name: str, at: float
) -> str | None:
    """The audit line of a tool approval a person answered (``None`` for other endings)."""
    verdict = _TOOL_DECISIONS.get(decision)
    if verdict is None or actor is None:
        return None
    what = clip(command, 60, one_line=True) or "a tool call"
    return f"🔐 {what}: {verdict} by {_who(actor, name)}, {_when(at)}"


def all_decisions(stored: Sequence[StoredEvent]) -> list[str]:
    """Every decision a person made in the log, oldest first, one line each (pure)."""
    commands: dict[str, str] = {}
    lines: list[str] = []
    for s in stored:
        e = s.event
        if isinstance(e, ApprovalRequested):
            commands[e.request_id] = e.command
        elif isinstance(e, ApprovalDecided):
            command = commands.get(e.request_id, "")
            line = tool_line(command, e.decision, e.actor, e.actor_name, s.at)
            if line is not None:
                lines.append(line)
        elif isinstance(e, CommandRun) and e.actor is not None and e.name in _PLAN_VOTES:
            name = str(e.data.get("name") or "")
            lines.append(plan_line(e.actor, name, s.at, final=e.name == "approve"))
    return lines


def last_decisions(stored: Sequence[StoredEvent], *, limit: int = 3) -> list[str]:
    """The newest ``limit`` decisions a person made, oldest first (pure)."""
    return all_decisions(stored)[-limit:]


class AuditTrail:
    """The decisions of each session, read from the log once, then kept up to date by
    :meth:`add` as this process makes them (``/status`` reads no log after that)."""

    def __init__(self, log: EventLog, *, keep: int = 20) -> None:
        self._log = log
        self._keep = keep
        self._lines: dict[str, list[str]] = {}

    async def last(self, session_id: str, *, limit: int = 3) -> list[str]:
        """The newest ``limit`` decisions, oldest first."""
        lines = self._lines.get(session_id)
        if lines is None:
            stored = await self._log.read(session_id, types=AUDIT_TYPES)
            lines = self._lines[session_id] = all_decisions(stored)[-self._keep :]
        return lines[-limit:]

    def add(self, session_id: str, line: str | None) -> None:
        """A decision just logged in this process (before the first read: nothing to do)."""
        lines = self._lines.get(session_id)
        if lines is not None and line is not None:
            lines.append(line)
            del lines[: -self._keep]


__all__ = [
    "AUDIT_TYPES",
    "AuditTrail",
    "all_decisions",
    "last_decisions",
    "plan_line",
    "tool_line",
]
