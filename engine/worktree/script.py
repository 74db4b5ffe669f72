"""A project's setup script: where it lives and what identifies its text (docs/environments.md).

A leaf module: the worktree service reads the script from a commit, the setup service runs it,
the cards name it, and each names it by the SHA-256 of its exact text, which is what the owner
consents to.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

SETUP_PATH = ".plangate/setup.sh"
# A longer script is refused: the owner reads the whole text before consenting.
MAX_SCRIPT_CHARS = 64 * 1024


@dataclass(frozen=True, slots=True)
class SetupScript:
    """The exact text of a setup script and its SHA-256 (hex)."""

    text: str
    sha: str

    @property
    def short(self) -> str:
        """The first 12 hex digits: what the cards and messages show."""
        return self.sha[:12]

    @property
    def label(self) -> str:
        """``.plangate/setup.sh (sha256 0123456789ab)``."""
        return f"{SETUP_PATH} (sha256 {self.short})"


# A project's marker files and a one-line setup script for that kind of project (the doctor's
# suggestion where a project has none).
EXAMPLES: tuple[tuple[str, str], ...] = (
    ("pyproject.toml", "python3 -m venv .venv && .venv/bin/pip install -e ."),
    ("requirements*.txt", "python3 -m venv .venv && .venv/bin/pip install -r requirements.txt"),
    ("package.json", "npm ci"),
    ("go.mod", "go mod download"),
    ("Cargo.toml", "cargo fetch"),
)


def suggestion(folder: Path) -> str | None:
    """The doctor's line for a project with dependencies and no setup script (``None``: it
    has one, or nothing that needs one). Blocking (a few ``stat`` calls)."""
    if (folder / SETUP_PATH).exists():
        return None
    for pattern, example in EXAMPLES:
        found = next(iter(sorted(folder.glob(pattern))), None)
        if found is not None:
            return (
                f"{found.name} but no {SETUP_PATH}: a plan's worktree will not have its "
                f"dependencies; e.g. {SETUP_PATH}: {example}"
            )
    return None


def script_of(text: str) -> SetupScript:
    """The script ``text`` with its hash."""
    return SetupScript(text=text, sha=hashlib.sha256(text.encode("utf-8")).hexdigest())


__all__ = ["EXAMPLES", "MAX_SCRIPT_CHARS", "SETUP_PATH", "SetupScript", "script_of", "suggestion"]
