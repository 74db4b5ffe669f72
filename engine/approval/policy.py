"""The tool approval policy: pure decisions over a call, the plan phase and the rules.

Which bash calls ask is ``PLANGATE_BASH_APPROVAL`` (:data:`BashApproval`):

- ``escalation`` (the default with the sandbox on): the sandbox is the boundary, so bash runs
  without asking; only leaving it asks: a call with ``network: true`` (the sandbox has no
  network otherwise), or a command that names a ``PLANGATE_ASK_BASH`` prefix anywhere in it
  (``git push``, ``rm -rf``; see :func:`names_ask_rule`);
- ``always`` (the default with ``PLANGATE_SANDBOX=off``): every bash call asks unless an allow
  rule matches; a network call and an ask-listed command ask all the same;
- ``never``: nothing asks; what ``escalation`` would ask about is denied.

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

from engine.tools.effects import BUILTIN, Effect, effects_of

Decision = Literal["allow", "deny", "ask"]
Rule = tuple[str, ...]
BashApproval = Literal["escalation", "always", "never"]
BASH_APPROVALS: tuple[BashApproval, ...] = ("escalation", "always", "never")
# Why a call asks, as the approval message says it.
Escalation = Literal["command", "network", "ask-rule", "write"]

# The effects the policy looks at (what a tool declares, engine.tools.effects): a ``shell``
# call follows the bash policy, a ``write`` asks with PLANGATE_ASK_WRITES; every other effect
# (reads, plan, todo, goal) is allowed here and left to the plan gate.
BASH = "bash"

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


# Programs that run code given as an argument, or run another program they are given:
# "Allow for this session" on one of these allows that exact command only, since a prefix
# (``python3``, ``env``, ``timeout 5``) would allow any code at all.
_RUNS_CODE = re.compile(
    r"(python|pypy|perl|ruby|php|lua|luajit|node|nodejs|tclsh|julia)[0-9.]*"
    r"|deno|bun|npx|uvx|pipx|R|Rscript|osascript|pwsh|powershell"
    r"|sh|bash|dash|zsh|ksh|mksh|fish|csh|tcsh|busybox"
    r"|awk|gawk|mawk|nawk|sed|gsed|find|env|xargs|parallel|watch|script"
    r"|sudo|doas|su|chroot|timeout|nice|ionice|nohup|stdbuf|setsid|flock|unbuffer"
    r"|exec|command|builtin|eval|time|strace|ltrace|gdb|nsenter|unshare"
)
# Programs that run the project's own configuration as code (``conftest.py``, ``package.json``
# scripts, a ``Makefile``): a rule for one trusts that configuration, which the agent may edit,
# and the approval message says so (docs/security.md).
_RUNS_PROJECT_CONFIG = re.compile(
    r"pytest|py\.test|tox|nox|hatch|poetry|pdm|uv|npm|yarn|pnpm|jest|vitest|mocha|make|gmake"
    r"|cargo|go|gradle|gradlew|mvn|mvnw|rake|bundle|rspec|phpunit|composer|dotnet|ctest|meson|ninja"
)
# Shells whose ``-c`` argument is a whole script: its content counts as a compound command.
_SHELLS = re.compile(r"sh|bash|dash|zsh|ksh|mksh|fish|csh|tcsh|busybox")
# Separators an ask-rule search splits on, besides the shell's own operators.
_ASK_SPLIT = str.maketrans({"`": ";", "\n": ";", "\r": ";"})


class RuleError(ValueError):
    """A rule that is empty or is not a plain list of words."""


def program(word: str) -> str:
    """A command's program as rules name it: ``/usr/bin/python3`` -> ``python3``."""
    return word.rstrip("/").rsplit("/", 1)[-1] if "/" in word else word


def runs_project_config(words: Sequence[str]) -> bool:
    """Whether the program is a test runner or build tool that runs the project's own
    configuration (``pytest`` imports ``conftest.py``): a rule for it trusts that configuration."""
    return bool(words) and _RUNS_PROJECT_CONFIG.fullmatch(program(words[0])) is not None


def runs_code(words: Sequence[str]) -> bool:
    """Whether the command's program runs code or programs it is given (see ``_RUNS_CODE``).

    ``git -c key=value ...`` counts too: a ``-c`` setting can name a command git runs.
    """
    if not words:
        return False
    name = program(words[0])
    if _RUNS_CODE.fullmatch(name):
        return True
    return name == "git" and len(words) > 1 and words[1].startswith("-")


def inline_script(words: Sequence[str]) -> bool:
    """A shell given a script with ``-c`` (``bash -c '...'``, ``sh -ec '...'``): compound."""
    if not words or not _SHELLS.fullmatch(program(words[0])):
        return False
    return any(w.startswith("-") and not w.startswith("--") and "c" in w for w in words[1:])


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


@dataclass(frozen=True, slots=True)
class SessionRule:
    """What "Allow for this session" adds: a prefix (``git status``), or, for a program that
    runs code it is given (``python3 -c ...``, ``env``, ``bash -c``), the exact command."""

    words: Rule
    exact: bool = False

    @property
    def text(self) -> str:
        return rule_text(self.words)


def session_rule(command: str) -> Rule | None:
    """The prefix "Allow for this session" would add: the program, and its subcommand if it
    has one. ``git status -s`` -> ``git status``; ``pytest tests/a.py`` -> ``pytest``.

    ``None`` for a command that is not simple (no rule could ever allow it). See
    :func:`offered_rule` for the rule actually offered (exact for interpreters and wrappers).
    """
    words = command_words(command)
    if not words:
        return None
    if len(words) > 1 and _SUBCOMMAND.fullmatch(words[1]):
        return (words[0], words[1])
    return (words[0],)


def offered_rule(command: str) -> SessionRule | None:
    """The rule "Allow for this session" adds for ``command``; ``None`` when none can.

    A program that runs code or other programs (:func:`runs_code`) gets the exact command, so
    allowing ``python3 x.py`` never allows ``python3 -c '...'``; anything else the prefix of
    :func:`session_rule`.
    """
    words = command_words(command)
    if not words:
        return None
    if runs_code(words) or inline_script(words):
        return SessionRule(tuple(words), exact=True)
    prefix = session_rule(command)
    return SessionRule(prefix) if prefix else None


def allowed_by(words: Sequence[str] | None, rules: Iterable[Sequence[str]]) -> bool:
    """A prefix rule allows a simple command that is not a shell running a ``-c`` script."""
    if not words or inline_script(words):
        return False
    return any(matches(rule, words) for rule in rules)


def names_ask_rule(command: str, rules: Sequence[Sequence[str]], *, depth: int = 0) -> bool:
    """Whether ``command`` names one of the ``PLANGATE_ASK_BASH`` prefixes anywhere in it.

    The command is split into its simple parts at ``; & | < > ( )``, backticks and newlines;
    a part whose words (``shlex``; a program path counts as its name) contain a rule's words
    in a row asks. Quoted words with spaces in them (a ``bash -c`` script, an ``eval``
    string) are searched the same way, a few levels deep. It errs on the side of asking
    (``echo git push`` asks too); it is a tripwire for honest mistakes, not a boundary: a
    command can always be spelled so no list names it, which is why the sandbox is the line.
    """
    if not rules or depth > 3:
        return False
    text = command.translate(_ASK_SPLIT).replace("$(", ";(")
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|<>()")
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        tokens = list(lexer)
    except ValueError:  # an unbalanced quote: search the bare words
        tokens = text.replace("'", " ").replace('"', " ").split()
    part: list[str] = []
    parts = [part]
    for token in tokens:
        if token and all(ch in ";&|<>()" for ch in token):
            part = []
            parts.append(part)
            continue
        part.append(program(token))
        if (" " in token or "\t" in token) and names_ask_rule(token, rules, depth=depth + 1):
            return True
    for words in parts:
        for rule in rules:
            n = len(rule)
            if n and any(tuple(words[i : i + n]) == tuple(rule) for i in range(len(words))):
                return True
    return False


def rule_text(rule: Sequence[str]) -> str:
    """A rule as the owner reads it (shell-quoted words)."""
    return " ".join(shlex.quote(w) for w in rule)


def bash_command(args: Mapping[str, Any]) -> str:
    """The ``command`` argument of a bash call ('' when missing)."""
    value = args.get("command")
    return value if isinstance(value, str) else ""


def wants_network(args: Mapping[str, Any]) -> bool:
    """A bash call asking for the network (``network: true``)."""
    return args.get("network") is True


def default_bash_approval(*, sandbox: bool) -> BashApproval:
    """``escalation`` with the sandbox on; ``always`` without it (nothing else confines bash)."""
    return "escalation" if sandbox else "always"


@dataclass(frozen=True, slots=True)
class BashPolicy:
    """The settings' part of the bash policy: the mode and its lists.

    ``network_on``: the sandbox gives every call the network (``PLANGATE_BASH_NETWORK``), so
    ``network: true`` asks for nothing more.
    """

    mode: BashApproval = "always"
    ask: tuple[Rule, ...] = ()
    network_on: bool = False


def escalation(
    args: Mapping[str, Any], *, policy: BashPolicy, network_rules: Iterable[Sequence[str]] = ()
) -> Escalation | None:
    """What a bash call asks for beyond the sandbox: ``network``, an ``ask-rule`` command, or
    nothing. ``network_rules``: exact commands the session allowed the network for."""
    command = bash_command(args)
    if names_ask_rule(command, policy.ask):
        return "ask-rule"
    if wants_network(args) and not policy.network_on:
        words = command_words(command)
        if words is None or tuple(words) not in {tuple(r) for r in network_rules}:
            return "network"
    return None


def may_ask(effects: Iterable[Effect], *, ask_writes: bool = False) -> bool:
    """Whether :func:`decide` can say anything but allow for a call with ``effects`` (cheap
    pre-check)."""
    found = set(effects)
    return "shell" in found or (ask_writes and "write" in found)


def tool_effects(
    tool: str, args: Mapping[str, Any], effects: Iterable[Effect] | None = None
) -> frozenset[Effect]:
    """``effects`` when given, else what plangate's own tool called ``tool`` declares."""
    return frozenset(effects) if effects is not None else effects_of(BUILTIN.get(tool), args)


def decide(
    tool: str,
    args: Mapping[str, Any],
    *,
    phase: str,
    rules: Iterable[Sequence[str]],
    policy: BashPolicy | None = None,
    exact_rules: Iterable[Sequence[str]] = (),
    network_rules: Iterable[Sequence[str]] = (),
    ask_writes: bool = False,
    write_target: str | None = None,
    write_rules: Iterable[str] = (),
    effects: Iterable[Effect] | None = None,
) -> Decision:
    """Allow, ask the owner, or deny one call that the plan gate already let through.

    ``bash`` follows ``policy.mode`` (the module docstring; ``always`` when no policy is
    given). A network call asks in every phase bash runs in (the network leaves the sandbox
    whatever the workspace mount); the rest only in NoPlan and Active: in pre-init Editing the
    plan gate and the sandbox keep bash read-only. ``rules`` are prefix rules, ``exact_rules``
    whole commands the session allowed. File writes inside the workspace are allowed, unless
    ``ask_writes``: then a write to ``write_target`` (workspace-relative; ``None`` for a path
    outside, which the tools refuse) asks unless the session allowed writes to that file.
    ``effects``: what the call does (its tool's declaration); plangate's own tool ``tool``'s
    when not given.
    """
    policy = policy or BashPolicy()
    does = tool_effects(tool, args, effects)
    if "shell" in does:
        escalates = escalation(args, policy=policy, network_rules=network_rules)
        if phase not in ASKING_PHASES and escalates != "network":
            return "allow"
        if escalates is not None:
            return "deny" if policy.mode == "never" else "ask"
        if policy.mode != "always":
            return "allow"
        words = command_words(bash_command(args))
        if allowed_by(words, rules):
            return "allow"
        granted = {tuple(r) for r in exact_rules}
        if wants_network(args):
            # The owner allowed this whole command with the network: that covers the command.
            granted |= {tuple(r) for r in network_rules}
        if words is not None and tuple(words) in granted:
            return "allow"
        return "ask"
    if phase not in ASKING_PHASES:
        return "allow"
    if "write" in does and ask_writes and write_target is not None:
        return "allow" if write_target in set(write_rules) else "ask"
    return "allow"


# Rule families: bash command prefixes (or exact commands), the exact commands allowed the
# network, and the files whose writes the session allowed.
RuleFamily = Literal["bash", "network", "files"]


def family_of(tool: str, effects: Iterable[Effect] | None = None) -> RuleFamily:
    """Which rules a tool's calls are matched against (a network call: see ApprovalView)."""
    return "files" if "write" in tool_effects(tool, {}, effects) else "bash"


@dataclass(frozen=True, slots=True)
class ApprovalView:
    """One request as the chat shows it. ``rule`` is what "Allow for this session" adds
    (``exact``: that whole command, not a prefix).

    ``command`` is the bash command, or ``<tool> <path>`` for a write, shown whole; ``diff``
    is the unified diff of a write to an existing text file (not logged: it can be large).
    ``why`` is what the call asks for; ``reason`` the model's own words for a network call.
    ``also``: on an unattended turn's one notice, the other commands it could not run.
    """

    request_id: str
    call_id: str
    tool: str
    command: str
    rule: Rule | None
    unattended: bool = False
    diff: str | None = None
    exact: bool = False
    why: Escalation = "command"
    reason: str = ""
    also: tuple[str, ...] = ()

    @property
    def short_id(self) -> str:
        return self.request_id[:8]

    @property
    def family(self) -> RuleFamily:
        if self.why == "network":
            return "network"
        if self.why == "write":
            return "files"
        return family_of(self.tool)

    @property
    def rule_text(self) -> str:
        if not self.rule:
            return ""
        if self.family == "files":
            return f"writes to {self.rule[0]}"
        return rule_text(self.rule)

    @property
    def trusts_project_config(self) -> bool:
        """The session rule names a test runner or build tool, so it trusts the project's
        test configuration (which the agent may have written)."""
        return self.family == "bash" and self.rule is not None and runs_project_config(self.rule)

    @property
    def rule_label(self) -> str:
        """What the session button adds, in words, before the press."""
        if not self.rule:
            return ""
        if self.family == "network":
            return "the network for this exact command"
        if self.exact:
            return "this exact command"
        return self.rule_text


__all__ = [
    "BASH",
    "BASH_APPROVALS",
    "ApprovalView",
    "BashApproval",
    "BashPolicy",
    "Decision",
    "Escalation",
    "Rule",
    "RuleError",
    "RuleFamily",
    "SessionRule",
    "allowed_by",
    "bash_command",
    "command_words",
    "decide",
    "default_bash_approval",
    "escalation",
    "family_of",
    "inline_script",
    "is_simple",
    "matches",
    "may_ask",
    "names_ask_rule",
    "offered_rule",
    "parse_rule",
    "parse_rules",
    "program",
    "rule_text",
    "runs_code",
    "runs_project_config",
    "session_rule",
    "tool_effects",
    "wants_network",
]
