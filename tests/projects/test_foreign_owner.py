"""A project that belongs to another user (a volume mounted into a container: the host's uid
owns it, plangate runs as its own): git's "dubious ownership" refusal must not turn plangate's
worktrees off, nor the agent's git in the sandbox. Exactly that folder is trusted, never "*"."""

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
from engine.worktree.git import Git
from tests.projects.support import make_repo

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
STRANGER_UID = 12345


def foreign_repo(tmp_path: Path) -> Path:
    repo = make_repo(tmp_path / "mounted", {"app.py": "print('hi')\n"})
    subprocess.run(["chown", "-R", f"{STRANGER_UID}:{STRANGER_UID}", str(repo)], check=True)
    # git itself, as this user and without plangate's trust, refuses it.
    plain = subprocess.run(
        ["git", "status"],
        cwd=repo,
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), "GIT_CONFIG_NOSYSTEM": "1"},
    )
    assert "dubious ownership" in plain.stderr
    return repo


async def test_plangate_s_git_works_on_a_repository_another_user_owns(tmp_path: Path) -> None:
    repo = foreign_repo(tmp_path)
    git = await Git.discover(repo)
    assert git is not None and git.work_tree == repo
    assert len(await git.out("rev-parse", "HEAD")) == 40
    # Only that folder: a second foreign repository beside it is not trusted through it.
    other = foreign_repo(tmp_path / "b")
    result = await git._exec("status", check=False, cwd=other)  # noqa: SLF001
    assert not result.ok and "dubious ownership" in result.err


async def active(session_id: str) -> PlanGateView:
    return PlanGateView(state="active")


async def test_the_agent_s_git_in_the_sandbox_works_there_too(tmp_path: Path) -> None:
    repo = foreign_repo(tmp_path)
    tool = BashTool(
        limits=BashLimits(kill_grace_s=0.5), sandbox=SandboxSettings(), plan_view=active
    )
    context = ToolContext(session_id="s1", workspace=repo, turn_id="t1", source=HumanSource())
    out = await tool.run({"command": "git status --short && git log --oneline | wc -l"}, context)
    assert out.content.startswith("exit code 0"), out.content
    assert "dubious" not in out.content
