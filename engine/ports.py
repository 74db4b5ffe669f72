"""The ports the engine needs from the outside, as Protocols (docs/architecture.md).

``storage/`` implements the stores; ``bot/`` implements the channel (:class:`Channel`). The
engine is tested against in-memory fakes of the same protocols (``engine.testing``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from engine.errors import LeaseLost as LeaseLost  # re-exported: the ports raise it
from engine.events import ApprovalDecision, SessionEvent, StoredEvent, TurnOutcome
from engine.keys import Chat, ChatKey, MessageKey
from engine.limits import ChannelLimits
from engine.roles.types import ChatEvent, StoredChatEvent

if TYPE_CHECKING:
    from engine.approval.policy import ApprovalView

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """One conversation bound to one workspace."""

    id: str
    workspace: str
    profile: str | None
    created_at: float
    parent_id: str | None = None


@dataclass(frozen=True, slots=True)
class ChatBinding:
    """A chat (its key, kind and parent, as recorded when it was bound) and its session."""

    chat: Chat
    session_id: str


def check_types(types: Collection[str]) -> frozenset[str]:
    """The ``types`` argument of :meth:`EventLog.read` as a set; a bare string is refused.

    A string is a collection of its characters, so ``types="plan/mode"`` would silently match
    nothing: every implementation calls this first to fail loudly instead.
    """
    if isinstance(types, str):
        raise TypeError(f"types must be a collection of event types, not the string {types!r}")
    return frozenset(types)


class EventLog(Protocol):
    """The append-only per-session log."""

    async def append(self, session_id: str, events: Sequence[SessionEvent]) -> list[StoredEvent]:
        """Commit ``events`` in one transaction with dense ``seq`` values and return them.

        Raises ``AppendConflict`` (and commits nothing) when a ``goal/change`` carries a
        ``(goal id, revision)`` that the session's log already holds: that is the goal
        compare-and-set, and it holds across processes sharing one database.
        """
        ...

    async def read(
        self, session_id: str, *, after_seq: int = 0, types: Collection[str] | None = None
    ) -> list[StoredEvent]:
        """Events with ``seq > after_seq`` in order; with ``types``, only events of those types.

        A filtered read decodes only the matching rows, so a fold that needs a few event types
        (``engine.projections.replay_projections``) never parses tool output. ``types`` is a
        collection of ``type`` strings, never a bare string (that raises ``TypeError``); an
        empty one returns ``[]``.
        """
        ...

    async def needs_attention(self) -> list[str]:
        """The sessions start-up must load, in id order, without reading any log.

        Those whose events, by :func:`engine.recovery.attention_marks`, end with an open turn,
        a live goal or an undecided ``/plan`` or approval. A superset is allowed (loading a
        session that needs nothing is harmless); missing one is not.
        """
        ...


class SessionStore(Protocol):
    """Sessions and the chat keys bound to them."""

    async def create_session(
        self, *, workspace: str, profile: str | None = None, parent_id: str | None = None
    ) -> SessionRecord: ...

    async def get_session(self, session_id: str) -> SessionRecord | None: ...

    async def bind_chat(self, chat: Chat, session_id: str) -> None:
        """Point ``chat.key`` at ``session_id``, recording the chat's kind and parent."""
        ...

    async def session_for_chat(self, chat: ChatKey) -> str | None: ...

    async def chat_bindings(self) -> list[ChatBinding]:
        """Every chat key and its session (start-up uses it to find live goals)."""
        ...

    async def fork(self, session_id: str, *, upto_seq: int | None = None) -> SessionRecord:
        """A new session whose log is a copy of ``session_id``'s prefix up to ``upto_seq``."""
        ...


class ChatLog(Protocol):
    """The append-only log of chat-level events (roles), one per chat key (docs/roles.md).

    A thread has no log of its own: its parent's applies (:attr:`engine.keys.Chat.room`).
    ``seq`` is dense per chat.
    """

    async def append_chat(
        self, chat: ChatKey, events: Sequence[ChatEvent]
    ) -> list[StoredChatEvent]:
        """Commit ``events`` in one transaction and return them; durable on return."""
        ...

    async def read_chat(self, chat: ChatKey) -> list[StoredChatEvent]:
        """The chat's events in order (``[]`` for a chat with none)."""
        ...


@dataclass(frozen=True, slots=True)
class Lease:
    """One replica's hold on one chat (docs/storage.md, "Leases").

    ``chat`` is the room's key: a group's threads and topics share their parent's lease.
    ``epoch`` grows by one each time the chat changes hands (or its holder let it lapse), so
    a write carrying an older epoch is refused (:class:`LeaseLost`). ``expires_at`` is in
    seconds since the epoch, on the database's clock.
    """

    chat: ChatKey
    replica: str
    epoch: int
    expires_at: float


class ChatLeases(Protocol):
    """Which replica owns which chat: one owner at a time, fenced by an epoch.

    PostgreSQL implements it for several replicas (``storage.postgres.leases``); a SQLite home
    has one process, and :class:`engine.leases.LocalChatLeases` keeps the same rules in memory.
    """

    async def acquire(self, chat: ChatKey, replica: str, ttl_s: float) -> Lease | None:
        """Take ``chat`` for ``ttl_s`` seconds, or renew this replica's hold on it.

        A free, released or expired lease is taken with ``epoch + 1`` (also when it was this
        replica's own and lapsed); this replica's live lease is renewed with its epoch kept.
        ``None`` while another replica holds a live lease. A returned epoch other than the one
        the caller held means it lost the chat in between (engine: ``chat_lost`` then
        ``chat_taken``).
        """
        ...

    async def release(self, chat: ChatKey, replica: str) -> None:
        """Give ``chat`` up if ``replica`` holds it (the epoch is kept: the next taker gets
        ``epoch + 1``); a no-op otherwise."""
        ...

    async def held_by(self, replica: str) -> list[Lease]:
        """The live leases ``replica`` holds, by chat key."""
        ...

    async def holder(self, chat: ChatKey) -> Lease | None:
        """The live lease on ``chat``, or ``None`` when nobody holds it."""
        ...


class Channel(Protocol):
    """What the agent needs from a chat front end (``bot/`` implements it for each channel,
    the console demo for a terminal).

    Every method is a notification; the agent does not wait for the chat to answer. A method
    that raises is logged by the agent and never breaks a turn (``engine.tasks.safe_call``).
    """

    @property
    def limits(self) -> ChannelLimits:
        """What one message, caption and file may hold on this channel."""
        ...

    async def reply(self, session_id: str, text: str, *, reply_to: MessageKey | None) -> None:
        """Post a turn's final text, as a reply to the message ``reply_to`` when it is set."""
        ...

    async def ask(self, session_id: str, question: str, options: Sequence[str]) -> None:
        """Ask the owner a question (``ask_user``); ``options`` become buttons when not empty.

        The answer comes back later as an ordinary user message.
        """
        ...

    async def typing(self, session_id: str) -> None:
        """Show that the agent is working (called before each model call)."""
        ...

    async def turn_started(self, session_id: str) -> None:
        """A turn opened (``turn/start`` is committed)."""
        ...

    async def turn_ended(self, session_id: str, outcome: TurnOutcome) -> None:
        """A turn closed with ``outcome`` (``turn/end`` is committed)."""
        ...

    async def plan_changed(self, session_id: str) -> None:
        """The plan may have changed: redraw the plan card from the sidecar."""
        ...

    async def goal_changed(self, session_id: str) -> None:
        """The goal may have changed: redraw the goal card from the projection."""
        ...

    async def notice(self, session_id: str, text: str) -> None:
        """A short system line for the chat (a failure, a stale approval, dropped messages)."""
        ...

    async def send_file(
        self, session_id: str, data: bytes, filename: str, *, caption: str | None
    ) -> None:
        """Attach a file to the chat (the ``send_file`` tool); raises when it was not sent."""
        ...

    async def drafts_wanted(self, session_id: str) -> bool:
        """Whether this chat shows a reply while it is written (a private chat: the model is
        then asked to stream, and :meth:`draft` hears the text as it grows)."""
        ...

    async def draft(self, session_id: str, text: str, *, more: bool = False) -> None:
        """The reply while the model streams it (paced by the channel; the final
        :meth:`reply` replaces it). ``text`` replaces the draft, or with ``more`` continues
        it: the engine hands each new piece once, never the whole text again. Never waits
        for the chat."""
        ...

    async def approval_asked(self, session_id: str, view: ApprovalView) -> None:
        """A tool call waits for the owner: post it with Allow once / for this session / Deny.

        ``view.unattended``: the call was already denied (nobody to ask); offer one Allow
        button that adds ``view.rule``. The press comes back through the engine's ``press``.
        """
        ...

    async def approval_closed(
        self, session_id: str, view: ApprovalView, decision: ApprovalDecision
    ) -> None:
        """The request ended (a press, the timeout, /stop): its buttons go, the result shows."""
        ...
