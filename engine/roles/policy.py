"""Who may do what: the one rule (docs/roles.md).

:func:`may` is the whole policy, a pure table of role x action. The Telegram gate
(``bot/access.py``) and the engine's own actor checks (``engine.commands``) both ask it, after
mapping a command or a button press onto its :data:`~engine.roles.types.Action` with
:func:`command_action` and :func:`press_action`. Nothing else decides who may do what.
"""

from __future__ import annotations

from typing import Final

from engine.roles.types import Action, Role

PERMISSIONS: Final[dict[Role, frozenset[Action]]] = {
    "owner": frozenset({"read", "approve", "review", "answer", "stop", "control", "settings"}),
    "approver": frozenset({"read", "approve", "review", "answer", "stop"}),
    "member": frozenset({"read"}),
}

# Press kinds and actions (engine.api's button protocol) onto actions. ``q`` is an ask_user
# option button (its callback data is the front end's own, so only the kind is known).
_PRESS_ACTIONS: Final[dict[str, dict[str, Action]]] = {
    "p": {
        "approve": "approve",
        "resume": "approve",
        "keep": "review",
        "revise": "review",
        "discard": "review",
        "discard_yes": "review",
        "cancel": "review",
        "raise_cap": "settings",  # the daily token cap, then Resume
    },
    "g": {"pause": "stop"},
    "a": {"once": "approve", "session": "approve", "deny": "approve", "rule": "approve"},
}

_READ_COMMANDS: Final = frozenset({"show_plan", "status", "help", "start"})


def may(role: Role, action: Action) -> bool:
    """Whether ``role`` may do ``action``: the one rule for every chat."""
    return action in PERMISSIONS[role]


def command_action(name: str, args: str = "") -> Action:
    """What the command ``/name args`` asks to do (an unknown command is control)."""
    word = args.split(maxsplit=1)[0].lower() if args.strip() else ""
    if name in _READ_COMMANDS:
        return "read"
    match name:
        case "execute":
            return "approve"
        case "discard":
            return "review"
        case "stop":
            return "stop"
        case "goal":
            if word == "pause":
                return "stop"
            if word == "budget" or "--tokens" in args:
                return "settings"
            return "control"
        case "team":
            return "read" if word in ("", "list") else "settings"
        case "usage" | "project" | "setup":
            return "settings"
    return "control"


def press_action(kind: str, action: str) -> Action:
    """What a button press asks to do; a goal button other than Pause is control."""
    if kind == "q":
        return "answer"
    return _PRESS_ACTIONS.get(kind, {}).get(action, "control")


def message_action(*, feedback: bool) -> Action:
    """A message to the agent: feedback after Keep planning/Revise is review, else control."""
    return "review" if feedback else "control"


ROLE_TEXT: Final[dict[Role, str]] = {
    "owner": "You are an owner here: you may do everything.",
    "approver": (
        "You are an approver here: you may approve, revise or discard plans, give feedback, "
        "answer questions and tool approvals, /execute and /stop. The rest is the owner's."
    ),
    "member": (
        "You are a member here: you may use /show_plan, /status, /help and /team. "
        "An owner can make you an approver with /team add."
    ),
}


def refusal_text(role: Role) -> str:
    """What a refused person is told: their role and what it allows."""
    return f"Sorry, that is not for you. {ROLE_TEXT[role]}"


__all__ = [
    "PERMISSIONS",
    "ROLE_TEXT",
    "command_action",
    "may",
    "message_action",
    "press_action",
    "refusal_text",
]
