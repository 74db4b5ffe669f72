"""Callback data for the plan and goal card buttons (DESIGN.md §7, §14).

Format: ``p:<action>:<8 chars of plan id>:<revision>`` or ``g:<action>:<8 chars of goal
id>:<revision>``, at most 64 bytes (Telegram's limit). A tool approval button is
``a:<once|session|deny|rule>:<8 chars of the request id>:0``: a request has no revisions, it
is open or closed, and its id names exactly one tool call. A press counts only when the short
id and the revision match the live plan or goal; :func:`decode` only checks the shape, so a
forged or malformed string decodes to ``None`` and is never acted on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

CallbackKind = Literal["p", "g", "a"]

MAX_CALLBACK_BYTES = 64
SHORT_ID_LEN = 8

# Plan card actions.
PLAN_APPROVE = "approve"
PLAN_KEEP = "keep"
PLAN_DISCARD = "discard"
PLAN_DISCARD_YES = "discard_yes"
PLAN_REVISE = "revise"
PLAN_CANCEL = "cancel"
PLAN_RESUME = "resume"
PLAN_ACTIONS = frozenset(
    {
        PLAN_APPROVE,
        PLAN_KEEP,
        PLAN_DISCARD,
        PLAN_DISCARD_YES,
        PLAN_REVISE,
        PLAN_CANCEL,
        PLAN_RESUME,
    }
)

# Goal card actions.
GOAL_PAUSE = "pause"
GOAL_RESUME = "resume"
GOAL_START = "start"
GOAL_CLEAR = "clear"
GOAL_CLEAR_YES = "clear_yes"
GOAL_CANCEL = "cancel"
GOAL_ACTIONS = frozenset(
    {GOAL_PAUSE, GOAL_RESUME, GOAL_START, GOAL_CLEAR, GOAL_CLEAR_YES, GOAL_CANCEL}
)

# Tool approval actions; ``rule`` is the Allow button of a call denied in an unattended turn.
APPROVAL_ONCE = "once"
APPROVAL_SESSION = "session"
APPROVAL_DENY = "deny"
APPROVAL_RULE = "rule"
APPROVAL_ACTIONS = frozenset({APPROVAL_ONCE, APPROVAL_SESSION, APPROVAL_DENY, APPROVAL_RULE})

_ACTIONS: dict[str, frozenset[str]] = {"p": PLAN_ACTIONS, "g": GOAL_ACTIONS, "a": APPROVAL_ACTIONS}
_KINDS: dict[str, CallbackKind] = {"p": "p", "g": "g", "a": "a"}
# Ids are uuid hex (or uuid text with dashes); a revision is a non-negative int without
# leading zeros so that one revision has exactly one encoding.
_PATTERN = re.compile(r"(p|g|a):([a-z_]{1,16}):([0-9A-Za-z_-]{1,8}):(0|[1-9][0-9]{0,17})")


@dataclass(frozen=True, slots=True)
class CallbackData:
    """A decoded button press: what it is for, the id prefix and the revision it was drawn for."""

    kind: CallbackKind
    action: str
    short_id: str
    revision: int

    def matches(self, full_id: str, revision: int) -> bool:
        """True when this press was drawn for exactly this id and revision."""
        return short_id(full_id) == self.short_id and revision == self.revision


def short_id(full_id: str) -> str:
    """The id prefix carried in callback data (the first 8 characters)."""
    return full_id[:SHORT_ID_LEN]


def encode(kind: CallbackKind, action: str, full_id: str, revision: int) -> str:
    """Encode a button's callback data; raises ``ValueError`` for anything decode would reject."""
    data = f"{kind}:{action}:{short_id(full_id)}:{revision}"
    if decode(data) is None:
        raise ValueError(f"invalid callback data: {data!r}")
    return data


def decode(data: str | None) -> CallbackData | None:
    """Decode callback data; ``None`` for anything malformed, forged or over 64 bytes."""
    if data is None or len(data.encode("utf-8")) > MAX_CALLBACK_BYTES:
        return None
    m = _PATTERN.fullmatch(data)
    if m is None:
        return None
    kind, action, sid, rev = m.groups()
    if action not in _ACTIONS[kind] or (kind == "a" and rev != "0"):
        return None
    return CallbackData(kind=_KINDS[kind], action=action, short_id=sid, revision=int(rev))


def plan_data(action: str, plan_id: str, revision: int) -> str:
    """Callback data for a plan card button."""
    return encode("p", action, plan_id, revision)


def goal_data(action: str, goal_id: str, revision: int) -> str:
    """Callback data for a goal card button."""
    return encode("g", action, goal_id, revision)


def approval_data(action: str, request_id: str) -> str:
    """Callback data for a tool approval button (revision 0: a request is open or closed)."""
    return encode("a", action, request_id, 0)
