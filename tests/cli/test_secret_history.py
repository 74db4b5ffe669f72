"""What git stores is no side door (docs/security.md, "Git"): a PLANGATE_SECRET_FILES path
tracked anywhere in a repository's history (a commit on any branch, a reflog entry, the index)
is readable through git show, git log -p or the pack files whatever the sandbox masks, so
`plangate run` and `doctor` refuse that workspace or project, naming the path and the fix.
Real git, and `plangate run` as a real process."""

from __future__ import annotations

from pathlib import Path

from bot.runner import install_problems
from bot.settings import load_settings
from engine.worktree.git import tracked_secrets
from tests.cli.test_cli import _plangate
from tests.cli.test_host_install import _run_env
from tests.fakebot.server import FakeBotApi
from tests.projects.support import git, make_repo

SECRET = "config/secrets.yml"


def _committed_then_removed(path: Path) -> Path:
    repo = make_repo(path, {"app.py": "print('hi')\n", SECRET: "token: hunter2\n"})
    git(repo, "rm", "-q", "--cached", SECRET)
    (repo / ".gitignore").write_text("config/secrets.yml\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-qm", "stop tracking the secret")  # still in the first commit
    return repo


def test_a_secret_anywhere_in_the_history_is_found(tmp_path: Path) -> None:
    repo = _committed_then_removed(tmp_path / "a")
    assert tracked_secrets(repo, (SECRET,)) == [SECRET]
    assert tracked_secrets(repo, (str(repo / SECRET),)) == [SECRET]  # an absolute setting
    clean = make_repo(tmp_path / "b", {"app.py": "x\n"})
    (clean / "config").mkdir()
    (clean / SECRET).write_text("token: hunter2\n")  # on disk, never tracked
    assert tracked_secrets(clean, (SECRET,)) == []
    git(clean, "checkout", "-q", "-b", "other")
    git(clean, "add", "-f", SECRET)
    assert tracked_secrets(clean, (SECRET,)) == [SECRET]  # only in the index
    git(clean, "commit", "-qm", "oops")
    git(clean, "checkout", "-q", "main")
    assert tracked_secrets(clean, (SECRET,)) == [SECRET]  # on another branch


async def test_run_refuses_a_workspace_whose_history_holds_a_secret(
    tmp_path: Path, fake_api: FakeBotApi
) -> None:
    workspace = _committed_then_removed(tmp_path / "work")
    env = _run_env(fake_api, tmp_path / "home", workspace, PLANGATE_SECRET_FILES=SECRET)
    code, out, err = await _plangate("run", cwd=tmp_path, env=env)
    assert code == 2 and out == ""
    [line] = err.strip().splitlines()
    assert line.startswith(
        f"plangate: PLANGATE_WORKSPACE: {workspace} has PLANGATE_SECRET_FILES in its git "
        f"history ({SECRET})"
    )
    assert "git rm --cached" in line and "or do not list it" in line
    # A listed project the same way; a secret that was never tracked is fine.
    clean = make_repo(tmp_path / "clean", {"app.py": "x\n"})
    settings = {
        "PLANGATE_HOME": str(tmp_path / "home"),
        "PLANGATE_WORKSPACE": str(clean),
        "PLANGATE_PROJECTS": f"old={workspace}",
        "PLANGATE_SECRET_FILES": SECRET,
    }
    [problem] = install_problems(load_settings(settings, env_file=None))
    assert problem.startswith(f"PLANGATE_PROJECTS old: {workspace} has PLANGATE_SECRET_FILES")
