"""The session event log's vocabulary (docs/architecture.md).

Events are a pydantic discriminated union on ``type``. Storage keeps each as
``(session_id, seq, type, at, payload)``; :class:`StoredEvent` is that row seen by the engine.
The append is the commit point: an event that is not in the log did not happen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from engine.checks.types import CheckRun
from engine.goal.types import GoalSnapshot, GoalTombstone
from engine.keys import LegacyChatKey, LegacyMessageKey, LegacyPersonKey
from engine.worktree.types import WorktreeRecord


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# --- user message sources -------------------------------------------------------------------


class HumanSource(_Event):
    kind: Literal["human"] = "human"
    user_id: LegacyPersonKey | None = None
    message_id: LegacyMessageKey | None = None


class GoalRoundSource(_Event):
    kind: Literal["goal"] = "goal"
    goal_id: str
    revision: int
    round: int


class SeedSource(_Event):
    """The execution turn queued by an approval (or the model-driven seed fallback)."""

    kind: Literal["seed"] = "seed"
    plan_id: str | None = None


class FeedbackSource(_Event):
    """The owner's answer after Keep planning or Revise."""

    kind: Literal["feedback"] = "feedback"
    user_id: LegacyPersonKey | None = None
    message_id: LegacyMessageKey | None = None


MessageSource = Annotated[
    HumanSource | GoalRoundSource | SeedSource | FeedbackSource, Field(discriminator="kind")
]


def is_attended(source: MessageSource) -> bool:
    """Whether a person can answer in a turn opened by ``source``: the one rule.

    Every turn a person started is attended (a message, feedback, Approve, ``/execute``,
    Resume: those queue ``seed`` turns), and so is the checklist run they armed (its
    continuations are ``seed`` too). Only a goal round, started by the scheduler, is not.
    """
    return not isinstance(source, GoalRoundSource)


# --- events ---------------------------------------------------------------------------------


class Attachment(_Event):
    """A file the owner sent with a message, saved in the session inbox (engine.inbox).

    The log keeps the reference, never the bytes: ``path`` is the saved file (absolute),
    ``name`` its clean name in the inbox. ``kind`` ``image`` goes to a vision model as an image
    part (read from ``path`` each time the context is built). ``text`` is a small text file's
    content, inlined into the prompt.
    """

    kind: Literal["file", "image"] = "file"
    path: str
    name: str
    size: int
    mime: str = ""
    text: str | None = None


class UserMessage(_Event):
    type: Literal["user/message"] = "user/message"
    text: str
    source: MessageSource = Field(default_factory=HumanSource)
    attachments: tuple[Attachment, ...] = ()


class AssistantMessage(_Event):
    type: Literal["assistant/message"] = "assistant/message"
    text: str = ""


class ToolCall(_Event):
    type: Literal["tool/call"] = "tool/call"
    call_id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ToolResult(_Event):
    type: Literal["tool/result"] = "tool/result"
    call_id: str
    name: str
    content: str
    is_error: bool = False
    interrupted: bool = False


class TurnStart(_Event):
    type: Literal["turn/start"] = "turn/start"
    turn_id: str


TurnOutcome = Literal["completed", "cancelled", "failed", "interrupted", "max_steps"]


class TurnEnd(_Event):
    type: Literal["turn/end"] = "turn/end"
    turn_id: str
    outcome: TurnOutcome
    detail: str = ""


class CommandRun(_Event):
    """A command-plane action (slash command or button), logged without opening a turn."""

    type: Literal["command/run"] = "command/run"
    name: str
    args: str = ""
    actor: LegacyPersonKey | None = None
    data: dict[str, Any] = Field(default_factory=dict)


class PlanMode(_Event):
    """Plan mode committed: ``active`` means Editing (docs/plan-lifecycle.md)."""

    type: Literal["plan/mode"] = "plan/mode"
    active: bool


class PlanChanged(_Event):
    type: Literal["plan/changed"] = "plan/changed"
    status: str
    revision: int
    plan_id: str | None = None
    reason: str = ""


class GoalChange(_Event):
    """A goal revision: a full snapshot, or a tombstone when cleared (exactly one is set)."""

    type: Literal["goal/change"] = "goal/change"
    snapshot: GoalSnapshot | None = None
    tombstone: GoalTombstone | None = None


def goal_claim(event: SessionEvent) -> tuple[str, int] | None:
    """The ``(goal id, revision)`` a ``goal/change`` takes in its session's log, else ``None``.

    The goal compare-and-set: every store refuses an append whose claim its session already
    holds (or that claims one twice), inside the append's own transaction, so of two writers
    racing for one revision only one commits (``engine.ports.EventLog.append``). The key is
    derived here, once, so no store parses goal events itself.
    """
    if not isinstance(event, GoalChange):
        return None
    ref = event.snapshot or event.tombstone
    if ref is None:
        raise ValueError("goal/change carries neither a snapshot nor a tombstone")
    return ref.id, ref.revision


class GoalCheck(_Event):
    """plangate ran a goal's checks because the model said it was done (docs/checks.md).

    Not a revision: the goal stays as it was unless the run passed, in which case the same
    append carries the goal's completion.
    """

    type: Literal["goal/check"] = "goal/check"
    goal_id: str
    revision: int
    run: CheckRun
    passed: bool


TodoStatus = Literal["pending", "in_progress", "completed"]


class TodoItem(_Event):
    content: str
    status: TodoStatus


class TodoWrite(_Event):
    type: Literal["todo/write"] = "todo/write"
    todos: list[TodoItem]


class ModelUsageRecord(_Event):
    """The tokens of one model call, logged with the reply it belongs to.

    ``estimated``: the server reported no usage and the counts are the agent's estimate.
    ``goal_id``: the goal whose round made the call (its budget pays for it). ``request_chars``
    and ``prompt_estimate`` are what the budget check saw before the call, kept so the next
    call's estimate and any later audit of a budget stop can be replayed from the log.
    """

    type: Literal["model/usage"] = "model/usage"
    turn_id: str
    prompt_tokens: int = Field(ge=0)
    completion_tokens: int = Field(ge=0)
    cached_tokens: int = Field(default=0, ge=0)
    estimated: bool = False
    goal_id: str | None = None
    request_chars: int = Field(default=0, ge=0)
    prompt_estimate: int = Field(default=0, ge=0)


ApprovalDecision = Literal[
    "once", "session", "deny", "timeout", "stopped", "interrupted", "unattended"
]


class ApprovalRequested(_Event):
    """A tool call waits for the owner (or, unattended, was denied for want of one).

    ``request_id`` names the request in callback data; ``rule`` is what "Allow for this
    session" would add (empty when no rule can allow the command).
    """

    type: Literal["approval/requested"] = "approval/requested"
    request_id: str
    call_id: str
    tool: str
    command: str
    rule: list[str] = Field(default_factory=list)
    unattended: bool = False
    # ``rule`` is one whole command (an interpreter or wrapper), not a prefix.
    exact: bool = False
    # The call asked for the network (its rule, if granted, is of the ``network`` family).
    network: bool = False


class ApprovalDecided(_Event):
    """How a request ended: allowed (``once``/``session``) or denied (every other value)."""

    type: Literal["approval/decided"] = "approval/decided"
    request_id: str
    call_id: str
    decision: ApprovalDecision
    actor: LegacyPersonKey | None = None
    # How the person who answered was shown (the audit trail names them; docs/roles.md).
    actor_name: str = ""


class ApprovalRule(_Event):
    """A rule granted for the rest of the session (replays on load).

    ``tool`` ``bash``: ``words`` is a command prefix (``exact``: one whole command);
    ``network``: one whole command that may have the network; ``files``: ``words`` is one
    workspace-relative path whose writes are allowed.
    """

    type: Literal["approval/rule"] = "approval/rule"
    tool: str = "bash"
    words: list[str]
    actor: LegacyPersonKey | None = None
    actor_name: str = ""
    exact: bool = False


class WorktreeChange(_Event):
    """A plan's worktree changed phase (docs/projects.md); the last one is its state."""

    type: Literal["worktree/change"] = "worktree/change"
    record: WorktreeRecord
    actor: LegacyPersonKey | None = None


# Why a run stopped by itself: stuck (the detector's pattern names how), the daily cap, a turn
# that failed (a model error, a context overflow the provider refused), or an approval nobody
# answered within PLANGATE_APPROVAL_TIMEOUT.
# A ``setup`` pause waits for the project's setup script (engine.environments). ``stop`` and
# ``restart`` are never logged: a new process reads them back from the log
# (engine.agent.checklist.stopped_reason). A ``disk`` pause: below PLANGATE_DISK_RESERVE_MB
# (engine.tools.disk).
PauseKind = Literal[
    "stuck", "daily-cap", "failed", "approval-timeout", "setup", "stop", "restart", "disk"
]


class RunPaused(_Event):
    """An approved checklist run or a goal round stopped by itself (engine.progress).

    ``pattern`` and ``evidence`` are the stuck detector's (``repeat`` and the call that
    repeated, say); ``text`` is the card's line; ``goal_id`` is set for a goal round.
    """

    type: Literal["run/paused"] = "run/paused"
    kind: PauseKind
    text: str
    pattern: str | None = None
    evidence: str = ""
    task_id: str | None = None
    goal_id: str | None = None


class WorkspaceChanged(_Event):
    """bash changed the workspace in the step just logged (the snapshot after it differed).

    Written by earlier versions; read as ``progress/made {kinds: [workspace]}``.
    """

    type: Literal["workspace/changed"] = "workspace/changed"


class GoalCardPosted(_Event):
    """Where the session's goal card is: the chat and message the channel returned, recorded
    the moment it did (``card_id`` None: no card; the next drawing posts one). The plan card's
    ids are in the plan's sidecar; a goal has no sidecar (a goal lives in NoPlan too)."""

    type: Literal["goal/card"] = "goal/card"
    chat_id: LegacyChatKey | None = None
    card_id: LegacyMessageKey | None = None


class ProgressMade(_Event):
    """The step just logged made progress (engine.progress.rule): a task's status changed
    (``task``), a file in the workspace changed (``workspace``), the goal's state changed
    (``goal``). Logged by the agent while the stuck detector watches (a checklist run, a goal
    round), so a goal's idle-rounds count reads the same rule from the log."""

    type: Literal["progress/made"] = "progress/made"
    kinds: list[Literal["task", "workspace", "goal"]] = Field(default_factory=list)


SessionEvent = Annotated[
    UserMessage
    | AssistantMessage
    | ToolCall
    | ToolResult
    | TurnStart
    | TurnEnd
    | CommandRun
    | PlanMode
    | PlanChanged
    | GoalChange
    | GoalCheck
    | TodoWrite
    | ModelUsageRecord
    | ApprovalRequested
    | ApprovalDecided
    | ApprovalRule
    | RunPaused
    | WorkspaceChanged
    | ProgressMade
    | WorktreeChange
    | GoalCardPosted,
    Field(discriminator="type"),
]

SESSION_EVENT_ADAPTER: TypeAdapter[SessionEvent] = TypeAdapter(SessionEvent)


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """An event as committed to a session's log."""

    session_id: str
    seq: int
    at: float
    event: SessionEvent
