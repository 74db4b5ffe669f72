"""The engine as a front end sees it: one facade, decisions returned as values.

The front ends in ``bot/`` and the console demo call :class:`EngineApi`; they never reach into the
plan, goal or agent services. Commands and button presses are decided here and returned as
outcomes ("decide first, act second"): the front end only renders them. Everything the
engine says on its own (turn replies, questions, card changes) goes through
``engine.ports.Channel``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal, Protocol, get_args

from engine.events import Attachment, GoalCheck
from engine.goal.types import GoalSnapshot
from engine.keys import Chat, ChatKey, MessageKey, PersonKey
from engine.plan.types import PlanSidecar, PlanState
from engine.roles.policy import READ_COMMANDS
from engine.roles.types import Person, Role
from engine.worktree.types import DECIDING, WorktreeView

# The command plane's command names; `/show-plan`, `/show_plan` and `/show-plan@bot` all arrive
# as "show_plan", and `/start` as "help". ``/new`` is not among them: it rebinds a chat key
# (:meth:`EngineApi.new_session`), which a session's command cannot do; nor is ``/project``
# (:meth:`EngineApi.project`), for the same reason.
CommandName = Literal[
    "plan", "show_plan", "execute", "discard", "goal", "stop", "status", "help", "usage", "setup"
]
# Anyone in an allowed group may run these: the command plane's share of the permission
# table's read-only commands (engine.roles.policy.READ_COMMANDS). They change nothing, so their
# command/run is logged without the reply waiting (engine.commands).
READ_ONLY_COMMANDS: frozenset[str] = READ_COMMANDS & frozenset(get_args(CommandName))

# The plan card's state, decided by the engine (engine.cards.plan_card_state). ``review``
# is the card with Approve / Keep planning / Discard; ``active`` a checklist being worked
# through; ``paused`` an Active checklist with tasks left that is not running (after /stop,
# a restart or a stall: Resume / Discard); ``revise_offer`` carries Revise plan / Cancel;
# ``confirm_discard`` swaps the keyboard for Yes, discard / Cancel (same revision).
PlanCardState = Literal[
    "none",
    "planning",
    "written",
    "review",
    "active",
    "paused",
    "revise_offer",
    "confirm_discard",
    "done",
]
GoalCardState = Literal["none", "live", "confirm_clear"]

# The button protocol. A press names its card kind (``p`` plan, ``g`` goal, ``a`` tool
# approval), an action of that kind, the first 8 characters of the plan, goal or request id,
# and the revision the button was drawn for. The front end encodes and decodes it
# (bot/presses.py); the command plane matches these constants, so a typo fails to import.
PressKind = Literal["p", "g", "a"]
PLAN_APPROVE: Final = "approve"
PLAN_KEEP: Final = "keep"
PLAN_DISCARD: Final = "discard"
PLAN_DISCARD_YES: Final = "discard_yes"
PLAN_REVISE: Final = "revise"
PLAN_CANCEL: Final = "cancel"
PLAN_RESUME: Final = "resume"
# The Done card of a plan that ran in a git worktree (docs/projects.md): bound to the ended
# plan's id and revision like every plan button.
PLAN_MERGE: Final = "merge"
PLAN_PUSH: Final = "push"
PLAN_KEEP_BRANCH: Final = "keep_branch"
PLAN_DROP: Final = "drop"
PLAN_DROP_YES: Final = "drop_yes"
PLAN_DROP_NO: Final = "drop_no"
BRANCH_ACTIONS: Final = frozenset(
    {PLAN_MERGE, PLAN_PUSH, PLAN_KEEP_BRANCH, PLAN_DROP, PLAN_DROP_YES, PLAN_DROP_NO}
)
# On a run the daily cap paused: raise the cap (PlanCardData.raise_cap) and resume.
PLAN_RAISE_CAP: Final = "raise_cap"
GOAL_PAUSE: Final = "pause"
GOAL_RESUME: Final = "resume"
GOAL_START: Final = "start"
GOAL_CLEAR: Final = "clear"
GOAL_CLEAR_YES: Final = "clear_yes"
GOAL_CANCEL: Final = "cancel"
# ``rule`` is the Allow button of a call denied in an unattended turn.
APPROVAL_ONCE: Final = "once"
APPROVAL_SESSION: Final = "session"
APPROVAL_DENY: Final = "deny"
APPROVAL_RULE: Final = "rule"
PRESS_ACTIONS: Final[dict[PressKind, frozenset[str]]] = {
    "p": frozenset(
        {
            PLAN_APPROVE,
            PLAN_KEEP,
            PLAN_DISCARD,
            PLAN_DISCARD_YES,
            PLAN_REVISE,
            PLAN_CANCEL,
            PLAN_RESUME,
            *BRANCH_ACTIONS,
            PLAN_RAISE_CAP,
        }
    ),
    "g": frozenset({GOAL_PAUSE, GOAL_RESUME, GOAL_START, GOAL_CLEAR, GOAL_CLEAR_YES, GOAL_CANCEL}),
    "a": frozenset({APPROVAL_ONCE, APPROVAL_SESSION, APPROVAL_DENY, APPROVAL_RULE}),
}
SHORT_ID_LEN: Final = 8
# The answer to a press on a card that is out of date (or forged): it changes nothing.
STALE_TEXT: Final = "This card is out of date."
# A card's buttons as actions, in rows: what the card offers in its state now (engine.cards
# decides it, the press is accepted only for an action on the card; a front end gives each
# action its label and draws it).
CardActions = tuple[tuple[str, ...], ...]


# The one table of card actions: which buttons each card state offers. engine.cards puts them
# in the card data; the front end draws exactly these (a label per action), and the command
# plane accepts a press only when its action is on the card now, at the card's revision (and
# the presser's role allows it: engine.roles). A stale or forged press is "out of date".
_PLAN_ACTIONS: dict[PlanCardState, CardActions] = {
    "review": ((PLAN_APPROVE,), (PLAN_KEEP, PLAN_DISCARD)),
    # A live plan always offers Discard.
    "planning": ((PLAN_DISCARD,),),
    "written": ((PLAN_DISCARD,),),
    "active": ((PLAN_DISCARD,),),
    "paused": ((PLAN_RESUME, PLAN_DISCARD),),
    "revise_offer": ((PLAN_REVISE, PLAN_CANCEL),),
    "confirm_discard": ((PLAN_DISCARD_YES, PLAN_CANCEL),),
}


def plan_actions(state: PlanCardState, *, raise_cap: int | None = None) -> CardActions:
    """The plan card's actions in ``state``; a run the daily cap paused (``raise_cap``) also
    offers Raise cap."""
    if state == "paused" and raise_cap is not None:
        return ((PLAN_RESUME, PLAN_RAISE_CAP), (PLAN_DISCARD,))
    return _PLAN_ACTIONS.get(state, ())


# The card states a plan at one revision may be drawn in. What is process-local changes no
# revision (a turn running or not, the owner's Revise or Discard choice, the planner working on
# feedback), so a card drawn at this revision may show any of them: a press carries an action
# of one of these, or it is out of date.
_PHASE_CARD_STATES: dict[PlanState, tuple[PlanCardState, ...]] = {
    "pre_init": ("planning", "confirm_discard"),
    "post_init": ("written", "review", "confirm_discard"),
    "active": ("active", "paused", "revise_offer", "confirm_discard", "done"),
}


def plan_actions_at(phase: PlanState, *, raise_cap: int | None = None) -> frozenset[str]:
    """Every action a plan card drawn at the plan's current revision may carry in ``phase``
    (the union of :func:`plan_actions` over the card states of that phase)."""
    return frozenset(
        action
        for state in _PHASE_CARD_STATES.get(phase, ())
        for row in plan_actions(state, raise_cap=raise_cap)
        for action in row
    )


def branch_actions(view: WorktreeView | None) -> CardActions:
    """A finished plan's branch actions while its branch waits for a decision (Merge, or
    Push branch with a remote; Keep branch; Discard changes, confirmed once)."""
    if view is None or view.phase not in DECIDING:
        return ()
    if view.confirm_drop:
        return ((PLAN_DROP_YES, PLAN_DROP_NO),)
    keep = (PLAN_KEEP_BRANCH, PLAN_DROP)
    if view.phase == "conflict":
        return (keep,)
    return ((PLAN_PUSH if view.push else PLAN_MERGE,), keep)


def goal_actions(
    goal: GoalSnapshot | None, *, armed: bool | None, confirm_clear: bool
) -> CardActions:
    """The goal card's actions: Pause while it runs, Start for a goal the model proposed,
    Resume otherwise while it can go on; Clear; a task goal is a label and offers none.

    ``armed`` is process-local and changes without a new revision (``/stop``, a restart), so
    a card drawn at this revision may show Pause or Resume: ``None`` gives the actions of
    either (what a press at this revision may carry)."""
    if goal is None or goal.source == "task":
        return ()
    if confirm_clear:
        return ((GOAL_CLEAR_YES, GOAL_CANCEL),)
    firsts: tuple[str, ...] = ()
    if goal.phase == "active":
        if armed is None or armed:
            firsts += (GOAL_PAUSE,)
        if not armed:
            start = goal.source == "model" and goal.rounds_started == 0
            firsts += (GOAL_START if start else GOAL_RESUME,)
    elif goal.phase == "paused" or (goal.phase == "blocked" and goal.rounds_left > 0):
        firsts = (GOAL_RESUME,)
    return ((*firsts, GOAL_CLEAR),)


def goal_actions_at(goal: GoalSnapshot | None) -> frozenset[str]:
    """Every action a goal card drawn at the goal's current revision may carry: armed or not,
    with the Clear confirmation or without (both process-local: no new revision)."""
    return frozenset(
        action
        for confirm in (False, True)
        for row in goal_actions(goal, armed=None, confirm_clear=confirm)
        for action in row
    )


def offers(actions: CardActions, action: str) -> bool:
    """Whether ``action`` is one of the card's actions."""
    return any(action in row for row in actions)


@dataclass(frozen=True, slots=True)
class Press:
    """A decoded button press: its kind and action, the id prefix, the revision it was drawn
    for. Only the shape is checked; whether it still counts is the engine's decision."""

    kind: PressKind
    action: str
    short_id: str
    revision: int


CardAction = Literal["refresh", "restick"]


@dataclass(frozen=True, slots=True)
class PlanCardData:
    """Everything the plan card is drawn from; the front end draws exactly this."""

    state: PlanCardState
    sidecar: PlanSidecar | None
    busy: bool = False
    # Set when the plan just ended: the card shows the last sidecar with this ending.
    ended: Literal["completed", "discarded", "abandoned"] | None = None
    # The plan text (the session .md) while it is up for review: the card carries it, or
    # its steps (title, Done when lines; parsed once per revision, off the loop) when long.
    markdown: str | None = None
    steps: tuple[tuple[str, tuple[str, ...]], ...] | None = None
    # ... and the checks it names, with where ("step N" or "whole plan"), parsed the same way.
    checks: tuple[tuple[str, str], ...] | None = None
    # Something waits for the owner: the review, a question, a tool approval.
    waiting: str | None = None
    # Wall-clock time of the checklist's last progress while it runs.
    last_progress_at: float | None = None
    # Why an Active checklist is not running (stuck, the daily cap, stopped, restarted).
    halted: str | None = None
    # In review with more than one approval needed: who approved this revision so far, and
    # how many approvals it needs (PLANGATE_PLAN_APPROVALS).
    approvals: tuple[str, ...] = ()
    approvals_needed: int = 1
    # The plan's git worktree: where it runs, and at Done its diff and the branch buttons.
    worktree: WorktreeView | None = None
    # Paused by the daily cap: the cap "Raise cap" would set (the card offers it then).
    raise_cap: int | None = None
    # plangate is running a task's checks now (docs/checks.md): "task 1: `pytest -q`".
    checking: str | None = None
    # The project's setup (docs/environments.md): running now; the tail of a failed run's
    # output; the paused run's button is Retry (it runs the setup again).
    setting_up: bool = False
    setup_tail: str | None = None
    retry: bool = False
    # The card's actions, bound to the sidecar's id and revision (plan_actions above);
    # at Done, the branch's, bound to the worktree's plan id and revision (branch_actions).
    actions: CardActions = ()
    branch_actions: CardActions = ()


@dataclass(frozen=True, slots=True)
class GoalCardData:
    """Everything the goal card is drawn from; ``armed`` is process-local."""

    state: GoalCardState
    goal: GoalSnapshot | None
    armed: bool = False
    # Tokens the goal's rounds used so far (shown against its budget).
    tokens_used: int = 0
    # The goal's last check run (docs/checks.md), when its checks ran.
    last_check: GoalCheck | None = None
    # The card's actions, bound to the goal's id and revision (goal_actions above).
    actions: CardActions = ()
    # Where the goal card is (EngineApi.set_goal_card: the channel's chat and message keys),
    # None: no card yet.
    chat_id: ChatKey | None = None
    card_id: MessageKey | None = None


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a command or a press decided. ``reply`` is plain text (the front end escapes it).

    ``plan_card`` / ``goal_card``: redraw the card in place (``refresh``) or post it anew at
    the bottom and strip the old keyboard (``restick``); what the card shows is the engine's
    card data at drawing time. ``await_feedback``: the owner's next message in this session is
    feedback for the planner (Keep planning, Revise). ``alert``: answer a button press with
    an alert rather than a toast. ``stale``: the pressed card is out of date.
    """

    reply: str | None = None
    plan_card: CardAction | None = None
    goal_card: CardAction | None = None
    await_feedback: bool = False
    alert: bool = False
    dropped: Sequence[str] = field(default_factory=tuple)
    # A press on a card that is out of date: strip that message's keyboard.
    stale: bool = False


@dataclass(frozen=True, slots=True)
class RestoredGoal:
    """A live goal found at start-up: it comes up disarmed, and the owner gets Resume."""

    session_id: str
    goal: GoalSnapshot


class EngineApi(Protocol):
    """What a front end calls. Chats, people and messages are the channel's opaque keys
    (``engine.keys``); a chat is passed as a :class:`engine.keys.Chat` where the engine may
    bind it (its kind and a thread's parent are recorded then)."""

    async def session_for_chat(self, chat: Chat) -> str:
        """The session bound to the chat's key, created and bound on first use."""
        ...

    async def new_session(self, chat: Chat, *, actor: PersonKey) -> Outcome:
        """``/new``: end the key's session (cancel, disarm, archive), bind a fresh one."""
        ...

    async def migrate_chat(self, old: ChatKey, new: ChatKey) -> list[str]:
        """A group moved to a new key: bind its sessions (and threads) there; returns them.

        Each moved plan's ``flow`` names the new chat and no card (the old group's messages
        can no longer be edited), so the next drawing posts the card anew. Idempotent.
        """
        ...

    async def project(self, chat: Chat, args: str, *, actor: PersonKey) -> Outcome:
        """``/project [name]`` (owner only): show the chat key's project, or bind the key to
        the project called ``name`` (a fresh session there); refused while a plan is live."""
        ...

    async def user_message(
        self,
        session_id: str,
        text: str,
        *,
        actor: PersonKey | None,
        message_id: MessageKey | None,
        feedback: bool = False,
        answer: bool = False,
        attachments: Sequence[Attachment] = (),
    ) -> None:
        """Queue a message for the agent and return at once (never waits for the turn).

        ``feedback``: the answer to Keep planning / Revise; ``answer``: the answer to one of
        the agent's questions (an option, or a reply to it). The actor's role must allow it
        (an approver's words reach the agent only as these two)."""
        ...

    def inbox_dir(self, session_id: str) -> Path | None:
        """The folder the session's uploads are saved in (engine.inbox); None: uploads off."""
        ...

    async def command(
        self,
        session_id: str,
        name: CommandName,
        args: str,
        *,
        actor: PersonKey | None,
        actor_name: str = "",
    ) -> Outcome:
        """Run a command in the command plane (logged as ``command/run``; opens no turn).

        ``actor`` is the person's key (``None``: nobody known); the actor's role in the
        session's chat must allow the command, else the reply says what the role allows.
        ``actor_name`` is how the actor is shown (recorded with the decisions they make).
        """
        ...

    async def press(
        self,
        session_id: str,
        press: Press,
        *,
        actor: PersonKey | None,
        message_id: MessageKey | None = None,
        actor_name: str = "",
    ) -> Outcome:
        """A button press, bound to the plan or goal revision it was drawn for.

        Kind ``a`` is a tool approval button, bound to its request id (revision always 0).

        A stale press (id or revision no longer current, the action not allowed now, or a
        plan card other than the one ``flow`` names: ``message_id`` is the pressed message)
        is answered "This card is out of date." and changes nothing.
        """
        ...

    async def role_of(self, chat: ChatKey, user_id: PersonKey | None) -> Role:
        """The role of ``user_id`` in the chat: owner, approver or member (docs/roles.md).

        A bound thread's roles are its parent's."""
        ...

    async def team(
        self,
        chat: Chat,
        args: str,
        *,
        actor: PersonKey | None,
        actor_name: str = "",
        target: Person | None = None,
    ) -> Outcome:
        """``/team``: list the chat's roles, or (owners) ``add <user> approver`` / ``remove
        <user>``. ``target`` is the person the front end found for the command (the message
        replied to, an ``@username`` seen in the chat, or the person a typed id names)."""
        ...

    async def plan_card(self, session_id: str) -> PlanCardData: ...

    async def goal_card(self, session_id: str) -> GoalCardData: ...

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
        """Remember the plan card's (and plan-text messages') keys in the sidecar's ``flow``:
        ``chat_id`` the chat's room, ``thread_id`` the thread's key (``None`` outside one).

        Call it the moment the channel returns a card's key, before any other call for that
        card. With ``plan_id`` it writes only while that plan is the live one (or the one
        that just ended, whose card still shows it).
        """
        ...

    async def set_goal_card(
        self, session_id: str, *, chat_id: ChatKey | None, card_id: MessageKey | None
    ) -> None:
        """Remember the goal card's message (``card_id`` None: no card; the next drawing posts
        one). Call it the moment the channel returns a card's key; :meth:`goal_card` tells it."""
        ...

    async def start(self, *, recover: bool = True) -> list[RestoredGoal]:
        """Start the scheduler; return the live goals that came up disarmed.

        ``recover=False`` (a replica among several): load no chat now; each is recovered when
        this replica takes its lease (:meth:`chat_taken`)."""
        ...

    async def chat_taken(self, chat: ChatKey) -> list[RestoredGoal]:
        """This replica acquired the lease of the room ``chat`` at a new epoch (a chat it did
        not hold, or held at another epoch): recover it as a restart does. A turn the previous
        owner left open is closed as interrupted and the chat told once; an Active checklist
        shows paused with Resume; nothing is re-armed. Returns the live goals that came up
        disarmed (show them with Resume, as after a restart)."""
        ...

    async def chat_lost(self, chat: ChatKey) -> list[str]:
        """This replica no longer holds the lease of the room ``chat`` (a renewal failed or
        returned another epoch, or a call raised ``LeaseLost``): cancel its sessions' turns,
        kill their bash processes, disarm their goals, forget what was loaded; nothing is
        written or sent for them here. Idempotent; returns the sessions let go."""
        ...

    async def shutdown(self) -> None: ...


# --- what front ends share -------------------------------------------------------------------
#
# A front end (bot/) reaches the engine through this module, the ports (engine.ports, the
# channel, the model and speech ports), and the event and value types (engine.events,
# engine.errors, engine.<package>.types), plus engine.text and engine.tasks
# (tests/test_architecture.py). The pure helpers below are the rest of what a front end uses:
# who may do what (engine.roles), how an upload is named and kept (engine.inbox), the wording
# and reading of a plan's steps and checks, a pending tool request as the chat shows it.
from engine.agent.checklist import current_task, task_label  # noqa: E402
from engine.approval.policy import ApprovalView  # noqa: E402
from engine.checks.report import how_it_ended  # noqa: E402
from engine.checks.watch import runner_file  # noqa: E402
from engine.inbox import clean_name, human_size, inline_text, save_upload  # noqa: E402
from engine.plan.extract import extract_work_items, plan_checks  # noqa: E402
from engine.roles.commands import parse_team_args  # noqa: E402
from engine.roles.policy import (  # noqa: E402
    ALERT_TEXTS,
    KNOWN_COMMANDS,
    ROLE_TEXT,
    command_action,
    may,
    message_action,
    press_action,
    refusal_text,
    words_action,
)

__all__ = [
    "ALERT_TEXTS",
    "KNOWN_COMMANDS",
    "ROLE_TEXT",
    "ApprovalView",
    "clean_name",
    "command_action",
    "current_task",
    "extract_work_items",
    "how_it_ended",
    "human_size",
    "inline_text",
    "may",
    "message_action",
    "parse_team_args",
    "plan_checks",
    "press_action",
    "refusal_text",
    "runner_file",
    "save_upload",
    "task_label",
    "words_action",
]
