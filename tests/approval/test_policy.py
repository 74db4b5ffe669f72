"""The approval policy, pure: prefix rules on parsed words, compound commands never allowed."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.approval.policy import (
    BashPolicy,
    RuleError,
    command_words,
    decide,
    default_bash_approval,
    is_simple,
    matches,
    offered_rule,
    parse_rule,
    parse_rules,
    runs_project_config,
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


ESCALATION = BashPolicy(mode="escalation", ask=parse_rules("git push,rm -rf"))


def escalated(command: str, *, network: bool = False, policy: BashPolicy = ESCALATION) -> str:
    args: dict[str, object] = {"command": command}
    if network:
        args["network"] = True
    return decide("bash", args, phase="active", rules=(), policy=policy)


def test_in_escalation_mode_the_sandbox_is_the_boundary() -> None:
    assert escalated("pytest -q") == "allow"
    assert escalated("git diff; rm build/x") == "allow"  # compound is fine inside the sandbox
    assert escalated("pip install x", network=True) == "ask"
    assert escalated("pip install x", network=True, policy=BashPolicy("escalation", (), True)) == (
        "allow"  # PLANGATE_BASH_NETWORK: every call has the network already
    )
    # network asks even before plan init (it leaves the sandbox whatever the mount)
    assert (
        decide(
            "bash",
            {"command": "curl x", "network": True},
            phase="pre_init",
            rules=(),
            policy=ESCALATION,
        )
        == "ask"
    )
    assert decide("bash", {"command": "git push"}, phase="pre_init", rules=(), policy=ESCALATION)
    never = BashPolicy(mode="never", ask=ESCALATION.ask)
    assert escalated("pytest -q", policy=never) == "allow"
    assert escalated("git push", policy=never) == "deny"
    assert escalated("curl x", network=True, policy=never) == "deny"
    assert default_bash_approval(sandbox=True) == "escalation"
    assert default_bash_approval(sandbox=False) == "always"


@pytest.mark.parametrize(
    "command",
    [
        "git push",
        "git push origin main",
        "ls && git push",
        "make; git push -f",
        "echo $(git push)",
        "echo `git push`",
        "bash -c 'git push'",
        'sh -c "cd x && rm -rf build"',
        "/usr/bin/git push",
        "env GIT_DIR=x git push",
        "timeout 5 rm -rf build",
        "(cd sub && git push)",
        "git status\ngit push",
    ],
)
def test_an_ask_listed_prefix_asks_wherever_it_stands(command: str) -> None:
    assert escalated(command) == "ask"
    always = BashPolicy(mode="always", ask=ESCALATION.ask)
    # An allow rule never beats the ask list.
    assert decide("bash", {"command": command}, phase="none", rules=[("git",)], policy=always) == (
        "ask"
    )


@pytest.mark.parametrize("command", ["git pull", "git status", "rm x", "rm -r build"])
def test_commands_the_ask_list_does_not_name_run(command: str) -> None:
    assert escalated(command) == "allow"


@pytest.mark.parametrize(
    ("command", "rule", "exact"),
    [
        ("pytest tests/a.py", ("pytest",), False),
        ("git status -s", ("git", "status"), False),
        ("python3 x.py", ("python3", "x.py"), True),
        ("python3 -c 'print(1)'", ("python3", "-c", "print(1)"), True),
        ("bash -c 'ls'", ("bash", "-c", "ls"), True),
        ("node -e 1", ("node", "-e", "1"), True),
        ("perl -e 1", ("perl", "-e", "1"), True),
        ("env A=1 ls", ("env", "A=1", "ls"), True),
        ("timeout 5 ls", ("timeout", "5", "ls"), True),
        ("find . -delete", ("find", ".", "-delete"), True),
        ("sed -i s/a/b/ f", ("sed", "-i", "s/a/b/", "f"), True),
        ("/usr/bin/python3.11 x.py", ("/usr/bin/python3.11", "x.py"), True),
        ("git -c core.pager=x log", ("git", "-c", "core.pager=x", "log"), True),
    ],
)
def test_session_rules_never_widen_to_code(
    command: str, rule: tuple[str, ...], exact: bool
) -> None:
    offered = offered_rule(command)
    assert offered is not None and offered.words == rule and offered.exact is exact


def test_an_exact_rule_allows_that_command_and_nothing_longer() -> None:
    def ask(command: str) -> str:
        return decide(
            "bash",
            {"command": command},
            phase="active",
            rules=(),
            exact_rules=[("python3", "x.py")],
        )

    assert ask("python3 x.py") == "allow"
    assert ask("python3  'x.py'") == "allow"  # the same words
    assert ask("python3 x.py --evil") == "ask"
    assert ask("python3 -c 'print(1)'") == "ask"


def test_a_shell_script_in_dash_c_is_compound_for_prefix_rules() -> None:
    assert decide("bash", {"command": "bash -c 'ls; rm x'"}, phase="active", rules=[("bash",)]) == (
        "ask"
    )
    assert decide("bash", {"command": "bash x.sh"}, phase="active", rules=[("bash",)]) == "allow"


@pytest.mark.parametrize(
    ("command", "trusts"),
    [
        ("pytest -q", True),
        ("/usr/bin/pytest tests", True),
        ("npm test", True),
        ("make check", True),
        ("cargo test", True),
        ("git status", False),
        ("ls -la", False),
        ("", False),
    ],
)
def test_a_test_runner_or_build_tool_runs_the_projects_own_configuration(
    command: str, trusts: bool
) -> None:
    assert runs_project_config(command_words(command) or ()) is trusts
