"""One set of hostile repositories, planted by an agent that may write the project's files and
its ``.git``: each plants a program (``touch <marker>``) through one key or setting of the git
table (engine/git_safety.py). The same set is run against both contexts: the sandboxed bash's
git (tests/agent/test_git_table.py) and plangate's own git on the host
(tests/projects/test_hostile_repos.py). A marker file that exists afterwards is a program that
ran.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

IDENTITY = ("-c", "user.name=Agent", "-c", "user.email=agent@example.test")


def git(where: Path, *args: str) -> str:
    """The agent's own git (no global configuration), as sandboxed bash would run it."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(where),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "LANG": "C",
    }
    done = subprocess.run(
        ["git", *IDENTITY, *args], cwd=where, env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout.strip()


@dataclass(frozen=True)
class Plant:
    """``repo``: the main checkout (its ``.git`` holds the configuration every worktree
    shares); ``tree``: the working tree the commands see (the main checkout or a plan's
    worktree); ``run``: the shell text of the planted program for a marker name."""

    repo: Path
    tree: Path
    markers: Path

    def run(self, name: str) -> str:
        return f"touch {self.markers / name}"

    def config(self, key: str, value: str) -> None:
        git(self.repo, "config", "--local", key, value)

    def attributes(self, line: str) -> None:
        path = self.tree / ".gitattributes"
        old = path.read_text() if path.exists() else ""
        path.write_text(old + line + "\n")

    def touch_all(self) -> None:
        """Every tracked file changed and racy (status must look at its content)."""
        for path in self.tree.iterdir():
            if path.is_file():
                path.write_text(path.read_text() + "more\n")
                os.utime(path, (0, 0))

    def planted(self) -> None:
        """Planting is done: markers the agent's own git left while planting (a nested
        repository's filter runs when the agent adds it) are cleared."""
        for marker in self.markers.iterdir():
            marker.unlink()

    def script(self, name: str) -> Path:
        """An executable that touches the marker (for keys that take a program's path)."""
        path = self.markers.parent / f"{name}.sh"
        path.write_text(f"#!/bin/sh\n{self.run(name)}\ncat\n")
        path.chmod(0o755)
        return path

    def nested(self, folder: str, name: str, *, gitlink: bool = False, moved: bool = False) -> None:
        """A repository inside the tree whose own configuration holds a filter and an
        fsmonitor; ``gitlink``: committed into the outer repository as a submodule whose
        .gitmodules entry asks status to look inside (``ignore = none``); ``moved``: its
        HEAD then moves past the recorded commit."""
        inner = self.tree / folder
        inner.mkdir(parents=True)
        git(inner, "init", "-q")
        (inner / "x.txt").write_text("x\n")
        (inner / ".gitattributes").write_text("* filter=evil\n")
        git(inner, "add", "-A")
        git(inner, "commit", "-qm", "inner")
        git(inner, "config", "filter.evil.clean", f"{self.run(name)}; cat")
        git(inner, "config", "filter.evil.smudge", f"{self.run(name)}; cat")
        git(inner, "config", "core.fsmonitor", f"{self.run(name + '-fsmonitor')}; false")
        git(inner, "config", "core.hooksPath", ".hooks")
        if gitlink:
            (self.tree / ".gitmodules").write_text(
                f'[submodule "{folder}"]\n\tpath = {folder}\n\turl = ./{folder}\n\tignore = none\n'
            )
            # The configuration may say so too (and add then looks inside).
            git(self.tree, "config", f"submodule.{folder}.ignore", "none")
            git(self.tree, "add", ".gitmodules", folder)
            git(self.tree, "commit", "-qm", "a submodule")
        if moved:  # its HEAD is not the recorded one (submodule update has work to do)
            (inner / "y.txt").write_text("y\n")
            git(inner, "add", "y.txt")
            git(inner, "commit", "-qm", "moved on")
        (inner / "x.txt").write_text("x changed\n")
        os.utime(inner / "x.txt", (0, 0))


def _hooks(p: Plant) -> None:
    p.config("core.hooksPath", str(p.tree / ".hooks"))
    for hooks in (p.tree / ".hooks", p.repo / ".git" / "hooks"):
        hooks.mkdir(exist_ok=True)
        for hook in (
            "pre-commit",
            "post-commit",
            "post-checkout",
            "reference-transaction",
            "pre-push",
            "post-merge",
            "post-index-change",
        ):
            (hooks / hook).write_text(f"#!/bin/sh\n{p.run('hook')}\n")
            (hooks / hook).chmod(0o755)


def _filter(kind: str) -> Callable[[Plant], None]:
    def plant(p: Plant) -> None:
        p.config(f"filter.evil.{kind}", f"{p.run(kind)}; cat")
        p.attributes("* filter=evil")

    return plant


def _diff_driver(kind: str) -> Callable[[Plant], None]:
    def plant(p: Plant) -> None:
        p.config(f"diff.evil.{kind}", f"{p.run(kind)}; cat")
        p.attributes("* diff=evil")

    return plant


def _include(p: Plant) -> None:
    extra = p.markers.parent / "included.cfg"
    extra.write_text(f'[filter "inc"]\n\tclean = {p.run("include")}; cat\n')
    p.config("include.path", str(extra))
    p.attributes("* filter=inc")


def _include_if(p: Plant) -> None:
    extra = p.markers.parent / "included-if.cfg"
    extra.write_text(
        f"[core]\n\tfsmonitor = {p.run('includeif')}; false\n"
        f'[filter "incif"]\n\tclean = {p.run("includeif")}; cat\n'
    )
    p.config("includeIf.gitdir:/.path", str(extra))
    p.attributes("* filter=incif")


def _attributes_file(p: Plant) -> None:
    extra = p.markers.parent / "attributes"
    extra.write_text("* filter=attr\n")
    p.config("core.attributesFile", str(extra))
    p.config("filter.attr.clean", f"{p.run('attributesfile')}; cat")


def _insteadof(p: Plant) -> None:
    # A push or fetch meant for the remote goes to a repository of the agent's instead, whose
    # own hooks then run (a local transport does not pass the caller's settings on).
    evil = p.markers.parent / "evil.git"
    git(p.markers.parent, "init", "-q", "--bare", str(evil))
    for hook in ("pre-receive", "post-receive", "update"):
        (evil / "hooks" / hook).write_text(f"#!/bin/sh\n{p.run('insteadof')}\n")
        (evil / "hooks" / hook).chmod(0o755)
    p.config("remote.origin.url", "file:///nonexistent/origin.git")
    p.config(f"url.{evil}.insteadOf", "file:///nonexistent/origin.git")


def _ssh(p: Plant) -> None:
    p.config("remote.origin.url", "ssh://example.invalid/origin.git")
    p.config("core.sshCommand", f"{p.run('ssh-command')}; false")


def _gpg_ssh(p: Plant) -> None:
    p.config("gpg.format", "ssh")
    p.config("commit.gpgSign", "true")
    p.config("user.signingKey", "key::ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOqzLy9Bc0FfJr7 t")
    p.config("gpg.ssh.program", str(p.script("gpg-ssh")))


def _submodule_update(p: Plant) -> None:
    p.nested("sub", "submodule-nested", gitlink=True, moved=True)
    p.config("submodule.sub.url", "./sub")
    p.config("submodule.sub.update", f"!{p.run('submodule-update')}")


# (name, how it is planted); the name is the marker's name (and the test id).
HOSTILE: tuple[tuple[str, Callable[[Plant], None]], ...] = (
    ("fsmonitor", lambda p: p.config("core.fsmonitor", f"{p.run('fsmonitor')}; false")),
    ("hooks", _hooks),
    ("pager", lambda p: p.config("core.pager", f"{p.run('pager')}; cat")),
    ("pager-log", lambda p: p.config("pager.log", f"{p.run('pager-log')}; cat")),
    ("editor", lambda p: p.config("core.editor", f"{p.run('editor')}; true")),
    ("sequence-editor", lambda p: p.config("sequence.editor", p.run("sequence-editor"))),
    ("ssh-command", _ssh),
    ("askpass", lambda p: p.config("core.askPass", p.run("askpass"))),
    ("credential", lambda p: p.config("credential.helper", f"!{p.run('credential')}")),
    (
        "credential-url",
        lambda p: p.config("credential.file:///.helper", f"!{p.run('credential-url')}"),
    ),
    (
        "gpg",
        lambda p: (
            p.config("commit.gpgSign", "true"),
            p.config("log.showSignature", "true"),
            p.config("gpg.program", str(p.script("gpg"))),
        ),
    ),
    ("gpg-ssh", _gpg_ssh),
    ("diff-external", lambda p: p.config("diff.external", str(p.script("diff-external")))),
    ("clean", _filter("clean")),
    ("smudge", _filter("smudge")),
    ("process", _filter("process")),
    ("textconv", _diff_driver("textconv")),
    ("command", _diff_driver("command")),
    (
        "merge-driver",
        lambda p: (
            p.config("merge.evil.driver", f"{p.run('merge-driver')}; false"),
            p.attributes("* merge=evil"),
        ),
    ),
    ("alias", lambda p: p.config("alias.st", f"!{p.run('alias')}")),
    ("include", _include),
    ("includeif", _include_if),
    ("attributesfile", _attributes_file),
    ("insteadof", _insteadof),
    (
        "uploadpack",
        lambda p: (
            p.config("remote.origin.url", str(p.repo)),
            p.config("remote.origin.uploadpack", p.run("uploadpack")),
        ),
    ),
    (
        "difftool",
        lambda p: (p.config("diff.tool", "evil"), p.config("difftool.evil.cmd", p.run("difftool"))),
    ),
    ("trailer", lambda p: p.config("trailer.evil.command", p.run("trailer"))),
    ("difffilter", lambda p: p.config("interactive.diffFilter", p.run("difffilter"))),
    ("submodule-update", _submodule_update),
    ("nested", lambda p: p.nested("vendor/lib", "nested")),
    ("gitlink", lambda p: p.nested("sub", "gitlink", gitlink=True)),
)

# What a rule could let the agent run in the sandbox: every git command of the set, each
# given the chance to run what the repository names.
SANDBOX_COMMANDS = (
    "git status",
    "git diff",
    "git log -1 -p",
    "git show HEAD",
    "git st",
    "git add -p",
    "git difftool -y -t evil HEAD~1",
    "git add -A",
    "git commit -qm change",
    "git commit -q --allow-empty",
    "git -c core.editor=true commit -q --amend --trailer evil=1 -m amended",
    "echo | git interpret-trailers --trailer evil=1",
    "git rebase -q -i HEAD~1",
    "git checkout -q -b side base && echo side >> a.txt && git commit -qam side "
    "&& git checkout -q - && git merge -q --no-edit side",
    "git merge --abort",
    "git checkout -q base -- a.txt",
    "git checkout -q -b other",
    "git checkout -q -",
    "git submodule update --init",
    "git fetch -q origin",
    "git push -q origin HEAD:refs/heads/x",
)
