"""Goal state machine types (docs/goals.md).

A goal keeps a stable ``id`` across revisions; ``GoalRef {id, revision}`` names one exact
version and every mutation presents one (compare-and-set).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

GoalPhase = Literal["active", "paused", "blocked", "complete"]
GoalSource = Literal["user", "model", "task"]
# Why a goal is blocked; docs/goals.md says what the owner does about each. needs-approval:
# a goal round wanted a tool call that asks the owner; rounds never wait on a person, so the
# call was denied and the goal stops until the owner allows it and resumes.
BlockedCode = Literal[
    "round-limit", "model-reported", "user", "budget-limit", "no-progress", "needs-approval"
]
BUDGET_LIMIT: BlockedCode = "budget-limit"
NO_PROGRESS: BlockedCode = "no-progress"
NEEDS_APPROVAL: BlockedCode = "needs-approval"


class GoalRef(BaseModel):
    """One exact version of one goal."""

    model_config = ConfigDict(frozen=True)

    id: str
    revision: int


class GoalBlocked(BaseModel):
    model_config = ConfigDict(frozen=True)

    code: str
    message: str


class GoalSnapshot(BaseModel):
    """The durable state of a goal at one revision; ``blocked`` is set only in phase blocked."""

    model_config = ConfigDict(frozen=True)

    id: str
    revision: int
    objective: str
    phase: GoalPhase
    max_goal_rounds: int
    rounds_started: int = 0
    blocked: GoalBlocked | None = None
    source: GoalSource = "user"
    # Seconds between scheduled rounds; None means "next round when idle".
    schedule_s: int | None = None
    # Tokens the goal's rounds may use in all (None: no goal budget); the usage meter sums
    # what they used from the log's model/usage records.
    token_budget: int | None = None
    # Commands that must pass before the model's "complete" stands (docs/checks.md); the
    # owner's /goal done does not run them.
    checks: tuple[str, ...] = ()
    created_at: float = 0.0
    updated_at: float = 0.0

    @property
    def ref(self) -> GoalRef:
        return GoalRef(id=self.id, revision=self.revision)

    @property
    def rounds_left(self) -> int:
        return max(0, self.max_goal_rounds - self.rounds_started)


class GoalTombstone(BaseModel):
    """A cleared goal: the ref of the revision that clearing wrote."""

    model_config = ConfigDict(frozen=True)

    id: str
    revision: int


__all__ = [
    "BUDGET_LIMIT",
    "NEEDS_APPROVAL",
    "NO_PROGRESS",
    "BlockedCode",
    "GoalBlocked",
    "GoalPhase",
    "GoalRef",
    "GoalSnapshot",
    "GoalSource",
    "GoalTombstone",
]
