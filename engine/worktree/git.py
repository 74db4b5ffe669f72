"""plangate's own git on the host: the one runner of every git command plangate runs outside the
sandbox (worktrees, the commit at Done, Merge, Push, the progress snapshot; docs/projects.md,
"Safety", and docs/security.md, "Git").

The settings that make git run a program, reach the network or enter another repository are
in one table, ``engine.git_safety``; this runner applies its host column:

- the environment is built from nothing (:func:`git_env`): no secrets, no system or global
  configuration (``GIT_CONFIG_NOSYSTEM``, ``GIT_CONFIG_GLOBAL=/dev/null``), a ``HOME`` with
  nothing in it, no terminal prompts;
- the forced settings go on the command line as ``-c`` (:data:`SAFE_CONFIG`), before every
  command; diffs run with ``--no-ext-diff --no-textconv`` (:func:`diff_args`);
- a repository whose configuration sets a refused key (a filter or merge driver, an include,
  ``url.*.insteadOf``...) is refused before every command, not once (:meth:`Git.unsafe` reads
  every file git itself reads, ``config.worktree`` and included files too): the agent may
  write the configuration again after a worktree was made;
- ``GIT_DIR`` / ``GIT_WORK_TREE`` name the repository explicitly, so a ``.git`` file the agent
  rewrote in a worktree is never followed;
- nested repositories and submodules are never entered: their own configuration (a filter
  in ``sub/.git/config``) is not the one checked, so status and diff pass
  ``--ignore-submodules=all`` (``submodule.<name>.ignore``, which ``.gitmodules`` may set,
  would outrank the configuration's ``diff.ignoreSubmodules``) and :meth:`Git.add_all` stages
  everything but gitlinks and nested repositories (:meth:`Git.nested`).

Use it as::

    git = Git(project / ".git", project, home=empty_folder)
    head = await git.out("rev-parse", "HEAD")      # refuses an unsafe repository first
    found = await Git.discover(workspace)          # the repository around a folder, or None
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.errors import PlangateError
from engine.git_safety import host_config, host_env, unsafe_config

_log = logging.getLogger("plangate.worktree.git")

GIT_TIMEOUT_S = 60.0
# Fixed identity of plangate's commits: no global git identity is read (or needed).
AUTHOR_NAME = "plangate"
AUTHOR_EMAIL = "plangate@localhost"
# The -c arguments of every command (engine.git_safety's host column, plain output, identity).
SAFE_CONFIG: tuple[str, ...] = host_config((AUTHOR_NAME, AUTHOR_EMAIL))
# Every configuration entry git reads for the repository, each with its scope (``local``,
# ``worktree``...); our own ``-c`` overrides come back as ``command`` and are skipped.
CONFIG_LISTING: tuple[str, ...] = ("config", "--list", "--null", "--show-scope")
# HOME of a command that has no folder of plangate's for it: git needs none to exist.
NO_HOME = Path("/nonexistent")
# Status and diff never enter a submodule (whose own configuration applies there).
IGNORE_SUBMODULES = "--ignore-submodules=all"


class GitError(PlangateError):
    """A git command failed; the message is git's own last line (no secrets: none are in)."""


@dataclass(frozen=True, slots=True)
class GitResult:
    """One finished command: exit code, stdout and stderr as text."""

    code: int
    out: str
    err: str

    @property
    def ok(self) -> bool:
        return self.code == 0

    def last_line(self) -> str:
        """git's own explanation of a failure, one line."""
        lines = [line.strip() for line in (self.err or self.out).splitlines() if line.strip()]
        return lines[-1] if lines else f"exit code {self.code}"


def git_env(home: Path) -> dict[str, str]:
    """The whole environment of a plangate git command (``home`` is an empty folder)."""
    env = host_env(home)
    # An agent's key for ssh pushes is the operator's choice; the socket path is no secret.
    agent = os.environ.get("SSH_AUTH_SOCK")
    if agent:
        env["SSH_AUTH_SOCK"] = agent
    return env


class Git:
    """Runs git for one repository: ``git_dir`` (a ``.git`` folder, or a worktree's admin
    folder under it) and, for commands that need files, ``work_tree``. ``home``: an empty
    folder for ``HOME`` (made when missing; :data:`NO_HOME` is never made)."""

    def __init__(
        self,
        git_dir: Path,
        work_tree: Path | None,
        *,
        home: Path = NO_HOME,
        optional_locks: bool = True,
    ) -> None:
        self.git_dir = git_dir
        self.work_tree = work_tree
        self._home = home
        # False for a read that must not rewrite the index (the agent's git owns it).
        self._optional_locks = optional_locks

    @classmethod
    async def discover(
        cls, folder: Path, *, home: Path = NO_HOME, optional_locks: bool = True
    ) -> Git | None:
        """The repository ``folder`` is in (its git folder and top), or ``None``.

        Found once with ``rev-parse`` run in ``folder`` (no configuration of it runs a
        program there: the forced settings hold); every later command names it explicitly."""
        probe = cls(Path(folder), None, home=home, optional_locks=optional_locks)
        try:
            found = await probe._exec(
                "rev-parse", "--absolute-git-dir", "--show-toplevel", check=False, cwd=folder
            )
        except OSError:
            return None
        lines = found.out.splitlines() if found.ok else []
        if len(lines) != 2 or not all(line.strip() for line in lines):
            return None
        return cls(Path(lines[0]), Path(lines[1]), home=home, optional_locks=optional_locks)

    async def run(
        self, *args: str, check: bool = True, timeout_s: float = GIT_TIMEOUT_S
    ) -> GitResult:
        """Run ``git <args>``; ``check`` raises :class:`GitError` on a non-zero exit.

        The repository's configuration is checked first, every time: when it names a program
        git would run, :class:`GitError` is raised (whatever ``check``) and nothing runs."""
        keys = await self.unsafe()
        if keys:
            _log.warning("plangate.worktree.git.refused args=%s keys=%s", args[:2], keys[:3])
            raise GitError(
                f"git {args[0] if args else ''}: refused, the repository's config names "
                f"programs git would run ({', '.join(sorted(set(keys))[:3])})"
            )
        return await self._exec(*args, check=check, timeout_s=timeout_s)

    async def _exec(
        self,
        *args: str,
        check: bool = True,
        timeout_s: float = GIT_TIMEOUT_S,
        cwd: Path | None = None,
    ) -> GitResult:
        if self._home != NO_HOME:
            self._home.mkdir(parents=True, exist_ok=True)
        env = git_env(self._home)
        if not self._optional_locks:
            env["GIT_OPTIONAL_LOCKS"] = "0"
        if cwd is None:
            env["GIT_DIR"] = str(self.git_dir)
            if self.work_tree is not None:
                env["GIT_WORK_TREE"] = str(self.work_tree)
            cwd = self.work_tree if self.work_tree is not None else self.git_dir
        argv = ["git", *(part for item in SAFE_CONFIG for part in ("-c", item))]
        # The repository plangate was pointed at may belong to another user (a mounted volume
        # in a container): trust exactly that folder, never "*". Its ownership check guards
        # against the configuration it could run, which the forced settings and the check in
        # :meth:`run` already neutralise.
        argv += ["-c", f"safe.directory={self.work_tree if self.work_tree else cwd}", *args]
        process = await asyncio.create_subprocess_exec(
            *argv,
            cwd=str(cwd),
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        try:
            out, err = await asyncio.wait_for(process.communicate(), timeout_s)
        except (TimeoutError, asyncio.CancelledError):
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            raise
        result = GitResult(
            process.returncode or 0,
            out.decode("utf-8", "surrogateescape"),
            err.decode("utf-8", "replace"),
        )
        if check and not result.ok:
            _log.info("plangate.worktree.git.failed args=%s %s", args[:2], result.last_line())
            raise GitError(f"git {args[0]}: {result.last_line()}")
        return result

    async def out(self, *args: str) -> str:
        """The stripped stdout of a command that must succeed."""
        return (await self.run(*args)).out.strip()

    async def unsafe(self) -> list[str]:
        """This repository's configuration keys that would run a program (every file git
        reads for it); a configuration git cannot list counts as unsafe too."""
        listing = await self._exec(*CONFIG_LISTING, check=False)
        if not listing.ok:
            return [f"(config unreadable: {listing.last_line()})"]
        return unsafe_config(listing.out, scoped=True)

    async def nested(self) -> list[str]:
        """The work tree's gitlinks (submodules) and nested repositories not yet tracked,
        relative to its top: what plangate's git never enters nor stages."""
        if self.work_tree is None:
            return []
        staged = await self.run("ls-files", "--stage", "-z", check=False)
        found = [
            entry.split("\t", 1)[1]
            for entry in staged.out.split("\0")
            if entry.startswith("160000 ") and "\t" in entry
        ]
        # An untracked folder holding a repository is listed as "path/" and not entered.
        others = await self.run("ls-files", "--others", "--exclude-standard", "-z", check=False)
        found += [entry.rstrip("/") for entry in others.out.split("\0") if entry.endswith("/")]
        return sorted(dict.fromkeys(found))

    async def add_all(self) -> list[str]:
        """``git add -A`` of the whole work tree except :meth:`nested` (a gitlink is never
        staged or entered); the paths left out."""
        left = await self.nested()
        excludes = [f":(exclude,literal){path}" for path in left]
        await self.run("add", "-A", "--", ".", *excludes)
        return left


def tracked_secrets(folder: Path, secret_files: Sequence[str]) -> list[str]:
    """The ``secret_files`` (relative: inside ``folder``; absolute: when inside it) that the
    repository at ``folder`` holds anywhere: in a commit of any branch, tag or reflog entry,
    or in the index. Such a file is readable through ``git show`` or the pack files whatever
    the sandbox masks. Blocking (one or two git commands): a thread, or start-up."""
    root = folder.resolve()
    if not (root / ".git").is_dir():
        return []
    wanted: list[str] = []
    for name in secret_files:
        path = Path(name)
        if path.is_absolute():
            try:
                path = path.resolve().relative_to(root)
            except (OSError, ValueError):
                continue
        if str(path) not in ("", ".") and not str(path).startswith(".."):
            wanted.append(path.as_posix())
    if not wanted:
        return []
    env = git_env(NO_HOME)
    env["GIT_DIR"], env["GIT_WORK_TREE"] = str(root / ".git"), str(root)
    specs = [f":(literal){name}" for name in wanted]
    base = ["git", *(part for item in SAFE_CONFIG for part in ("-c", item))]
    found: set[str] = set()
    for args in (
        ["log", "--all", "--reflog", "--no-renames", "--format=", "--name-only", "-z"],
        ["ls-files", "-z"],
    ):
        try:
            done = subprocess.run(
                [*base, *args, "--", *specs],
                cwd=root,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=GIT_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            _log.warning("plangate.worktree.git.secret_check_failed folder=%s %s", root, exc)
            continue
        found.update(name for name in os.fsdecode(done.stdout).split("\0") if name)
    return sorted(found)


def secret_refusal(label: str, folder: Path, secret_files: Sequence[str]) -> str | None:
    """One line refusing a workspace or project whose git history holds a secret file
    (:func:`tracked_secrets`), naming it and the fix; ``None`` when it holds none."""
    found = tracked_secrets(folder, secret_files)
    if not found:
        return None
    shown = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
    return (
        f"{label} {folder} has PLANGATE_SECRET_FILES in its git history ({shown}): the agent "
        "could read it through git show or the pack files; remove it from every commit "
        "(git rm --cached, then rewrite the history, e.g. git filter-repo --invert-paths "
        "--path <file>, expire the reflog and git gc --prune=now), or do not list it"
    )


def diff_args(*revs: str) -> Sequence[str]:
    """``git diff`` with no external diff program, no text conversion, no submodule entered."""
    return ("diff", "--no-ext-diff", "--no-textconv", "--no-color", IGNORE_SUBMODULES, *revs)


__all__ = [
    "AUTHOR_EMAIL",
    "AUTHOR_NAME",
    "CONFIG_LISTING",
    "GIT_TIMEOUT_S",
    "IGNORE_SUBMODULES",
    "NO_HOME",
    "SAFE_CONFIG",
    "Git",
    "GitError",
    "GitResult",
    "diff_args",
    "git_env",
    "secret_refusal",
    "tracked_secrets",
    "unsafe_config",
]
