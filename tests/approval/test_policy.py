"""The approval policy, pure: prefix rules on parsed words, compound commands never allowed."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.approval.policy import (
    RuleError,
    command_words,
    decide,
    is_simple,
    matches,
    parse_rule,
    parse_rules,
    session_rule,
)

RULES = parse_rules("pytest,git status,git diff,ls")


def bash(command: str, *, phase: str = "active") -> str:
    return decide("bash", {"command": command}, phase=phase, rules=RULES)


def test_rules_parse_into_words() -> None:
    assert RULES == (("pytest",), ("git", "status"), ("git", "diff"), ("ls",))
    assert parse_rules(" pytest , ,git  status ") == (("pytest",), ("git", "status"))
    assert parse_rule("'my tool' run") == ("my tool", "run")


@pytest.mark.parametrize("text", ["", "   ", "ls; rm", "ls && rm", "echo $HOME", "a|b", "x > y"])
def test_a_rule_that_is_not_a_plain_prefix_is_refused(text: str) -> None:
    with pytest.raises(RuleError):
        parse_rule(text)


@pytest.mark.parametrize(
    "command",
    [
        "ls",
        "ls -la src",
        "pytest tests/a.py -q",
        "git status --porcelain",
        "git   diff HEAD~1",
        "git status 'a;b'",  # the ; is inside single quotes: an argument, not an operator
        'git diff "a|b"',  # a | inside double quotes is literal too
        "ls \\;",  # an escaped ; is a literal argument
    ],
)
def test_a_simple_command_with_an_allowed_prefix_runs(command: str) -> None:
    assert bash(command) == "allow"


@pytest.mark.parametrize(
    "command",
    [
        "ls; rm -rf x",
        "ls && rm -rf x",
        "ls || rm -rf x",
        "ls | sh",
        "ls & rm -rf x",
        "ls > out.txt",
        "ls < in.txt",
        "ls $(rm -rf x)",
        "ls `rm -rf x`",
        'ls "$(rm -rf x)"',  # substitution still runs inside double quotes
        'ls "`rm -rf x`"',
        "ls ${IFS}x",
        "ls\nrm -rf x",
        "ls <(rm -rf x)",
        "(ls)",
        "ls 'unterminated",
        "ls \\",
    ],
)
def test_a_compound_command_never_slips_through_a_prefix_rule(command: str) -> None:
    assert command_words(command) is None
    assert bash(command) == "ask"


@pytest.mark.parametrize(
    "command",
    [
        "lsblk",  # words, not substrings
        "git statusx",
        "git",
        "echo ls",
        "rm -rf x",
        "/bin/ls",  # another program path is another program
        "FOO=1 ls",
        "",
    ],
)
def test_commands_the_rules_do_not_name_ask(command: str) -> None:
    assert bash(command) == "ask"


def test_only_bash_in_noplan_and_active_asks() -> None:
    assert bash("rm -rf x", phase="none") == "ask"
    assert bash("rm -rf x", phase="pre_init") == "allow"  # the plan gate and sandbox rule there
    assert decide("write_file", {"path": "a.py"}, phase="active", rules=()) == "allow"
    assert decide("edit_file", {"path": "a.py"}, phase="none", rules=()) == "allow"
    assert decide("read_file", {"path": "a.py"}, phase="active", rules=()) == "allow"
    assert decide("bash", {}, phase="active", rules=RULES) == "ask"


def test_the_session_rule_is_the_program_and_its_subcommand() -> None:
    assert session_rule("git status -s") == ("git", "status")
    assert session_rule("npm run build") == ("npm", "run")
    assert session_rule("pytest tests/a.py") == ("pytest",)
    assert session_rule("python3 test_greet.py") == ("python3",)
    assert session_rule("mkdir -p d1") == ("mkdir",)
    assert session_rule("ls; rm -rf x") is None  # no rule could allow it: nothing to offer


def test_matching_is_word_by_word() -> None:
    assert matches(("git", "status"), ["git", "status", "-s"])
    assert not matches(("git", "status"), ["git"])
    assert not matches((), ["ls"])
    assert is_simple("echo 'a $b `c`'")
    assert not is_simple('echo "a $b"')


def test_with_writes_asking_a_write_inside_asks_unless_its_file_is_allowed() -> None:
    def write(target: str | None, *, phase: str = "active", allowed: tuple[str, ...] = ()) -> str:
        return decide(
            "write_file",
            {"path": "x"},
            phase=phase,
            rules=RULES,
            ask_writes=True,
            write_target=target,
            write_rules=allowed,
        )

    assert write("src/a.py") == "ask"
    assert write("src/a.py", allowed=("src/a.py",)) == "allow"
    assert write("src/a.py", allowed=("src/b.py",)) == "ask"
    assert write(None) == "allow"  # outside the workspace: the tools refuse it themselves
    assert write("src/a.py", phase="post_init") == "allow"  # the plan gate rules Editing


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=" \t\u00a0abc-=#*~./{}'\"\\;$", max_size=30))
def test_words_are_exactly_shlex_words_for_every_simple_command(command: str) -> None:
    words = command_words(command)
    if words is None:
        return
    assert words == shlex.split(command, comments=False, posix=True)
