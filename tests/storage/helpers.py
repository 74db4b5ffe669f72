"""Builders shared by the storage tests."""

from __future__ import annotations

from engine.events import GoalChange, UserMessage
from engine.goal.types import GoalSnapshot, GoalTombstone


class StepClock:
    """A clock that moves one second per reading, so each append has its own time."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def goal(revision: int, *, goal_id: str = "g1", phase: str = "active") -> GoalChange:
    snapshot = GoalSnapshot.model_validate(
        {
            "id": goal_id,
            "revision": revision,
            "objective": "make the suite pass",
            "phase": phase,
            "max_goal_rounds": 20,
        }
    )
    return GoalChange(snapshot=snapshot)


def cleared(revision: int, *, goal_id: str = "g1") -> GoalChange:
    return GoalChange(tombstone=GoalTombstone(id=goal_id, revision=revision))


def says(text: str) -> UserMessage:
    return UserMessage(text=text)
