"""Which files a check depends on, and which of them changed (docs/checks.md "changed tests").

A check's watched paths are its arguments that name a file or folder inside the workspace
(``pytest -q tests/test_health.py`` watches that file, ``python3 -m unittest discover -s tests``
the folder, ``python3 check.py`` the script). A check that names none watches the workspace's
test files: files named ``test_*``, ``*_test.*``, ``*.test.*``, ``*.spec.*`` or ``conftest.py``,
and everything under a folder named ``test`` or ``tests``. A snapshot maps each watched file
(workspace-relative, ``/``-separated) to the SHA-256 of its bytes; the plan's is taken when the
owner approves, and comparing it with a later one names the files the agent changed (a test
edited to pass shows up on the Done card). Only regular files are hashed: a FIFO, a device or
a socket in the workspace is skipped, every file is opened non-blocking and at most
:data:`MAX_FILE_BYTES` of it read. Blocking file IO: call it from a thread.
"""

from __future__ import annotations

import fnmatch
import os
import shlex
import stat
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from engine.tools.workspace import is_within, real_path, sha256_regular

# At most this many files are hashed per snapshot; a bigger tree is cut (in path order).
MAX_FILES = 2000
# At most this many bytes of one file are read for its hash (its size counts as well).
MAX_FILE_BYTES = 64 * 1024 * 1024
# Folders never walked: tool caches, dependencies, version control.
SKIP_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".venv",
        "venv",
        "node_modules",
        "__pycache__",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".tox",
        ".nox",
    }
)
TEST_FILE_PATTERNS = ("test_*", "*_test.*", "*.test.*", "*.spec.*", "conftest.py")
TEST_DIRS = frozenset({"test", "tests"})
# Files that decide what a check runs: the runners' configuration, and modules that shadow a
# runner or run at every interpreter start when a plan puts them on the import path. Always
# watched, wherever they are; the Done card names them apart from the tests.
RUNNER_CONFIG = frozenset(
    {"conftest.py", "pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml", "package.json"}
    | {"Makefile", "makefile", "GNUmakefile"}
)
RUNNER_SHADOWS = frozenset({"unittest.py", "pytest.py", "sitecustomize.py", "usercustomize.py"})
# What the project's setup installs from (docs/environments.md): consent covers the script's
# text, so the owner sees these when a plan moved them.
LOCK_FILES = frozenset(
    {"package-lock.json", "npm-shrinkwrap.json", "yarn.lock", "pnpm-lock.yaml", "uv.lock"}
    | {"poetry.lock", "Pipfile", "Pipfile.lock", "go.mod", "go.sum", "Cargo.toml", "Cargo.lock"}
)
SETUP_SCRIPT = ".plangate/setup.sh"
# An argument with one of these endings names a file even before it exists (a test the plan
# adds): the watched set is then the same at approval and at completion.
_FILE_SUFFIXES = frozenset(
    {".py", ".js", ".mjs", ".cjs", ".ts", ".tsx", ".jsx", ".go", ".rs", ".rb", ".sh", ".java"}
)


def _words(command: str) -> list[str]:
    try:
        return shlex.split(command)
    except ValueError:  # an unbalanced quote: the shell will say so; split plainly here
        return command.split()


def named_paths(command: str, workspace: Path) -> list[Path]:
    """The arguments of ``command`` that name a path inside ``workspace``: an existing one,
    or one that looks like a file (``tests/test_new.py``) whether it exists yet or not."""
    root = real_path(workspace)
    found: list[Path] = []
    for word in _words(command)[1:]:
        if word.startswith("-") or not word:
            continue
        word = word.split("::", 1)[0]  # a pytest node id: tests/test_x.py::test_y
        candidate = root / word
        if candidate.is_symlink():
            continue
        if not candidate.exists():
            if Path(word).suffix not in _FILE_SUFFIXES or Path(word).is_absolute():
                continue
            resolved = Path(os.path.normpath(candidate))
        else:
            resolved = real_path(candidate)
        if resolved != root and is_within(resolved, root) and resolved not in found:
            found.append(resolved)
    return found


def runner_file(rel: str) -> bool:
    """Whether a workspace-relative path decides what a check runs (not a test itself)."""
    name = rel.rsplit("/", 1)[-1]
    if name.startswith("requirements") and name.endswith(".txt"):
        return True
    return rel == SETUP_SCRIPT or name in RUNNER_CONFIG | RUNNER_SHADOWS | LOCK_FILES


def _is_runner_file(rel: Path) -> bool:
    return runner_file(rel.as_posix())


def _is_test_file(rel: Path) -> bool:
    if any(part in TEST_DIRS for part in rel.parts[:-1]):
        return True
    return any(fnmatch.fnmatch(rel.name, pattern) for pattern in TEST_FILE_PATTERNS)


def _walk(folder: Path) -> Iterable[Path]:
    """The regular files under ``folder`` (no symlink, FIFO, device or socket)."""
    for current, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for name in sorted(files):
            path = Path(current) / name
            try:
                regular = stat.S_ISREG(os.lstat(path).st_mode)
            except OSError:
                continue
            if regular:
                yield path


def watched_files(commands: Sequence[str], workspace: Path) -> list[Path]:
    """Every file the checks watch, sorted, at most :data:`MAX_FILES`."""
    root = real_path(workspace)
    chosen: set[Path] = set()
    scan_tests = False
    for command in commands:
        named = named_paths(command, root)
        if not named:
            scan_tests = True
        for path in named:
            if path.is_dir():
                chosen.update(_walk(path))
            elif path.is_file():
                chosen.add(path)
    if root.is_dir():
        for path in _walk(root):
            rel = path.relative_to(root)
            if _is_runner_file(rel) or (scan_tests and _is_test_file(rel)):
                chosen.add(path)
    return sorted(chosen)[:MAX_FILES]


def _regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def _digest(path: Path) -> str | None:
    # Non-blocking and bounded: a FIFO the agent made (or swapped in after the walk) is
    # skipped, never opened for a read that waits for a writer.
    return sha256_regular(path, max_bytes=MAX_FILE_BYTES)


def snapshot(commands: Sequence[str], workspace: Path) -> dict[str, str]:
    """``{relative path: sha256}`` of the files the checks watch."""
    root = real_path(workspace)
    hashes: dict[str, str] = {}
    for path in watched_files(commands, root):
        digest = _digest(path)
        if digest is not None:
            hashes[path.relative_to(root).as_posix()] = digest
    return hashes


def changed_files(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    """The files added, removed or changed between two snapshots, sorted."""
    return sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))


__all__ = [
    "LOCK_FILES",
    "MAX_FILES",
    "RUNNER_CONFIG",
    "RUNNER_SHADOWS",
    "changed_files",
    "named_paths",
    "runner_file",
    "snapshot",
    "watched_files",
]
