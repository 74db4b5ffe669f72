"""What plangate knows about a plan's worktree: the logged record and the card's view."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# ``creating`` and the ``-ing`` phases after Done are intents: logged before the git commands
# they name, finished on the session's next load if the process died in between.
WorktreePhase = Literal[
    "in_place",  # the project is not a git repository (or git refused it): no worktree
    "failed",  # git could not make the worktree: the plan works in place
    "creating",
    "live",  # the plan runs in the worktree
    "done",  # the plan ended; its changes are committed on the branch; Merge / Keep / Discard
    "conflict",  # Merge stopped on conflicts: the branch stays, Keep branch or Discard
    "merging",
    "pushing",
    "keeping",
    "discarding",
    "merged",
    "pushed",
    "kept",
    "discarded",
    "empty",  # the plan ended with no change: worktree and branch removed
]
# The project's setup script in a live worktree (docs/environments.md): "" none, "needed"
# (not run yet), "running", "ready" (ran; what it built is read-only), "failed" (the run
# paused; Retry runs it again).
SetupPhase = Literal["", "needed", "running", "ready", "failed"]
INTENTS: frozenset[str] = frozenset({"creating", "merging", "pushing", "keeping", "discarding"})
# A finished plan's worktree waiting for the owner's decision.
DECIDING: frozenset[str] = frozenset({"done", "conflict"})
CLOSED: frozenset[str] = frozenset(
    {"in_place", "failed", "merged", "pushed", "kept", "discarded", "empty"}
)


class FileStat(BaseModel):
    """One changed file: lines added and removed (``None`` for a binary file)."""

    model_config = ConfigDict(frozen=True)

    path: str
    added: int | None = None
    removed: int | None = None


class WorktreeRecord(BaseModel):
    """One plan's worktree as the session's log last recorded it (``worktree/change``)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    phase: WorktreePhase
    plan_id: str
    title: str = ""
    # The ended plan's revision: the Done buttons are bound to it.
    revision: int = 0
    project: str = ""
    path: str = ""
    branch: str = ""
    # The branch the plan started from (None: a detached HEAD) and its commit then.
    base: str | None = None
    base_commit: str = ""
    head: str = ""
    files: list[FileStat] = Field(default_factory=list)
    conflicts: list[str] = Field(default_factory=list)
    # Nested repositories and submodules the plan changed: never staged, not on the branch.
    left_out: list[str] = Field(default_factory=list)
    # One line for the card: why it works in place, what a merge did, what failed.
    message: str = ""
    # The archived sidecar (as JSON) so the Done card can be drawn after a restart.
    sidecar: dict[str, Any] | None = None
    # The setup script read from ``base_commit`` (its SHA-256), where its run is, why it
    # failed (the tail of its output), and what it built (worktree-relative paths, read-only
    # to the plan afterwards).
    setup: SetupPhase = ""
    setup_sha: str = ""
    setup_note: str = ""
    setup_built: list[str] = Field(default_factory=list)


@dataclass(frozen=True, slots=True)
class WorktreeView:
    """What the plan card shows about the worktree (engine.cards hands it to the front end)."""

    phase: str
    plan_id: str
    revision: int
    branch: str = ""
    base: str | None = None
    files: tuple[FileStat, ...] = ()
    conflicts: tuple[str, ...] = ()
    message: str = ""
    # Nested repositories and submodules the plan changed, left out of the branch.
    left_out: tuple[str, ...] = ()
    # Push branch instead of Merge (PLANGATE_GIT_REMOTE).
    push: bool = False
    # The owner pressed Discard changes: the card asks to confirm.
    confirm_drop: bool = False
    # The whole diff at Done (``patch_name`` is its file name: plan-<slug>.patch).
    patch: str = ""
    patch_name: str = ""
    # The project's setup in this worktree: its phase, the script's SHA-256, a failure's tail.
    setup: str = ""
    setup_sha: str = ""
    setup_note: str = ""

    @property
    def added(self) -> int:
        return sum(f.added or 0 for f in self.files)

    @property
    def removed(self) -> int:
        return sum(f.removed or 0 for f in self.files)


__all__ = [
    "CLOSED",
    "DECIDING",
    "INTENTS",
    "FileStat",
    "SetupPhase",
    "WorktreePhase",
    "WorktreeRecord",
    "WorktreeView",
]
