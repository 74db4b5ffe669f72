"""Roles, actions and the chat-level role events (docs/roles.md).

A chat's team is a fold over its chat log (``engine.ports.ChatLog``): ``role/granted`` makes a
user an approver, ``role/revoked`` takes it back. Owners come from the settings
(``PLANGATE_OWNER_IDS``) and are never in the log; everyone else is a member.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from engine.keys import ChatKey, LegacyPersonKey, PersonKey, key_label

Role = Literal["owner", "approver", "member"]
# A role that can be granted in a chat (owner comes from the settings only).
GrantedRole = Literal["approver"]

# What an update asks to do; engine.roles.policy maps commands and presses onto these.
#   read      /show_plan, /status, /help, /team (the list)
#   approve   Approve, /execute, Resume of a paused checklist, tool approvals, skip approvals
#   review    Keep planning, Revise, Discard (button or /discard), the feedback after them
#   answer    the agent's questions (option buttons)
#   stop      /stop, the goal's Pause (button or /goal pause)
#   control   /plan, /goal, /new, the goal's Start/Resume/Clear, talking to the agent
#   settings  /usage (and its cap), /goal budget, /project, /team add and remove
Action = Literal["read", "approve", "review", "answer", "stop", "control", "settings"]


class _ChatEvent(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RoleGranted(_ChatEvent):
    """``user_id`` holds ``role`` in the chat from now on; ``name`` is how they were seen."""

    type: Literal["role/granted"] = "role/granted"
    user_id: LegacyPersonKey
    role: GrantedRole = "approver"
    name: str = ""
    by: LegacyPersonKey | None = None


class RoleRevoked(_ChatEvent):
    """``user_id`` is a member again."""

    type: Literal["role/revoked"] = "role/revoked"
    user_id: LegacyPersonKey
    by: LegacyPersonKey | None = None


ChatEvent = Annotated[RoleGranted | RoleRevoked, Field(discriminator="type")]
CHAT_EVENT_ADAPTER: TypeAdapter[ChatEvent] = TypeAdapter(ChatEvent)


@dataclass(frozen=True, slots=True)
class StoredChatEvent:
    """A chat event as committed to its chat's log."""

    chat_id: ChatKey
    seq: int
    at: float
    event: ChatEvent


@dataclass(frozen=True, slots=True)
class Person:
    """Who did something: their key (``engine.keys``) and the name shown for them."""

    user_id: PersonKey
    name: str = ""

    @property
    def label(self) -> str:
        """The name, or the key without its channel when no name is known."""
        return self.name or key_label(self.user_id)


@dataclass(frozen=True, slots=True)
class TeamMember:
    """One granted role in a chat: who, which role, since when, granted by whom."""

    user_id: PersonKey
    role: GrantedRole
    name: str
    since: float
    by: PersonKey | None


__all__ = [
    "CHAT_EVENT_ADAPTER",
    "Action",
    "ChatEvent",
    "GrantedRole",
    "Person",
    "Role",
    "RoleGranted",
    "RoleRevoked",
    "StoredChatEvent",
    "TeamMember",
]
