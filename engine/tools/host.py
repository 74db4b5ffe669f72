"""What plangate itself runs on the host, taken once at start, and the folders no workspace
may hold (docs/security.md, "Programs plangate runs on the host").

Every helper plangate starts outside the sandbox (grep's search child, the sandbox's own
``bwrap``, git) must come from a place the agent cannot write. The interpreter and the files
plangate was installed with are resolved here once, when the module is first imported (at
start), and never looked up again: a later swap of ``.venv/bin/python`` or of a package file
changes nothing that already runs. The same install is what :func:`install_refusal` checks
a workspace or project against: one that holds the interpreter, the venv, the installed
package or plangate's home is refused, because the agent writes its workspace and plangate
would then run what the agent wrote.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import engine
from engine.tools.workspace import is_within, real_path

# The packages of plangate's distribution (siblings of ``engine`` wherever it is installed;
# an editable install's are the checkout's own folders).
_PACKAGES = ("engine", "storage", "bot")


@dataclass(frozen=True, slots=True)
class Install:
    """plangate's own files as they were at start, every path resolved."""

    # The real interpreter (a venv's ``bin/python`` is usually a link to it): what grep's
    # search child runs.
    interpreter: Path
    # The environment plangate runs from (``sys.prefix``: the venv, or the system prefix).
    venv: Path
    # The standard library the search child imports from (``-I -S``: nothing else).
    stdlib: Path
    # The folders of plangate's packages.
    packages: tuple[Path, ...]

    def folders(self, home: Path | None = None) -> list[tuple[str, Path]]:
        """``(what, folder)`` of everything no workspace may hold, ``home`` included."""
        found = [
            ("plangate's interpreter", self.interpreter),
            ("the Python environment plangate runs from", self.venv),
            ("the Python standard library plangate runs with", self.stdlib),
            *(("plangate's installed package", package) for package in self.packages),
        ]
        if home is not None:
            found.append(("plangate's home (PLANGATE_HOME)", real_path(home)))
        return found


def take_install() -> Install:
    """The install this process runs from, resolved now."""
    package = real_path(Path(engine.__file__)).parent
    packages = tuple(folder for name in _PACKAGES if (folder := package.parent / name).is_dir())
    return Install(
        interpreter=real_path(Path(sys.executable)),
        venv=real_path(Path(sys.prefix)),
        stdlib=real_path(Path(os.__file__)).parent,
        packages=packages,
    )


# Taken once, at start (the first import); nothing re-resolves it through the workspace later.
INSTALL = take_install()


def held_install(folder: Path, protected: Iterable[tuple[str, Path]]) -> tuple[str, Path] | None:
    """The first ``(what, path)`` of ``protected`` that lies inside ``folder`` (resolved),
    ``None`` when it holds none of them."""
    root = real_path(folder)
    return next(((what, path) for what, path in protected if is_within(path, root)), None)


def install_refusal(label: str, folder: Path, protected: Sequence[tuple[str, Path]]) -> str | None:
    """One line refusing ``folder`` (``label`` names where it came from, e.g.
    ``PLANGATE_WORKSPACE``) when it holds plangate's own files; ``None`` when it is fine."""
    held = held_install(folder, protected)
    if held is None:
        return None
    what, path = held
    return (
        f"{label} {real_path(folder)} holds {what} ({path}): the agent writes its workspace, "
        "so plangate would run what it wrote outside the sandbox; keep plangate's venv, its "
        "installed package and its home outside every workspace and project (install it "
        "elsewhere, or set the workspace to your project's own folder)"
    )


def protected_folders(home: Path | None = None) -> list[tuple[str, Path]]:
    """:meth:`Install.folders` of the install taken at start."""
    return INSTALL.folders(home)


__all__ = [
    "INSTALL",
    "Install",
    "held_install",
    "install_refusal",
    "protected_folders",
    "take_install",
]
