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
from engine.text import clip

AUDIT_TYPES = frozenset({"command/run", "approval/requested", "approval/decided"})
_TOOL_DECISIONS = {
    "once": "allowed once",
    "session": "allowed for the session",
    "deny": "denied",
}


def _who(actor: int | None, name: str) -> str:
    return name or (str(actor) if actor is not None else "someone")


def _when(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%H:%M UTC")


def last_decisions(stored: Sequence[StoredEvent], *, limit: int = 3) -> list[str]:
    """The newest ``limit`` decisions a person made, oldest first, one line each (pure)."""
    commands: dict[str, str] = {}
    lines: list[str] = []
    for s in stored:
        e = s.event
        if isinstance(e, ApprovalRequested):
            commands[e.request_id] = clip(e.command, 60, one_line=True)
        elif isinstance(e, ApprovalDecided) and e.actor is not None:
            verdict = _TOOL_DECISIONS.get(e.decision)
            if verdict is not None:
                what = commands.get(e.request_id, "a tool call")
                lines.append(
                    f"🔐 {what}: {verdict} by {_who(e.actor, e.actor_name)}, {_when(s.at)}"
                )
        elif isinstance(e, CommandRun) and e.actor is not None:
            name = str(e.data.get("name") or "")
            if e.name == "approve":
                lines.append(f"✅ Plan approved by {_who(e.actor, name)}, {_when(s.at)}")
            elif e.name == "approval_vote":
                lines.append(f"👍 Plan approval by {_who(e.actor, name)}, {_when(s.at)}")
    return lines[-limit:]


__all__ = ["AUDIT_TYPES", "last_decisions"]
