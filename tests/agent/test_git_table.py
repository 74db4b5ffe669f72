"""The git table (engine/git_safety.py) against the sandbox: every hostile repository of
tests/hostile_git.py, every git command a rule could allow, real git in real bubblewrap (and
the unconfined mode, which gets the same guard); nothing planted runs. Also: docs/security.md
shows the table as the module has it, and the sandbox's and the host's settings come from it."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from engine import git_safety
from engine.events import HumanSource
from engine.plan.gate import PlanGateView
from engine.tools import git_guard
from engine.tools.base import ToolContext
from engine.tools.bash import BashLimits, BashTool
from engine.tools.sandbox import SandboxSettings
from engine.worktree import git as host_git
from tests.hostile_git import HOSTILE, SANDBOX_COMMANDS, Plant, git

FAST = BashLimits(kill_grace_s=0.5)
DOCS = Path(__file__).resolve().parents[2] / "docs" / "security.md"
# Planted programs git runs only with a terminal, a server asking for a password, or the
# network: the control below cannot prove them without one (the table still covers them).
NEEDS_MORE = {
    "pager",
    "pager-log",
    "askpass",
    "credential",
    "credential-url",
    "difffilter",
}


# Planted through a setting the table leaves alone in the sandbox, for the reason it gives
# (a push to a repository of the agent's own runs that repository's hooks, in the sandbox,
# whatever the address is called).
SANDBOX_LEFT = {"insteadof": "url.<base>.insteadOf"}


def _repo(root: Path) -> Plant:
    ws = root / "ws"
    ws.mkdir()
    git(ws, "init", "-q", "-b", "main")
    git(ws, "config", "user.name", "Agent")
    git(ws, "config", "user.email", "agent@example.test")
    (ws / "a.txt").write_text("a\n")
    (ws / "b.txt").write_text("b\n")
    git(ws, "add", "-A")
    git(ws, "commit", "-qm", "first")
    git(ws, "tag", "base")
    (ws / "a.txt").write_text("a\nsecond\n")
    git(ws, "commit", "-qam", "second")
    (ws / ".git" / "info" / "exclude").write_text(".ran/\n")
    markers = ws / ".ran" / "m"
    markers.mkdir(parents=True)
    return Plant(repo=ws, tree=ws, markers=markers)


def _planted(tmp_path: Path, plant: Callable[[Plant], None]) -> Plant:
    p = _repo(tmp_path)
    plant(p)
    p.touch_all()
    p.planted()
    return p


def _script() -> str:
    # Each bounded: a command that waited for a terminal would hang the test, not fail it.
    steps = (f"timeout 20 {command} </dev/null" for command in SANDBOX_COMMANDS)
    return "; ".join(steps) + "; true"


async def _active(session_id: str) -> PlanGateView:
    return PlanGateView(state="active")


SANDBOX_PLANTS = [(name, plant) for name, plant in HOSTILE if name not in SANDBOX_LEFT]


def test_what_the_sandbox_leaves_alone_the_table_leaves_with_a_reason() -> None:
    for key in SANDBOX_LEFT.values():
        row = next(row for row in git_safety.TABLE if row.key == key)
        assert isinstance(row.sandbox, git_safety.Left) and row.sandbox.why


@pytest.mark.parametrize("confined", [True, False], ids=["bwrap", "unconfined"])
@pytest.mark.parametrize(("name", "plant"), SANDBOX_PLANTS, ids=[n for n, _ in SANDBOX_PLANTS])
async def test_no_planted_program_runs_in_the_sandbox(
    tmp_path: Path, name: str, plant: Callable[[Plant], None], confined: bool
) -> None:
    p = _planted(tmp_path, plant)
    tool = BashTool(limits=FAST, sandbox=SandboxSettings(enabled=confined), plan_view=_active)
    ctx = ToolContext(session_id="s1", workspace=p.tree, turn_id="t1", source=HumanSource())
    out = await tool.run({"command": _script()}, ctx)
    assert sorted(os.listdir(p.markers)) == [], out.content
    assert out.content.startswith("exit code 0"), out.content


@pytest.mark.parametrize(
    ("name", "plant"),
    [(n, f) for n, f in HOSTILE if n not in NEEDS_MORE],
    ids=[n for n, _ in HOSTILE if n not in NEEDS_MORE],
)
def test_each_planted_program_runs_under_plain_git(
    tmp_path: Path, name: str, plant: Callable[[Plant], None]
) -> None:
    """The control: without the table's settings the same commands do run each program,
    so the set proves something."""
    p = _planted(tmp_path, plant)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "LANG": "C",
        "EDITOR": "true",  # below core.editor: a planted editor still runs
    }
    subprocess.run(["bash", "-c", _script()], cwd=p.tree, env=env, capture_output=True, check=False)
    assert os.listdir(p.markers), f"{name}: the plain commands ran nothing"


def test_the_docs_show_the_table_as_the_module_has_it() -> None:
    assert git_safety.markdown_table() in DOCS.read_text(encoding="utf-8")


def test_both_contexts_are_generated_from_the_table() -> None:
    for row in git_safety.TABLE:
        if isinstance(row.sandbox, git_safety.Force):
            assert (row.key, row.sandbox.value) in git_guard.FIXED, row.key
        if isinstance(row.host, git_safety.Force):
            assert f"{row.key}={row.host.value}" in host_git.SAFE_CONFIG, row.key
        if isinstance(row.sandbox, git_safety.Blank):
            sample = row.key.replace("<", "").replace(">", "").lower()
            assert row.pattern() in git_guard.NAMED_GUARD and sample, row.key
        if isinstance(row.host, git_safety.Refuse):
            sample = row.key.replace("<", "X").replace(">", "").lower()
            listing = f"{sample}\nvalue"
            assert host_git.unsafe_config(listing) == [sample], row.key
    env = git_guard.git_env()
    assert int(env["GIT_CONFIG_COUNT"]) == len(git_guard.FIXED)
    # Every setting of the list is in the table.
    keys = {row.key for row in git_safety.TABLE}
    for wanted in (
        "submodule.<name>.update",
        "include.path",
        "includeIf.<condition>.path",
        "url.<base>.insteadOf",
        "credential.helper",
        "credential.<url>.helper",
        "core.attributesFile",
        "diff.external",
        "alias.<name>",
        "gpg.program",
        "filter.<name>.clean",
        "diff.<name>.textconv",
        "merge.<name>.driver",
        "core.fsmonitor",
        "core.hooksPath",
        "core.sshCommand",
        "core.pager",
        "core.editor",
        "core.askPass",
        "protocol.ext.allow",
        "core.worktree",
    ):
        assert wanted in keys, wanted
