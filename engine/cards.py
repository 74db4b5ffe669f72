"""The cards' state: one owner, in the engine.

What the plan card and the goal card show is decided here and nowhere else, from the plan
(the sidecar and its ``.md``), the goal, the agent (busy, the checklist run, a question
waiting for the owner), and the few choices the owner made on the card itself (a Revise offer
or a confirmation keyboard, each bound to the plan or goal revision it was drawn for; the
planner working on feedback after Keep planning or Revise). Front ends draw what
:class:`engine.api.PlanCardData` says and record message ids; they keep no card state.

:func:`plan_card_state` is the pure rule; :class:`CardChoices` holds the owner's choices;
:class:`Cards` reads the services and answers what each card shows now, keeps the plan card's
message ids in the sidecar's ``flow`` (the goal card's in the log: ``goal/card``), and asks
the channel to redraw when a card changes. docs/architecture.md has the actions table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from engine.agent.controller import InboundMessage
from engine.agent.turn import TurnResult
from engine.api import (
    GoalCardData,
    GoalCardState,
    PlanCardData,
    PlanCardState,
    branch_actions,
    goal_actions,
    plan_actions,
)
from engine.events import FeedbackSource, GoalCardPosted
from engine.goal.types import GoalSnapshot
from engine.keys import ChatKey, MessageKey
from engine.plan.digest import PlanDigest
from engine.plan.service import PlanChange
from engine.plan.types import PlanSidecar, PlanState
from engine.services import Services
from engine.tasks import safe_call
from engine.text import clip
from engine.usage.ledger import raised_cap
from engine.worktree.script import SETUP_PATH, SetupScript
from engine.worktree.types import WorktreeView

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


PlanEnding = Literal["completed", "discarded", "abandoned"]
# The store's archive reasons that end a plan in a way its card names; anything else discards.
_ENDINGS: dict[str, PlanEnding] = {"completed": "completed", "abandoned": "abandoned"}


class Cards:
    """What the plan card and the goal card show now; the one place front ends ask."""

    def __init__(self, services: Services, *, plan_approvals: int = 1) -> None:
        """``plan_approvals``: the approvals a plan needs (PLANGATE_PLAN_APPROVALS). The cards
        subscribe to the plans, the goals and the agents' turns."""
        self._plans = services.plans
        self._goals = services.goals
        self._agents = services.agents
        self._approvals = services.approvals
        self._usage = services.usage
        self._votes = services.votes
        self._channel = services.channel
        self.plan_approvals = plan_approvals
        self._worktrees = services.worktrees
        self._log = services.log
        # The goal card's (chat, message) per session, read from the log once (goal/card).
        self._goal_cards: dict[str, tuple[ChatKey | None, MessageKey | None]] = {}
        self._setup = services.setup
        # The owner's choices on the cards; the command plane and /new change them.
        self.choices = CardChoices()
        # The last plan of a session that just ended, so its card can say how it ended.
        self._ended: dict[str, tuple[PlanSidecar, PlanEnding]] = {}
        # A card key the channel returned for a plan that ended before its change reached the cards
        # (the service delivers it after the criteria effects): (plan id, chat id, card id),
        # applied to the ended plan when the change arrives.
        self._late_cards: dict[str, tuple[str, ChatKey, MessageKey]] = {}
        self._plans.add_listener(self._on_plan_change)
        self._goals.add_listener(self._on_goal_change)
        self._agents.listen_turns(self.on_turn_end)

    async def plan_card(self, session_id: str) -> PlanCardData:
        """What the plan card shows now (:func:`plan_card_state` is the rule)."""
        sidecar = await self._plans.current(session_id)
        controller = self._agents.controller(session_id)
        # A turn running now, not the drain task's life: a run that stopped is drawn
        # stopped at once, while its last turn is still closing.
        busy = controller.working
        worktree = await self._worktrees.view(session_id)
        if sidecar is None:
            ended = self._ended.get(session_id)
            if ended is None:
                # After a restart a finished plan's branch may still wait for a decision.
                waiting_plan = await self._worktrees.ended_sidecar(session_id)
                if waiting_plan is not None:
                    ended = (waiting_plan, "completed")
            if ended is not None:
                final: PlanCardState = "done" if ended[1] == "completed" else "none"
                # A finished plan's branch, or what became of a discarded plan's branch.
                mine = worktree is not None and (
                    worktree.plan_id == ended[0].id or ended[1] != "completed"
                )
                shown = worktree if mine else None
                return PlanCardData(
                    state=final,
                    sidecar=ended[0],
                    busy=busy,
                    ended=ended[1],
                    worktree=shown,
                    branch_actions=branch_actions(shown),
                )
            return PlanCardData(state="none", sidecar=None, busy=busy)
        phase = await self._plans.state(session_id)
        run = controller.checklist
        # The plan text's digest (size, template B, steps, checks), once per revision.
        digest = await self._plans.digest(session_id) if phase == "post_init" else None
        review_ready = digest is not None and _review_ready(sidecar, digest)
        state = plan_card_state(
            phase=phase,
            sidecar=sidecar,
            review_ready=review_ready,
            choice=self.choices.plan_choice(session_id, sidecar.id, sidecar.revision),
            awaits_feedback=self.choices.awaits_feedback(session_id, sidecar.id),
            running=run.armed or (busy and run.paused is None),
        )
        waiting: str | None = None
        approval = self._approvals.pending(session_id)
        if approval is not None:
            what = approval.command or approval.tool
            if approval.why == "network":
                what += " with the network"
            waiting = f"approval of `{clip(what, 80, one_line=True)}`"
        elif controller.awaiting_answer and not busy:
            waiting = "a question"
        elif state == "review":
            waiting = "your review"
        halted: str | None = None
        raise_cap: int | None = None
        setup = worktree if _runs_in(worktree, sidecar) else None
        retry = False
        setup_tail: str | None = None
        if state == "paused" and setup is not None and setup.setup == "failed":
            # The setup failed or a restart cut it off: Retry runs it again (never by itself).
            why = setup.setup_note.split("\n", 1)
            halted = f"Setup failed ({why[0]}): Retry runs it again"
            if run.paused is not None and run.paused.kind == "setup":
                halted = run.paused.text
            setup_tail = why[1] if len(why) > 1 else None
            retry = True
        elif state == "paused" and run.paused is not None and run.paused.kind == "setup":
            halted, retry = run.paused.text, True
        elif state == "paused":
            if run.paused is not None:
                halted = run.paused.text
                cap = self._usage.daily_cap
                if run.paused.kind == "daily-cap" and cap is not None:
                    raise_cap = raised_cap(cap, self._usage.today().tokens)
            else:
                halted = "Paused: Resume runs the rest of the checklist."
        actions = plan_actions(state, raise_cap=raise_cap)
        shown = worktree if _runs_in(worktree, sidecar) else None
        approvals: tuple[str, ...] = ()
        if phase == "post_init" and self.plan_approvals > 1:
            votes = await self._votes.votes(session_id, sidecar.id, sidecar.revision)
            approvals = tuple(v.name or str(v.user_id) for v in votes)
        return PlanCardData(
            state=state,
            sidecar=sidecar,
            busy=busy,
            markdown=await self._review_text(session_id) if review_ready else None,
            steps=digest.steps if digest is not None and review_ready else None,
            checks=digest.checks if digest is not None and review_ready else None,
            waiting=waiting,
            last_progress_at=run.last_progress_at if run.armed else None,
            halted=halted,
            approvals=approvals,
            approvals_needed=self.plan_approvals,
            worktree=shown,
            raise_cap=raise_cap,
            checking=self._plans.checking(session_id),
            setting_up=setup is not None and setup.setup == "running",
            setup_tail=setup_tail,
            retry=retry,
            actions=actions,
            # The branch's buttons show where the plan's own do not (its Done card).
            branch_actions=() if actions else branch_actions(shown),
        )

    async def _review_text(self, session_id: str) -> str | None:
        """The plan text up for review, with the project's setup script after it: approving
        the plan approves that exact text (docs/environments.md)."""
        text = await self._plans.md_text(session_id)
        if text is None or self._setup is None:
            return text
        project = await self._worktrees.project_of(session_id)
        script = await self._setup.review_script(session_id, project)
        if script is None:
            return text
        return text.rstrip() + "\n\n" + setup_section(script)

    async def goal_card(self, session_id: str) -> GoalCardData:
        """What the goal card shows now: the goal, armed or not, and its tokens so far."""
        goal = await self._goals.get(session_id)
        if goal is None or goal.source == "task":
            # A task goal is only a label of the plan card's current task: no goal card.
            chat_id, card_id = await self.goal_card_at(session_id)
            return GoalCardData(state="none", goal=None, chat_id=chat_id, card_id=card_id)
        state = self.choices.goal_choice(session_id, goal.id, goal.revision) or "live"
        armed = self._goals.is_armed(session_id)
        chat_id, card_id = await self.goal_card_at(session_id)
        return GoalCardData(
            chat_id=chat_id,
            card_id=card_id,
            state=state,
            goal=goal,
            armed=armed,
            actions=goal_actions(goal, armed=armed, confirm_clear=state == "confirm_clear"),
            tokens_used=await self._usage.goal_tokens(session_id, goal.id),
            last_check=await self._goals.last_check(session_id),
        )

    async def goal_card_at(self, session_id: str) -> tuple[ChatKey | None, MessageKey | None]:
        """The chat and message of the session's goal card, ``(None, None)`` when none."""
        found = self._goal_cards.get(session_id)
        if found is None:
            found = (None, None)
            for stored in await self._log.read(session_id, types=("goal/card",)):
                if isinstance(stored.event, GoalCardPosted):
                    found = (stored.event.chat_id, stored.event.card_id)
            self._goal_cards[session_id] = found
        return found

    async def set_goal_card(
        self, session_id: str, *, chat_id: ChatKey | None, card_id: MessageKey | None
    ) -> None:
        """Remember where the goal card is (``card_id`` None: no card now): logged as
        ``goal/card``, so a restart keeps editing the same message."""
        if await self.goal_card_at(session_id) == (chat_id, card_id):
            return
        self._goal_cards[session_id] = (chat_id, card_id)
        await self._log.append(session_id, [GoalCardPosted(chat_id=chat_id, card_id=card_id)])

    async def set_plan_flow(
        self,
        session_id: str,
        *,
        chat_id: ChatKey,
        thread_id: ChatKey | None,
        card_id: MessageKey | None,
        review_ids: Sequence[MessageKey] | None = None,
        plan_id: str | None = None,
    ) -> None:
        """Remember the plan card's (and plan-text messages') ids in the sidecar's ``flow``.

        Written the moment the channel returns the message's key. A plan that ended
        meanwhile keeps its last card in memory, so its final drawing edits that message.
        """
        sidecar = await self._plans.current(session_id)
        written = False
        if sidecar is not None and (plan_id is None or sidecar.id == plan_id):
            flow = sidecar.flow.model_copy(
                update={
                    "chat_id": chat_id,
                    "thread_id": thread_id,
                    "card_id": card_id,
                    "review_ids": list(review_ids)
                    if review_ids is not None
                    else list(sidecar.flow.review_ids),
                }
            )
            # The plan may end between the read and the write: set_flow checks under its lock.
            written = await self._plans.set_flow(session_id, flow, plan_id=sidecar.id)
        ended = self._ended.get(session_id)
        if written or card_id is None:
            return
        if ended is not None and plan_id in (None, ended[0].id):
            self._ended[session_id] = (_with_card(ended[0], chat_id, card_id), ended[1])
        elif plan_id is not None and (sidecar is None or sidecar.id == plan_id):
            self._late_cards[session_id] = (plan_id, chat_id, card_id)

    async def on_turn_end(
        self, session_id: str, message: InboundMessage, result: TurnResult
    ) -> None:
        """Card state that turns decide: the planner's feedback turn, a question asked."""
        redraw = False
        if isinstance(message.source, FeedbackSource):
            # Whatever the planner did with the owner's words, the review keyboard comes back.
            sidecar = await self._plans.current(session_id)
            if sidecar is not None and self.choices.awaits_feedback(session_id, sidecar.id):
                self.choices.feedback_done(session_id)
                redraw = True
        if result.asked:  # the card says a question waits for the owner
            redraw = True
        if redraw:
            await self.plan_changed(session_id)

    async def plan_changed(self, session_id: str) -> None:
        """Ask the front end to redraw the plan card (a failure is logged, never raised)."""
        await safe_call("plan_changed", self._channel.plan_changed(session_id))

    async def _on_plan_change(self, change: PlanChange) -> None:
        late = self._late_cards.pop(change.session_id, None)
        if change.after is None and change.before is not None:
            ending = _ENDINGS.get(change.archived or "", "discarded")
            last = change.archived_sidecar or change.before
            if late is not None and late[0] == last.id:
                last = _with_card(last, late[1], late[2])
            self._ended[change.session_id] = (last, ending)
        elif change.after is not None:
            self._ended.pop(change.session_id, None)
        await self.plan_changed(change.session_id)

    async def _on_goal_change(self, session_id: str, goal: GoalSnapshot | None) -> None:
        await safe_call("goal_changed", self._channel.goal_changed(session_id))


def setup_section(script: SetupScript) -> str:
    """The setup script as the review shows it after the plan: its name, hash and text."""
    fence = "````" if "```" in script.text else "```"
    return (
        f"## Setup script\n\n`{SETUP_PATH}` (sha256 `{script.short}`) runs in the plan's "
        "worktree with the network before the first step; approving the plan approves this "
        f"text:\n\n{fence}bash\n{script.text.rstrip()}\n{fence}\n"
    )


def _review_ready(sidecar: PlanSidecar, digest: PlanDigest) -> bool:
    """Review once ``submit`` was called for this revision or template B is valid; never for
    a text over the size limit (the digest is made off the loop: a card redrawn at one
    revision parses nothing)."""
    if digest.too_big:
        return False
    return sidecar.submitted_revision == sidecar.revision or digest.approvable


def _with_card(sidecar: PlanSidecar, chat_id: ChatKey, card_id: MessageKey) -> PlanSidecar:
    flow = sidecar.flow.model_copy(update={"chat_id": chat_id, "card_id": card_id})
    return sidecar.model_copy(update={"flow": flow})


def _runs_in(worktree: WorktreeView | None, sidecar: PlanSidecar) -> bool:
    """The worktree record says where this live plan runs (not an earlier plan's ending)."""
    if worktree is None:
        return False
    if worktree.phase in ("live", "creating"):
        return True
    return worktree.phase in ("in_place", "failed") and worktree.plan_id == sidecar.id


__all__ = [
    "CardChoices",
    "Cards",
    "PlanChoice",
    "PlanEnding",
    "plan_card_state",
]
