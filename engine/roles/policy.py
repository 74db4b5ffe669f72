"""Who may do what: the one table (docs/roles.md).

:data:`ACTIONS` says which roles may do each :data:`~engine.roles.types.Action`, and
:data:`COMMANDS`, :data:`PRESSES` and :data:`WORDS` map every command, button press and way of
giving the agent words onto an action. Everything else is generated from these tables: the
permission sets (:data:`PERMISSIONS`), the read-only commands (:data:`READ_COMMANDS`), the role
texts (:data:`ROLE_TEXT`) and the press alerts (:data:`ALERT_TEXTS`). The front end's gate
(``bot/telegram/access.py``) and the engine's own actor checks (``engine.commands``, ``engine.app``)
ask :func:`may` after mapping what they got with :func:`command_action`, :func:`press_action`
or :func:`words_action`. Nothing else decides who may do what.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from engine.roles.types import Action, Role

ROLES: Final[tuple[Role, ...]] = ("owner", "approver", "member")


@dataclass(frozen=True, slots=True)
class ActionRule:
    """One action: the roles that may do it, what it covers (the docs' table) and how a role
    text names it (``says``)."""

    roles: frozenset[Role]
    what: str
    says: str


_ALL: Final[frozenset[Role]] = frozenset(ROLES)
_TEAM: Final[frozenset[Role]] = frozenset({"owner", "approver"})
_OWNER: Final[frozenset[Role]] = frozenset({"owner"})

ACTIONS: Final[dict[Action, ActionRule]] = {
    "read": ActionRule(
        _ALL,
        "`/show_plan` (members get a copy without buttons), `/status` (the workspace path "
        "only for owners), `/help`, `/start`, `/team` (the list)",
        "read",
    ),
    "approve": ActionRule(
        _TEAM,
        "✅ Approve, `/execute` without words (approve the written plan, or continue the "
        "checklist), ▶️ Resume of a paused checklist, tool approvals (Allow once, Allow for "
        "this session, Deny, the Allow of an unattended denial), the approval a checked task's "
        "skip needs",
        "approve plans and tool calls",
    ),
    "review": ActionRule(
        _TEAM,
        "✏️ Keep planning, ✏️ Revise plan, 🗑 Discard (button, its confirmation, `/discard`), "
        "the feedback message after Keep planning or Revise (words, see below)",
        "revise or discard plans and give feedback on them",
    ),
    "answer": ActionRule(
        _TEAM,
        "the answer to the question the agent has open now, once: an option button of "
        "`ask_user`, or a reply to the question's message (words, see below)",
        "answer the agent's open question",
    ),
    "stop": ActionRule(
        _TEAM, "`/stop`, the goal's ⏸ Pause (button, or `/goal pause` alone)", "stop"
    ),
    "control": ActionRule(
        _OWNER,
        "`/plan`, `/goal <objective>` and every other `/goal` form, the goal's Start / "
        "Resume / Clear, `/new`, a finished plan's branch buttons (Merge, Push branch, Keep "
        "branch, Discard changes), giving the agent words of one's own (see below), a "
        "private chat with the bot",
        "steer the agent",
    ),
    "settings": ActionRule(
        _OWNER,
        "`/usage` and `/usage cap`, ⬆️ Raise cap, `/goal budget` (and `--tokens`), "
        "`/project`, `/setup`, `/team add`, `/team remove`, adding the bot to a group, the "
        "workspace path in `/status`",
        "change the settings",
    ),
}

PERMISSIONS: Final[dict[Role, frozenset[Action]]] = {
    role: frozenset(a for a, rule in ACTIONS.items() if role in rule.roles) for role in ROLES
}

# Commands onto actions. ``COMMAND_FORMS``: the exact words after a command (checked first);
# ``COMMAND_WORDS``: the first word after it; ``COMMANDS``: any other words (an unknown
# command is control). ``/execute`` alone approves; words after it are words for the agent,
# so they are the owner's. ``/goal pause`` alone stops; with more words it is not a pause.
COMMAND_FORMS: Final[dict[tuple[str, str], Action]] = {
    ("execute", ""): "approve",
    ("goal", "pause"): "stop",
    ("team", ""): "read",
    ("team", "list"): "read",
}
COMMAND_WORDS: Final[dict[tuple[str, str], Action]] = {
    ("goal", "budget"): "settings",
    ("team", "add"): "settings",
    ("team", "remove"): "settings",
}
COMMANDS: Final[dict[str, Action]] = {
    "show_plan": "read",
    "status": "read",
    "help": "read",
    "start": "read",
    "team": "settings",
    "execute": "control",
    "discard": "review",
    "stop": "stop",
    "plan": "control",
    "goal": "control",
    "new": "control",
    "usage": "settings",
    "project": "settings",
    "setup": "settings",
    "whoami": "read",
}
# Every command a front end knows; anything else is answered with a pointer to /help.
KNOWN_COMMANDS: Final[frozenset[str]] = frozenset(COMMANDS)
# Commands that only repeat another (``/start`` is ``/help``): not listed in the texts.
_ALIASES: Final = frozenset({"start"})

# Every command that reads and changes nothing, for anyone in an allowed group.
READ_COMMANDS: Final[frozenset[str]] = frozenset(n for n, a in COMMANDS.items() if a == "read")

# Button presses, by kind (``p`` plan card, ``g`` goal card, ``a`` tool approval, ``q`` an
# ``ask_user`` option, ``v`` a voice transcript) and action, onto actions; a press not listed
# is control (the owner's).
PRESSES: Final[dict[str, dict[str, Action]]] = {
    "p": {
        "approve": "approve",
        "resume": "approve",
        "keep": "review",
        "revise": "review",
        "discard": "review",
        "discard_yes": "review",
        "cancel": "review",
        "raise_cap": "settings",  # the daily token cap, then Resume
        "merge": "control",
        "push": "control",
        "keep_branch": "control",
        "drop": "control",
        "drop_yes": "control",
        "drop_no": "control",
    },
    "g": {
        "pause": "stop",
        "resume": "control",
        "start": "control",
        "clear": "control",
        "clear_yes": "control",
        "cancel": "control",
    },
    "a": {"once": "approve", "session": "approve", "deny": "approve", "rule": "approve"},
    "q": {"": "answer"},
    "v": {"send": "control", "drop": "control"},  # a transcript's Send gives words
}

# Giving the agent words: what they are decides the action. ``feedback``: the message after
# Keep planning or Revise, on a plan under review; ``answer``: to the question the agent has
# open now, once; ``own``: anything else (a message, a reply, ``/execute <text>``, ``/plan
# <text>``, a goal objective, a voice transcript's Send, a file or photo).
Words = Literal["feedback", "answer", "own"]
WORDS: Final[dict[Words, Action]] = {"feedback": "review", "answer": "answer", "own": "control"}
# Where words come from, for the docs' table: (the way, what it counts as).
WORD_SOURCES: Final[tuple[tuple[str, Words], ...]] = (
    ("a message to the bot (a mention, a reply to the bot, any message in a private chat)", "own"),
    (
        "the next message of whoever pressed ✏️ Keep planning or ✏️ Revise, while the plan "
        "under review waits for it",
        "feedback",
    ),
    ("a reply to the agent's question while it is open (or its option button), once", "answer"),
    ("a reply to a question already answered, or not the one open now", "own"),
    ("`/execute <text>`, `/plan <text>`, `/goal <objective>`", "own"),
    (
        "a voice note's transcript, sent with Send (or corrected by a reply); a voice note "
        "nobody but an owner may send is refused before it is transcribed",
        "own",
    ),
    ("a file or a photo (its caption); as feedback or an answer, as above", "own"),
)


def may(role: Role, action: Action) -> bool:
    """Whether ``role`` may do ``action``: the one rule for every chat."""
    return role in ACTIONS[action].roles


def command_action(name: str, args: str = "") -> Action:
    """What the command ``/name args`` asks to do (an unknown command is control)."""
    words = " ".join(args.lower().split())
    form = COMMAND_FORMS.get((name, words))
    if form is not None:
        return form
    first = words.split(" ", 1)[0]
    by_word = COMMAND_WORDS.get((name, first))
    if by_word is not None:
        return by_word
    if name == "goal" and "--tokens" in words:
        return "settings"  # a goal with a budget sets the budget
    return COMMANDS.get(name, "control")


def press_action(kind: str, action: str) -> Action:
    """What a button press asks to do (an ``ask_user`` option is ``q`` with any action)."""
    if kind == "q":
        return "answer"
    return PRESSES.get(kind, {}).get(action, "control")


def words_action(*, feedback: bool = False, answer: bool = False) -> Action:
    """What giving the agent words asks to do: review feedback, the answer to the open
    question, or one's own words (the owner's). The caller says which the words are."""
    if feedback:
        return WORDS["feedback"]
    if answer:
        return WORDS["answer"]
    return WORDS["own"]


def message_action(*, feedback: bool) -> Action:
    """A message to the agent: feedback after Keep planning/Revise is review, else control."""
    return words_action(feedback=feedback)


def _listed(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _reads() -> str:
    names = [n for n, a in COMMANDS.items() if a == "read" and n not in _ALIASES]
    names += [n for (n, w), a in COMMAND_FORMS.items() if a == "read" and not w]
    return _listed([f"/{n}" for n in dict.fromkeys(names)])


def _allowed(role: Role) -> str:
    return _listed([ACTIONS[a].says for a in ACTIONS if a != "read" and may(role, a)])


ROLE_TEXT: Final[dict[Role, str]] = {
    "owner": "You are an owner here: you may do everything.",
    "approver": (
        f"You are an approver here: you may {_allowed('approver')}. The rest is the owner's."
    ),
    "member": (
        f"You are a member here: you may use {_reads()}. "
        "An owner can make you an approver with /team add."
    ),
}

# A press the presser's role does not allow (an alert holds at most 200 characters).
ALERT_TEXTS: Final[dict[Role, str]] = {
    "owner": "This button is not available.",
    "approver": (
        "Not for approvers: this button is the owner's. As an approver you may "
        f"{_allowed('approver')}."
    ),
    "member": (
        "Only owners and approvers can use these buttons. You are a member here: "
        f"{_reads()} are yours."
    ),
}


def refusal_text(role: Role) -> str:
    """What a refused person is told: their role and what it allows."""
    return f"Sorry, that is not for you. {ROLE_TEXT[role]}"


def permission_table() -> str:
    """The role x action table as Markdown (docs/roles.md keeps it; a test compares)."""
    rows = [
        "| action | what | owner | approver | member |",
        "|---|---|---|---|---|",
    ]
    for action, rule in ACTIONS.items():
        marks = " | ".join("✓" if role in rule.roles else "" for role in ROLES)
        rows.append(f"| `{action}` | {rule.what} | {marks} |")
    return "\n".join(rows)


def words_table() -> str:
    """Who may give the agent words, by where they come from, as Markdown (docs/roles.md)."""
    rows = [
        "| words | counts as | owner | approver | member |",
        "|---|---|---|---|---|",
    ]
    for source, kind in WORD_SOURCES:
        action = WORDS[kind]
        marks = " | ".join("✓" if may(role, action) else "" for role in ROLES)
        rows.append(f"| {source} | `{kind}` (`{action}`) | {marks} |")
    return "\n".join(rows)


__all__ = [
    "ACTIONS",
    "ALERT_TEXTS",
    "COMMANDS",
    "COMMAND_FORMS",
    "COMMAND_WORDS",
    "PERMISSIONS",
    "PRESSES",
    "READ_COMMANDS",
    "ROLES",
    "ROLE_TEXT",
    "WORDS",
    "WORD_SOURCES",
    "ActionRule",
    "Words",
    "command_action",
    "may",
    "message_action",
    "permission_table",
    "press_action",
    "refusal_text",
    "words_action",
    "words_table",
]
