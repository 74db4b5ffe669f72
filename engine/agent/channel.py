"""The channel the agent tells things to (docs/agent.md).

The engine knows no chat service: each front end in ``bot/`` implements :class:`Channel`, as the
console demo implements it for a terminal. Every method is a notification; the agent does not
wait for the chat to answer. A channel method that raises is logged by the agent and never
breaks a turn (see :func:`engine.tasks.safe_call`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from engine.events import ApprovalDecision, TurnOutcome

if TYPE_CHECKING:
    from engine.approval.policy import ApprovalView


class Channel(Protocol):
    """What the agent needs from a chat front end."""

    async def reply(self, session_id: str, text: str, *, reply_to: int | None) -> None:
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


__all__ = ["Channel"]
