"""Git in the sandbox runs none of the commands the repository's files name: one trick each,
real git, real bubblewrap (and the unconfined mode, which gets the same guard)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from engine.events import HumanSource
from engine.plan.gate import PlanGateView
from engine.tools.base import ToolContext
from engine.tools.bash import BashLimits, BashTool
from engine.tools.sandbox import SandboxSettings

FAST = BashLimits(kill_grace_s=0.5)
COMMIT = "git -c user.name=a -c user.email=a@b commit -qam change"


def ctx(ws: Path) -> ToolContext:
    return ToolContext(session_id="s1", workspace=ws, turn_id="t1", source=HumanSource())


async def active(session_id: str) -> PlanGateView:
    return PlanGateView(state="active")


def git(ws: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=ws, check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    git(ws, "init", "-q")
    (ws / "important.txt").write_text("keep me\n")
    (ws / "f.txt").write_text("one\n")
    git(ws, "add", ".")
    git(ws, "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qm", "init")
    return ws


# (what the agent writes into the repository's config, the command a rule allows, marker)
TRICKS = [
    ({"core.fsmonitor": "touch ran; rm -f important.txt"}, "git status", None),
    ({"filter.evil.clean": "touch ran; cat"}, "git status", "* filter=evil\n"),
    ({"filter.my evil.process": "touch ran"}, "git status", "* filter=my\\ evil\n"),
    ({"diff.evil.textconv": "touch ran; cat"}, "git diff", "* diff=evil\n"),
    ({"diff.evil.command": "touch ran"}, "git diff", "* diff=evil\n"),
    ({"alias.st": "!touch ran"}, "git st", None),
    ({"core.pager": "touch ran; cat"}, "git log -1", None),
    ({"diff.external": "touch ran"}, "git diff", None),
    ({"core.hooksPath": ".hooks"}, COMMIT, None),
    ({}, COMMIT, None),  # .git/hooks/pre-commit
    ({"core.editor": "touch ran; true"}, "git -c user.name=a -c user.email=a@b commit -a", None),
]


async def test_a_plain_repository_diffs_as_always(repo: Path) -> None:
    (repo / "f.txt").write_text("two\n")
    tool = BashTool(limits=FAST, plan_view=active)
    out = await tool.run({"command": "git diff"}, ctx(repo))
    assert out.content.startswith("exit code 0\ndiff --git a/f.txt b/f.txt"), out.content
    assert "-one\n+two" in out.content


@pytest.mark.parametrize("confined", [True, False])
@pytest.mark.parametrize(("config", "command", "attributes"), TRICKS)
async def test_a_command_the_repository_names_never_runs(
    repo: Path, config: dict[str, str], command: str, attributes: str | None, confined: bool
) -> None:
    for key, value in config.items():
        git(repo, "config", key, value)
    if attributes is not None:
        (repo / ".gitattributes").write_text(attributes)
    for hooks in (repo / ".git" / "hooks", repo / ".hooks"):
        hooks.mkdir(exist_ok=True)
        hook = hooks / "pre-commit"
        hook.write_text("#!/bin/sh\ntouch ran\n")
        hook.chmod(0o755)
    (repo / "f.txt").write_text("two\n")  # a change for status, diff and commit to see
    os.utime(repo / "important.txt", (0, 0))  # racy-clean: status re-reads (and would filter)
    sandbox = SandboxSettings(enabled=confined)
    tool = BashTool(limits=FAST, sandbox=sandbox, plan_view=active)
    out = await tool.run({"command": command}, ctx(repo))
    assert not (repo / "ran").exists(), out.content
    assert (repo / "important.txt").read_text() == "keep me\n"
    if command == "git status" or "textconv" in str(config):
        assert out.content.startswith("exit code 0"), out.content  # git itself still works
