"""The tool approval policy: pure decisions over a call, the plan phase and the rules.

A rule is a tuple of command words (``("git", "status")``). It allows a ``bash`` command when
the command is *simple* and its words, as the shell would split them (``shlex``), start with
the rule's words: ``git status -s`` matches ``git status``; ``git statusx`` and
``echo git status`` do not. A command is simple when, outside single quotes, it has none of
``; & | < > ( )``, a newline, ``$`` or a backtick (inside double quotes ``$`` and backticks
still expand, so they count there too). Anything else (a list, a pipe, a redirection, a
substitution, a subshell) is never allowed by a rule: ``ls; rm -rf x`` asks even when ``ls``
is allowed, because a prefix rule cannot say what the rest would do.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Decision = Literal["allow", "deny", "ask"]
Rule = tuple[str, ...]

# The tools the policy looks at; every other tool (reads, plan, todo, goal) is allowed here
# and left to the plan gate.
BASH = "bash"
WRITE_TOOLS = frozenset({"write_file", "edit_file"})

# Phases (the plan service's derived state) where bash runs with the workspace writable.
ASKING_PHASES = frozenset({"none", "active"})

_OPERATORS = frozenset(";&|<>()\n\r`$")
_IN_DOUBLE_QUOTES = frozenset("`$")
# The second word of a session rule: a subcommand (``git status``, ``npm run``), never a path,
# a file name or an option.
_SUBCOMMAND = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
_QUOTING = re.compile(r"['\"\\]")
# shlex's whitespace; newlines never reach the split (a command with one is not simple).
_BLANKS = re.compile(r"[ \t]+")


class RuleError(ValueError):
    """A rule that is empty or is not a plain list of words."""


def is_simple(command: str) -> bool:
    """True when ``command`` is one plain command (no list, pipe, redirection, substitution)."""
    quote: str | None = None
    escaped = False
    for ch in command:
        if escaped:
            escaped = False
            if ch in "\n\r":
                return False  # a line continuation still ends up as two lines in some shells
            continue
        if quote == "'":
            if ch == "'":
                quote = None
            continue
        if quote == '"':
            if ch == "\\":
                escaped = True
            elif ch == '"':
                quote = None
            elif ch in _IN_DOUBLE_QUOTES:
                return False
            continue
        if ch == "\\":
            escaped = True
        elif ch in "'\"":
            quote = ch
        elif ch in _OPERATORS:
            return False
    return quote is None and not escaped


def command_words(command: str) -> list[str] | None:
    """The words of a simple command as the shell splits them; ``None`` when not simple."""
    if not is_simple(command):
        return None
    if not _QUOTING.search(command):
        # Nothing quoted or escaped: exactly shlex's split, without its per-character cost.
        return [w for w in _BLANKS.split(command) if w] or None
    try:
        words = shlex.split(command, comments=False, posix=True)
    except ValueError:
        return None
    return words or None


def parse_rule(text: str) -> Rule:
    """One rule from its text (``"git status"``); raises :class:`RuleError` when unusable."""
    words = command_words(text)
    if not words:
        raise RuleError(f"{text.strip()!r} is not a plain command prefix")
    return tuple(words)


def parse_rules(text: str) -> tuple[Rule, ...]:
    """Comma-separated rules (``"pytest,git status,ls"``); empty items are skipped."""
    return tuple(parse_rule(part) for part in text.split(",") if part.strip())


def matches(rule: Sequence[str], words: Sequence[str]) -> bool:
    """The rule's words are the first words of the command, compared word by word."""
    return bool(rule) and len(words) >= len(rule) and tuple(words[: len(rule)]) == tuple(rule)


def session_rule(command: str) -> Rule | None:
    """The rule "Allow for this session" adds: the program, and its subcommand if it has one.

    ``git status -s`` -> ``git status``; ``pytest tests/a.py`` -> ``pytest``. ``None`` for a
    command that is not simple (no rule could ever allow it).
    """
    words = command_words(command)
    if not words:
        return None
    if len(words) > 1 and _SUBCOMMAND.fullmatch(words[1]):
        return (words[0], words[1])
    return (words[0],)


def rule_text(rule: Sequence[str]) -> str:
    """A rule as the owner reads it (shell-quoted words)."""
    return " ".join(shlex.quote(w) for w in rule)


def bash_command(args: Mapping[str, Any]) -> str:
    """The ``command`` argument of a bash call ('' when missing)."""
    value = args.get("command")
    return value if isinstance(value, str) else ""


def may_ask(tool: str, *, ask_writes: bool = False) -> bool:
    """Whether :func:`decide` can say anything but allow for ``tool`` (cheap pre-check)."""
    return tool == BASH or (ask_writes and tool in WRITE_TOOLS)


def decide(
    tool: str,
    args: Mapping[str, Any],
    *,
    phase: str,
    rules: Iterable[Sequence[str]],
    ask_writes: bool = False,
    write_target: str | None = None,
    write_rules: Iterable[str] = (),
) -> Decision:
    """Allow, or ask the owner, for one call that the plan gate already let through.

    ``bash`` asks in NoPlan and Active unless a rule allows the command; in pre-init Editing
    the plan gate and the sandbox keep it read-only, so it is not asked about. File writes
    inside the workspace are allowed, unless ``ask_writes``: then a write to ``write_target``
    (workspace-relative; ``None`` for a path outside, which the tools refuse) asks unless the
    session allowed writes to that file.
    """
    if phase not in ASKING_PHASES:
        return "allow"
    if tool == BASH:
        words = command_words(bash_command(args))
        if words is not None and any(matches(rule, words) for rule in rules):
            return "allow"
        return "ask"
    if tool in WRITE_TOOLS and ask_writes and write_target is not None:
        return "allow" if write_target in set(write_rules) else "ask"
    return "allow"


# Rule families: bash command prefixes, and the files whose writes the session allowed.
RuleFamily = Literal["bash", "files"]


def family_of(tool: str) -> RuleFamily:
    """Which rules a tool's calls are matched against."""
    return "files" if tool in WRITE_TOOLS else "bash"


@dataclass(frozen=True, slots=True)
class ApprovalView:
    """One request as the chat shows it. ``rule`` is what "Allow for this session" adds.

    ``command`` is the bash command, or ``<tool> <path>`` for a write; ``diff`` is the unified
    diff of a write to an existing text file (not logged: it can be large).
    """

    request_id: str
    call_id: str
    tool: str
    command: str
    rule: Rule | None
    unattended: bool = False
    diff: str | None = None

    @property
    def short_id(self) -> str:
        return self.request_id[:8]

    @property
    def family(self) -> RuleFamily:
        return family_of(self.tool)

    @property
    def rule_text(self) -> str:
        if not self.rule:
            return ""
        return f"writes to {self.rule[0]}" if self.family == "files" else rule_text(self.rule)


__all__ = [
    "BASH",
    "WRITE_TOOLS",
    "ApprovalView",
    "Decision",
    "Rule",
    "RuleError",
    "RuleFamily",
    "bash_command",
    "command_words",
    "decide",
    "family_of",
    "is_simple",
    "matches",
    "may_ask",
    "parse_rule",
    "parse_rules",
    "rule_text",
    "session_rule",
]
