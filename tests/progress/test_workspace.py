"""The workspace snapshot: real files, real git; the repository's own code never runs."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from engine.progress.workspace import snapshot, walk_digest

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _git(root: Path, *args: str) -> None:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", *args], cwd=root, check=True, env=env, capture_output=True)


def _repo(root: Path) -> Path:
    root.mkdir()
    _git(root, "init", "-q")
    (root / "a.py").write_text("A = 1\n")
    _git(root, "add", "a.py")
    _git(root, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init")
    return root


async def test_a_repository_edit_counts_each_time_even_to_an_already_modified_file(
    tmp_path: Path,
) -> None:
    root = _repo(tmp_path / "repo")
    clean = await snapshot(root)
    assert clean.startswith("git:")
    (root / "a.py").write_text("A = 2\n")
    once = await snapshot(root)
    assert once != clean
    # git status still says " M a.py": the size and mtime tell the second edit apart.
    (root / "a.py").write_text("A = 33\n")
    assert await snapshot(root) != once
    (root / "new" / "deep").mkdir(parents=True)
    before = await snapshot(root)
    (root / "new" / "deep" / "b.txt").write_text("b")
    assert await snapshot(root) != before
    # Nothing changed: the same digest.
    assert await snapshot(root) == await snapshot(root)


async def test_git_runs_none_of_the_repositorys_configured_code(tmp_path: Path) -> None:
    root = _repo(tmp_path / "repo")
    marker = tmp_path / "ran"
    hook = tmp_path / "evil.sh"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    hook.chmod(0o755)
    # What the agent could write into .git/config: an fsmonitor and a hooks folder.
    _git(root, "config", "core.fsmonitor", str(hook))
    _git(root, "config", "core.hooksPath", str(tmp_path))
    (root / "a.py").write_text("A = 2\n")
    assert (await snapshot(root)).startswith("git:")
    assert not marker.exists()


async def test_a_repository_with_a_filter_driver_is_walked_instead(tmp_path: Path) -> None:
    root = _repo(tmp_path / "repo")
    marker = tmp_path / "filtered"
    _git(root, "config", "filter.evil.clean", f"touch {marker}; cat")
    (root / ".gitattributes").write_text("*.py filter=evil\n")
    (root / "a.py").write_text("A = 2\n")
    first = await snapshot(root)
    assert first.startswith("walk:")
    assert not marker.exists()
    (root / "a.py").write_text("A = 22\n")
    assert await snapshot(root) != first


async def test_a_filter_in_config_worktree_never_runs_and_is_walked_instead(
    tmp_path: Path,
) -> None:
    # What bash in the workspace can plant without touching .git/config's driver keys:
    # git reads .git/config.worktree once extensions.worktreeConfig is on.
    root = _repo(tmp_path / "repo")
    marker = tmp_path / "filtered"
    script = root / ".git" / "evil.sh"
    script.write_text(f"#!/bin/sh\ntouch {marker}\ncat\n")
    script.chmod(0o755)
    _git(root, "config", "core.repositoryformatversion", "1")
    _git(root, "config", "extensions.worktreeConfig", "true")
    (root / ".git" / "config.worktree").write_text(f'[filter "evil"]\n\tclean = {script}\n')
    (root / ".git" / "info").mkdir(exist_ok=True)
    (root / ".git" / "info" / "attributes").write_text("a.py filter=evil\n")
    # Same content, another mtime: git must read the file again (through the filter).
    os.utime(root / "a.py", (1_500_000_000, 1_500_000_000))
    assert (await snapshot(root)).startswith("walk:")
    assert not marker.exists()


async def test_outside_a_repository_sizes_and_mtimes_are_compared(tmp_path: Path) -> None:
    root = tmp_path / "plain"
    (root / "src").mkdir(parents=True)
    (root / "src" / "m.py").write_text("x")
    first = await snapshot(root)
    assert first.startswith("walk:")
    (root / "src" / "m.py").write_text("xy")
    second = await snapshot(root)
    assert second != first
    (root / "src" / "m.py").unlink()
    assert await snapshot(root) != second


def test_the_walk_is_bounded(tmp_path: Path) -> None:
    for k in range(30):
        (tmp_path / f"f{k}").write_text("x")
    bounded = walk_digest(tmp_path, max_entries=10)
    # Beyond the bound a change is not seen (and the walk stays cheap).
    (tmp_path / "f29").write_text("changed")
    assert walk_digest(tmp_path, max_entries=10) == bounded
    assert walk_digest(tmp_path) != bounded


async def test_a_workspace_below_the_repository_top_sees_its_own_edits(tmp_path: Path) -> None:
    root = _repo(tmp_path / "repo")
    workspace = root / "app"
    workspace.mkdir()
    (workspace / "m.py").write_text("x = 1\n")
    _git(root, "add", "app/m.py")
    _git(root, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "app")
    (workspace / "m.py").write_text("x = 2\n")
    once = await snapshot(workspace)
    assert once.startswith("git:")
    # The same file again: git status is unchanged, its size and mtime are not.
    (workspace / "m.py").write_text("x = 333\n")
    assert await snapshot(workspace) != once
    # A change outside the workspace (elsewhere in the repository) is not the task's.
    twice = await snapshot(workspace)
    (root / "a.py").write_text("A = 9\n")
    assert await snapshot(workspace) == twice
