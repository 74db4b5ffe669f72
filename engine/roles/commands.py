"""``/team``: list a chat's roles; owners add and remove approvers (docs/roles.md).

The front end resolves who is meant (the message replied to, or an ``@username`` seen in the
chat) into a :class:`~engine.roles.types.Person`; a numeric id needs no resolving.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from engine.keys import ChatKey, key_label
from engine.roles.service import RoleService
from engine.roles.types import GrantedRole, Person, Role

TEAM_USAGE = (
    "usage: /team, /team add <user> approver, /team remove <user>. A user is the message "
    "you reply to, an @username seen in this chat, or a numeric user id."
)
_USERNAME = re.compile(r"@([A-Za-z0-9_]{3,32})")
_ROLES: dict[str, GrantedRole] = {"approver": "approver", "approvers": "approver"}


@dataclass(frozen=True, slots=True)
class TeamSpec:
    """A parsed ``/team``: the operation and who it names (by id, by username, or neither:
    the message replied to). ``user_id`` is an id as typed: the front end knows whose it is
    and passes that person as the target."""

    op: Literal["list", "add", "remove"]
    user_id: str | None = None
    username: str | None = None
    role: GrantedRole = "approver"


def parse_team_args(args: str) -> TeamSpec | str:
    """The spec of ``/team args``, or the usage text when it does not parse."""
    words = args.split()
    if not words or words[0].lower() == "list":
        return TeamSpec("list") if len(words) <= 1 else TEAM_USAGE
    op = words[0].lower()
    if op not in ("add", "remove"):
        return TEAM_USAGE
    user_id: str | None = None
    username: str | None = None
    role: GrantedRole = "approver"
    for word in words[1:]:
        m = _USERNAME.fullmatch(word)
        if m is not None and username is None and user_id is None:
            username = m.group(1)
        elif word.lstrip("-").isdigit() and user_id is None and username is None:
            user_id = word
        elif op == "add" and word.lower() in _ROLES:
            role = _ROLES[word.lower()]
        else:
            roles = ", ".join(sorted(set(_ROLES.values())))
            return f"{TEAM_USAGE}\nRoles you can give: {roles} (owners are set in the settings)."
    return TeamSpec(op, user_id=user_id, username=username, role=role)  # type: ignore[arg-type]


def _when(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M UTC")


async def describe_team(roles: RoleService, chat_id: ChatKey, *, viewer_role: Role) -> str:
    """The ``/team`` list: owners, approvers (with who granted it and when), everyone else."""
    team = await roles.team(chat_id)
    owners = sorted(roles.owner_ids or ())
    lines = ["Team of this chat:"]
    lines.append(
        "Owners (from the settings): " + (", ".join(key_label(o) for o in owners) or "none")
    )
    approvers = sorted(team.values(), key=lambda m: (m.name.lower(), m.user_id))
    if approvers:
        lines.append("Approvers:")
        for m in approvers:
            by = f" by {key_label(m.by)}" if m.by is not None else ""
            label = key_label(m.user_id)
            name = f"{m.name} ({label})" if m.name else label
            lines.append(f"- {name}, since {_when(m.since)}{by}")
    else:
        lines.append("Approvers: none")
    lines.append("Everyone else: member (read-only).")
    lines.append(f"You are: {viewer_role}.")
    return "\n".join(lines)


async def run_team(
    roles: RoleService, chat_id: ChatKey, spec: TeamSpec, *, target: Person | None, actor: Person
) -> str:
    """Carry out ``/team add`` or ``/team remove`` (the caller checked the actor may)."""
    who = target
    if who is None and spec.user_id is not None:
        # The front end found no person behind the id (a chat's or a channel's id).
        return "That is a chat or a channel, not a person: roles are for people."
    if who is None:
        if spec.username is not None:
            return (
                f"I have not seen @{spec.username} in this chat yet. Reply to one of their "
                f"messages with /team {spec.op}, or give their numeric id."
            )
        return f"Who? {TEAM_USAGE}"
    if spec.op == "add":
        if roles.is_owner(who.user_id):
            return f"{who.label} is an owner already (owners are set in the settings)."
        if not await roles.grant(chat_id, who, spec.role, by=actor.user_id):
            return f"{who.label} is an {spec.role} here already."
        return f"{who.label} is now an {spec.role} in this chat."
    if roles.is_owner(who.user_id):
        return f"{who.label} is an owner (from the settings); /team cannot remove an owner."
    held = await roles.revoke(chat_id, who.user_id, by=actor.user_id)
    if held is None:
        return f"{who.label} has no role to remove here."
    return f"{held.name or who.label} is no longer an {held.role}; they are a member now."


__all__ = ["TEAM_USAGE", "TeamSpec", "describe_team", "parse_team_args", "run_team"]
