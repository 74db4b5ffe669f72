"""Projects: the folders plangate may work on, by name (docs/projects.md).

A project is a name and a folder. The list comes from ``PLANGATE_PROJECTS`` (``name=path``
pairs) and from the subfolders of ``PLANGATE_PROJECTS_ROOT`` (each is a project named after
it); ``PLANGATE_WORKSPACE`` is the default project, the one a chat starts in. A chat or a forum
topic is bound to one project at a time (``/project <name>``), and a session is never given a
folder that is not on this list: :meth:`ProjectCatalog.allows` is the one check.

The root's subfolders are read when asked, so a folder added under the root is a project at
once, and one removed stops being one (its sessions fall back to the default project).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.tools.host import install_refusal
from engine.worktree.git import secret_refusal

_log = logging.getLogger("plangate.projects")

# The name a project is bound by: plain words, so `/project <name>` needs no quoting.
PROJECT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
DEFAULT_NAME = "default"


@dataclass(frozen=True, slots=True)
class Project:
    """One folder plangate may work on, and the name it is bound by."""

    name: str
    path: Path


class ProjectCatalog:
    """The projects of this process: the named ones, the root's subfolders, the default."""

    def __init__(
        self,
        default: Path,
        named: Iterable[tuple[str, Path]] = (),
        *,
        root: Path | None = None,
        protected: Sequence[tuple[str, Path]] = (),
        secret_files: Sequence[str] = (),
    ) -> None:
        self._protected = tuple(protected)
        self._secret_files = tuple(secret_files)
        self._named = {name: _resolved(path) for name, path in named}
        self._root = _resolved(root) if root is not None else None
        default_path = _resolved(default)
        listed = next((n for n, p in self._named.items() if p == default_path), None)
        self.default = Project(listed or DEFAULT_NAME, default_path)

    def projects(self) -> list[Project]:
        """Every project, the default first, then by name."""
        found: dict[str, Path] = dict(self._root_projects())
        found.update(self._named)  # a named project wins over a root folder of that name
        found.pop(self.default.name, None)
        return [self.default, *(Project(n, found[n]) for n in sorted(found))]

    def get(self, name: str) -> Project | None:
        """The project called ``name`` (exactly as listed), ``None`` when there is none."""
        return next((p for p in self.projects() if p.name == name), None)

    def for_path(self, path: Path | str) -> Project | None:
        """The project whose folder is ``path``, ``None`` when it is on no list."""
        wanted = _resolved(Path(path))
        if wanted == self.default.path:
            return self.default  # listed first: no need to read the root's folders
        return next((p for p in self.projects() if p.path == wanted), None)

    def allows(self, path: Path | str) -> bool:
        """``path`` is a project's folder (never a path outside the list)."""
        return self.for_path(path) is not None

    def refusal(self, project: Project) -> str | None:
        """One line refusing ``project`` when its folder holds plangate's own files (its
        interpreter, venv, installed package or home) or a secret file in its git history,
        ``None`` when it may be worked on. Blocking (git): a thread."""
        label = f"Project {project.name}:"
        return install_refusal(label, project.path, self._protected) or secret_refusal(
            label, project.path, self._secret_files
        )

    def _root_projects(self) -> list[tuple[str, Path]]:
        root = self._root
        if root is None:
            return []
        try:
            entries = list(os.scandir(root))
        except OSError as exc:
            _log.warning("plangate.projects.root_unreadable root=%s %s", root, exc)
            return []
        found = []
        for entry in entries:
            # Hidden folders (".git", ".cache") are not projects; symlinks are resolved and
            # must still lie under the root.
            if not PROJECT_NAME.fullmatch(entry.name) or not entry.is_dir():
                continue
            path = _resolved(Path(entry.path))
            if path.is_relative_to(root):
                found.append((entry.name, path))
        return found


def _resolved(path: Path) -> Path:
    return path.expanduser().resolve()


__all__ = ["DEFAULT_NAME", "PROJECT_NAME", "Project", "ProjectCatalog"]
