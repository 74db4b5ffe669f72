"""A built environment is kept and reused for the next worktree of the same project with the
same script and dependency files (docs/environments.md): copied in, its old worktree's path
rewritten, so an editable install imports the new worktree's code. Real pip, real venv."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from engine.environments import environment_key, restore_copy, save_copy
from engine.worktree.script import script_of
from tests.telegram.test_app_environments import (
    BROKEN,
    PYPROJECT,
    SYSTEM_PYTHON,
    TEST,
    wheels,  # noqa: F401 - the module's fixture: pytest's wheels, fetched once
)

EDITABLE = ("-e", ".", "pytest")
SCRIPT = script_of("python3 -m venv .venv && .venv/bin/pip install -e . pytest\n")


def _project(root: Path) -> Path:
    for name, text in {
        "pyproject.toml": PYPROJECT,
        "src/calc/__init__.py": BROKEN,
        "tests/test_calc.py": TEST,
    }.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def _pytest(root: Path) -> str:
    done = subprocess.run(
        [".venv/bin/python", "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"},
    )
    return done.stdout


def test_a_kept_environment_works_in_the_next_worktree_and_imports_its_code(
    tmp_path: Path,
    wheels: Path,  # noqa: F811
) -> None:
    first = _project(tmp_path / "worktrees" / "fix-add-1a2b3c4d")
    subprocess.run(
        [SYSTEM_PYTHON, "-m", "venv", ".venv"], cwd=first, check=True, capture_output=True
    )
    subprocess.run(
        [".venv/bin/pip", "install", "-q", "--no-index", "--find-links", str(wheels), *EDITABLE],
        cwd=first,
        check=True,
        capture_output=True,
        env={"PATH": "/usr/bin:/bin", "PIP_CONFIG_FILE": "/dev/null", "HOME": str(tmp_path)},
    )
    kept = tmp_path / "home" / "built" / "calc" / environment_key(first, SCRIPT)
    save_copy(kept, first, [".venv"])
    # The next plan's worktree: another path, the code fixed there.
    second = _project(tmp_path / "worktrees" / "fix-add-again-5e6f7a8b")
    (second / "src/calc/__init__.py").write_text(BROKEN.replace("a - b", "a + b"))
    assert environment_key(second, SCRIPT) == kept.name
    assert restore_copy(kept, second) == [".venv"]
    # Its pytest runs from its own .venv and imports its own src/, not the first worktree's.
    shutil.rmtree(first)
    assert "1 passed" in _pytest(second)
    # Another dependency file: another key (the script runs instead of the copy).
    (second / "pyproject.toml").write_text(PYPROJECT + "\n# pinned\n")
    assert environment_key(second, SCRIPT) != kept.name


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
    )


def test_a_kept_copy_never_lands_through_a_committed_symlink(tmp_path: Path) -> None:
    """The key is the script and the dependency files, so a commit that turns ``src`` into a
    symlink (the agent can commit in NoPlan) still reuses the copy: its ``src/calc.egg-info``
    would be written on the host wherever the link points (plangate's own site-packages, a
    ``.pth`` there runs at its next start). Such a worktree runs the script instead."""
    first = _project(tmp_path / "worktrees" / "fix-add-1a2b3c4d")
    (first / ".venv/bin").mkdir(parents=True)
    (first / ".venv/bin/python").write_text("#!/bin/sh\n")
    (first / "src/calc.egg-info").mkdir()
    (first / "src/calc.egg-info/PKG-INFO").write_text(f"Name: calc\n{first}\n")
    (first / "src/evil.pth").write_text("import os; os.system('touch /tmp/owned')\n")
    kept = tmp_path / "home" / "built" / "calc" / environment_key(first, SCRIPT)
    save_copy(kept, first, [".venv", "src/calc.egg-info", "src/evil.pth"])
    # The project as the agent committed it: src is a link to a folder outside it.
    outside = tmp_path / "plangate-venv" / "site-packages"
    outside.mkdir(parents=True)
    repo = _project(tmp_path / "project")
    shutil.rmtree(repo / "src")
    (repo / "src").symlink_to(outside)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "src is a link")
    second = tmp_path / "worktrees" / "fix-add-again-5e6f7a8b"
    _git(repo, "worktree", "add", "-q", "-b", "plan", str(second))
    assert (second / "src").is_symlink()
    assert environment_key(second, SCRIPT) == kept.name
    assert restore_copy(kept, second) is None
    assert list(outside.iterdir()) == []
    assert not (second / ".venv").exists()  # nothing half-restored: the script runs instead


def test_a_huge_dependency_file_is_never_read_whole(tmp_path: Path) -> None:
    """The owner's /setup in a live worktree keys the copy on the worktree's dependency files,
    which the plan writes: a sparse 8 GB package.json (no disk used) must not be read into
    plangate's memory, and no copy is kept for it. Under a 1.5 GB address-space limit."""
    import sys

    with (tmp_path / "package.json").open("wb") as fh:
        fh.truncate(8 * 1024**3)
    probe = (
        "import resource, sys\n"
        "from pathlib import Path\n"
        "from engine.environments import environment_key\n"
        "from engine.worktree.script import script_of\n"
        "resource.setrlimit(resource.RLIMIT_AS, (1536 * 1024**2, 1536 * 1024**2))\n"
        "print(repr(environment_key(Path(sys.argv[1]), script_of('npm ci\\n'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0, done.stderr[-500:]
    assert done.stdout.strip() == "''"  # no key: the script runs, nothing is kept


def test_a_huge_file_in_a_kept_copy_is_never_read_whole(tmp_path: Path) -> None:
    """Putting a copy in rewrites the old worktree's path in the files that name it; what a
    setup built comes from the project's own install code, which can leave a sparse 8 GB
    file (no disk used): it is not read into plangate's memory. Under a 1.5 GB limit."""
    import sys

    big = tmp_path / ".venv" / "lib" / "blob"
    big.parent.mkdir(parents=True)
    with big.open("wb") as fh:
        fh.truncate(8 * 1024**3)
    probe = (
        "import resource, sys\n"
        "from pathlib import Path\n"
        "from engine.environments import _rewrite\n"
        "resource.setrlimit(resource.RLIMIT_AS, (1536 * 1024**2, 1536 * 1024**2))\n"
        "_rewrite(Path(sys.argv[1]), b'/old/worktree', b'/new/worktree')\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(big)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0, done.stderr[-500:]
