"""The cards' state: one owner, in the engine.

What the plan card and the goal card show is decided here and nowhere else, from the plan
(the sidecar and its ``.md``), the goal, the agent (busy, the checklist run, a question
waiting for the owner), and the few choices the owner made on the card itself (a Revise offer
or a confirmation keyboard, each bound to the plan or goal revision it was drawn for; the
planner working on feedback after Keep planning or Revise). Front ends draw what
:class:`engine.api.PlanCardData` says and record message ids; they keep no card state.

:func:`plan_card_state` is the pure rule; :class:`CardChoices` holds the owner's choices. See
docs/telegram.md "The plan card's life".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from engine.api import GoalCardState, PlanCardState
from engine.plan.types import PlanSidecar, PlanState

PlanChoice = Literal["revise_offer", "confirm_discard"]


@dataclass(slots=True)
class _Choices:
    plan: tuple[PlanChoice, str, int] | None = None
    goal: tuple[GoalCardState, str, int] | None = None
    # The plan whose review keyboard waits for the planner's feedback turn to end.
    feedback_plan: str | None = None


class CardChoices:
    """The owner's choices on the cards, per session (process-local, never logged)."""

    def __init__(self) -> None:
        self._by_session: dict[str, _Choices] = {}

    def _of(self, session_id: str) -> _Choices:
        return self._by_session.setdefault(session_id, _Choices())

    def choose_plan(self, session_id: str, choice: PlanChoice, plan_id: str, rev: int) -> None:
        """Show ``choice`` on the plan card while the plan stays at this id and revision."""
        self._of(session_id).plan = (choice, plan_id, rev)

    def choose_goal(self, session_id: str, choice: GoalCardState, goal_id: str, rev: int) -> None:
        """Show ``choice`` on the goal card while the goal stays at this id and revision."""
        self._of(session_id).goal = (choice, goal_id, rev)

    def plan_choice(self, session_id: str, plan_id: str, revision: int) -> PlanChoice | None:
        chosen = self._of(session_id).plan
        return chosen[0] if chosen is not None and chosen[1:] == (plan_id, revision) else None

    def goal_choice(self, session_id: str, goal_id: str, revision: int) -> GoalCardState | None:
        chosen = self._of(session_id).goal
        return chosen[0] if chosen is not None and chosen[1:] == (goal_id, revision) else None

    def clear(self, session_id: str) -> None:
        """Forget the confirmation and Revise keyboards (a command or a press decided)."""
        found = self._of(session_id)
        found.plan = None
        found.goal = None

    def await_feedback(self, session_id: str, plan_id: str) -> None:
        """Keep planning or Revise: hide Approve until the planner's feedback turn ends."""
        self._of(session_id).feedback_plan = plan_id

    def feedback_done(self, session_id: str) -> None:
        """The planner's feedback turn ended (changed plan or not): review comes back."""
        self._of(session_id).feedback_plan = None

    def awaits_feedback(self, session_id: str, plan_id: str) -> bool:
        return self._of(session_id).feedback_plan == plan_id

    def forget(self, session_id: str) -> None:
        """The session ended (``/new``)."""
        self._by_session.pop(session_id, None)


def plan_card_state(
    *,
    phase: PlanState,
    sidecar: PlanSidecar | None,
    review_ready: bool,
    choice: PlanChoice | None,
    awaits_feedback: bool,
    running: bool,
) -> PlanCardState:
    """The plan card's state: the one rule every drawing follows.

    ``review_ready``: ``submit`` was called for this revision or the ``.md`` is valid
    template B. ``running``: a turn runs or the checklist run is armed.
    """
    if phase == "none" or sidecar is None:
        return "none"
    if choice is not None:
        return choice
    if phase == "pre_init":
        return "planning"
    if phase == "post_init":
        return "review" if review_ready and not awaits_feedback else "written"
    if not sidecar.tasks or running:
        return "active"
    if all(t.status in ("completed", "deferred") for t in sidecar.tasks):
        return "done"
    return "paused"


__all__ = ["CardChoices", "PlanChoice", "plan_card_state"]
