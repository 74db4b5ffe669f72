"""plangate's own git commands, run on trees the agent wrote (docs/projects.md, "Safety").

Every command runs with a working folder and an environment chosen here, never the bot's:
no secrets, no global or system configuration (``GIT_CONFIG_NOSYSTEM``, ``GIT_CONFIG_GLOBAL``
= ``/dev/null``), a ``HOME`` with nothing in it, no terminal prompts. The options that make
git run a program are overridden on the command line (fsmonitor, hooks, pager, editor,
credential helpers, signing programs), diffs run with ``--no-ext-diff --no-textconv``, and
``GIT_DIR`` / ``GIT_WORK_TREE`` name the repository explicitly, so a ``.git`` file the agent
rewrote in a worktree is never followed. A repository whose own configuration names a program
git would run (a filter or merge driver, an include, an ssh command...) is refused outright:
:func:`unsafe_config` lists those keys. The check reads every file git itself reads
(:data:`CONFIG_LISTING`: ``config.worktree`` and included files too, not just
``.git/config``) and runs before every command, not once: the agent may write the
repository's configuration again after a worktree was made (NoPlan, or after the plan).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.errors import PlangateError

_log = logging.getLogger("plangate.worktree.git")

GIT_TIMEOUT_S = 60.0
# Fixed identity of plangate's commits: no global git identity is read (or needed).
AUTHOR_NAME = "plangate"
AUTHOR_EMAIL = "plangate@localhost"
# Each of these would run a program; passed as ``-c`` before every command.
SAFE_CONFIG: tuple[str, ...] = (
    "core.fsmonitor=false",
    "core.hooksPath=/dev/null",
    "core.pager=cat",
    "core.editor=true",
    "sequence.editor=true",
    "core.askPass=",
    "credential.helper=",
    "core.sshCommand=ssh",
    "core.attributesFile=/dev/null",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "protocol.ext.allow=never",
    "color.ui=false",
    "core.quotePath=false",
    "advice.detachedHead=false",
    f"user.name={AUTHOR_NAME}",
    f"user.email={AUTHOR_EMAIL}",
)
# Repository configuration keys that make git run a program (or read more configuration
# from elsewhere) and that the -c overrides above cannot undo: a driver is named by the
# repository's own attributes, so a repository that defines any of these is refused. (Keys
# the overrides replace, like core.hooksPath or core.fsmonitor, are harmless here.) Matched
# on the lowercased key.
_UNSAFE_KEYS = re.compile(
    r"^(?:"
    r"filter\..+\.(?:clean|smudge|process)"
    r"|merge\..+\.driver"
    r"|diff\..+\.(?:command|textconv)"
    r"|include\.path|includeif\..+"
    r"|core\.(?:gitproxy|alternaterefscommand)"
    r"|remote\..+\.(?:uploadpack|receivepack|vcs)"
    r"|url\..+\.(?:insteadof|pushinsteadof)"
    r"|credential\..*helper"
    r"|gpg\..*program"
    r"|uploadpack\.packobjectshook"
    # Makes git read .git/config.worktree (or a worktree's own): refused rather than trusted.
    r"|extensions\.worktreeconfig"
    r")$"
)
# Every configuration entry git reads for the repository, each with its scope (``local``,
# ``worktree``...); our own ``-c`` overrides come back as ``command`` and are skipped.
CONFIG_LISTING: tuple[str, ...] = ("config", "--list", "--null", "--show-scope")


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
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C",
        "LC_ALL": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_ATTR_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_PAGER": "cat",
        "GIT_EDITOR": "true",
        "GIT_MERGE_AUTOEDIT": "no",
    }
    # An agent's key for ssh pushes is the operator's choice; the socket path is no secret.
    agent = os.environ.get("SSH_AUTH_SOCK")
    if agent:
        env["SSH_AUTH_SOCK"] = agent
    return env


def unsafe_config(listing: str, *, scoped: bool = False) -> list[str]:
    """The keys of ``git config --list --null`` output that would make git run a program;
    ``scoped``: the output of :data:`CONFIG_LISTING` (scope and entry alternate)."""
    entries = listing.split("\0")
    if scoped:
        pairs = zip(entries[0::2], entries[1::2], strict=False)
        entries = [entry for scope, entry in pairs if scope.strip() != "command"]
    keys = []
    for entry in entries:
        key = entry.split("\n", 1)[0].strip().lower()
        if key and _UNSAFE_KEYS.match(key):
            keys.append(key)
    return keys


class Git:
    """Runs git for one repository: ``git_dir`` (a ``.git`` folder, or a worktree's admin
    folder under it) and, for commands that need files, ``work_tree``."""

    def __init__(self, git_dir: Path, work_tree: Path | None, *, home: Path) -> None:
        self.git_dir = git_dir
        self.work_tree = work_tree
        self._home = home

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
        self, *args: str, check: bool = True, timeout_s: float = GIT_TIMEOUT_S
    ) -> GitResult:
        self._home.mkdir(parents=True, exist_ok=True)
        env = git_env(self._home)
        env["GIT_DIR"] = str(self.git_dir)
        if self.work_tree is not None:
            env["GIT_WORK_TREE"] = str(self.work_tree)
        cwd = self.work_tree if self.work_tree is not None else self.git_dir
        argv = ["git", *(part for item in SAFE_CONFIG for part in ("-c", item)), *args]
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
            out.decode("utf-8", "replace"),
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


def diff_args(*revs: str) -> Sequence[str]:
    """``git diff`` with no external diff program and no text conversion."""
    return ("diff", "--no-ext-diff", "--no-textconv", "--no-color", *revs)


__all__ = [
    "AUTHOR_EMAIL",
    "AUTHOR_NAME",
    "CONFIG_LISTING",
    "GIT_TIMEOUT_S",
    "SAFE_CONFIG",
    "Git",
    "GitError",
    "GitResult",
    "diff_args",
    "git_env",
    "unsafe_config",
]
