"""A tool approval as every front end words it (docs/security.md): the question, the buttons
and how the request ended. The engine gives the request (``engine.api.ApprovalView``); each
channel sets these words in its own format and binds each button to the press it sends."""

from __future__ import annotations

from engine.api import (
    APPROVAL_DENY,
    APPROVAL_ONCE,
    APPROVAL_RULE,
    APPROVAL_SESSION,
    SHORT_ID_LEN,
    ApprovalView,
    Press,
)
from engine.events import ApprovalDecision
from engine.text import clip

ALLOW_ONCE = "✅ Allow once"
ALLOW_SESSION = "♾ Allow for this session"
DENY = "⛔ Deny"
# Said under a session rule for a test runner or build tool (docs/security.md).
TRUSTS_PROJECT_CONFIG = (
    "A session rule for a test runner or build tool also trusts the project's own test "
    "configuration (conftest.py, package.json scripts, a Makefile), which the agent can edit."
)
# How a request ended, as its message says once its buttons are gone.
CLOSED: dict[str, str] = {
    "once": "✅ Allowed once.",
    "session": "✅ Allowed for this session.",
    "deny": "⛔ Denied.",
    "timeout": "⌛ Nobody answered in time: denied.",
    "stopped": "⏹ Stopped: denied.",
    "interrupted": "Interrupted by a restart: denied.",
    "unattended": "Not run.",
}
MAX_LABEL = 60


def question(view: ApprovalView) -> str:
    """The approval message's first line: what the call asks for."""
    if view.why == "network":
        return f"Allow {view.tool} with the network?"
    if view.why == "ask-rule":
        return f"Allow {view.tool}? You asked to be asked about this command."
    return f"Allow {view.tool}?"


def rule_words(view: ApprovalView) -> str:
    """What a session button adds, as its label names it."""
    if view.family == "network":
        return "the network for this exact command"
    if view.exact:
        return "this exact command"
    return f"“{view.rule_text}”"


def unattended_parts(view: ApprovalView) -> tuple[str, str]:
    """A call denied in an unattended turn, said in two parts: the words to set in bold, and
    the rest."""
    return (
        f"Not run: {view.tool} needs your approval",
        ", and a goal round has nobody to ask. The goal waits for you.",
    )


def closed_text(view: ApprovalView, decision: ApprovalDecision) -> str:
    """How the request ended (a session rule names what it allowed)."""
    if decision == "session" and view.rule:
        return f"✅ Allowed for this session: {clip(rule_words(view), 200)}"
    return CLOSED.get(decision, "Closed.")


def approval_buttons(view: ApprovalView) -> list[list[tuple[str, Press]]]:
    """The request's buttons, each a label and the press it sends: Allow once / Deny, and
    Allow <rule> for this session when a rule can allow it; a call already denied in an
    unattended turn offers only the rule."""
    short = view.request_id[:SHORT_ID_LEN]

    def press(action: str) -> Press:
        return Press("a", action, short, 0)

    def label(text: str) -> str:
        return clip(text, MAX_LABEL, one_line=True)

    if view.unattended:
        if not view.rule:
            return []
        allow = label(f"✅ Allow {rule_words(view)} for this session")
        return [[(allow, press(APPROVAL_RULE))]]
    rows = [[(ALLOW_ONCE, press(APPROVAL_ONCE)), (DENY, press(APPROVAL_DENY))]]
    if view.rule:
        allow = label(f"♾ Allow {rule_words(view)} for this session")
        rows.append([(allow, press(APPROVAL_SESSION))])
    return rows


__all__ = [
    "ALLOW_ONCE",
    "ALLOW_SESSION",
    "CLOSED",
    "DENY",
    "TRUSTS_PROJECT_CONFIG",
    "approval_buttons",
    "closed_text",
    "question",
    "rule_words",
    "unattended_parts",
]
