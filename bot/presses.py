"""A button's data: the encoding of engine.api's ``Press`` (the button protocol lives there),
every channel's: Telegram's callback data, Slack's action ids and values.

The data of the plan and goal card buttons and of tool approvals (docs/telegram.md).

Format: ``p:<action>:<8 chars of plan id>:<revision>`` or ``g:<action>:<8 chars of goal
id>:<revision>``, at most 64 bytes (Telegram's limit). A tool approval button is
``a:<once|session|deny|rule>:<8 chars of the request id>:0``: a request has no revisions, it
is open or closed, and its id names exactly one tool call. A press counts only when the short
id and the revision match the live plan or goal; :func:`decode` only checks the shape, so a
forged or malformed string decodes to ``None`` and is never acted on.
"""

from __future__ import annotations

import re

from engine.api import (
    APPROVAL_DENY,
    APPROVAL_ONCE,
    APPROVAL_RULE,
    APPROVAL_SESSION,
    GOAL_CANCEL,
    GOAL_CLEAR,
    GOAL_CLEAR_YES,
    GOAL_PAUSE,
    GOAL_RESUME,
    GOAL_START,
    PLAN_APPROVE,
    PLAN_CANCEL,
    PLAN_DISCARD,
    PLAN_DISCARD_YES,
    PLAN_DROP,
    PLAN_DROP_NO,
    PLAN_DROP_YES,
    PLAN_KEEP,
    PLAN_KEEP_BRANCH,
    PLAN_MERGE,
    PLAN_PUSH,
    PLAN_RAISE_CAP,
    PLAN_RESUME,
    PLAN_REVISE,
    PRESS_ACTIONS,
    SHORT_ID_LEN,
    Press,
    PressKind,
)

CallbackKind = PressKind
CallbackData = Press

MAX_CALLBACK_BYTES = 64
_ACTIONS = PRESS_ACTIONS
_KINDS: dict[str, CallbackKind] = {"p": "p", "g": "g", "a": "a"}
# Ids are uuid hex (or uuid text with dashes); a revision is a non-negative int without
# leading zeros so that one revision has exactly one encoding.
_PATTERN = re.compile(r"(p|g|a):([a-z_]{1,16}):([0-9A-Za-z_-]{1,8}):(0|[1-9][0-9]{0,17})")


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


__all__ = [
    "APPROVAL_DENY",
    "APPROVAL_ONCE",
    "APPROVAL_RULE",
    "APPROVAL_SESSION",
    "GOAL_CANCEL",
    "GOAL_CLEAR",
    "GOAL_CLEAR_YES",
    "GOAL_PAUSE",
    "GOAL_RESUME",
    "GOAL_START",
    "MAX_CALLBACK_BYTES",
    "PLAN_APPROVE",
    "PLAN_CANCEL",
    "PLAN_DISCARD",
    "PLAN_DISCARD_YES",
    "PLAN_DROP",
    "PLAN_DROP_NO",
    "PLAN_DROP_YES",
    "PLAN_KEEP",
    "PLAN_KEEP_BRANCH",
    "PLAN_MERGE",
    "PLAN_PUSH",
    "PLAN_RAISE_CAP",
    "PLAN_RESUME",
    "PLAN_REVISE",
    "CallbackData",
    "CallbackKind",
    "approval_data",
    "decode",
    "encode",
    "goal_data",
    "plan_data",
    "short_id",
]
