"""The team of one chat as a fold over its role events (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import assert_never

from engine.keys import PersonKey
from engine.roles.types import RoleGranted, RoleRevoked, StoredChatEvent, TeamMember

Team = Mapping[PersonKey, TeamMember]


def empty_team() -> dict[PersonKey, TeamMember]:
    """A chat nobody was granted a role in."""
    return {}


def apply_team_event(team: Team, stored: StoredChatEvent) -> dict[PersonKey, TeamMember]:
    """The team after one event; a revoke of someone without a role changes nothing."""
    out = dict(team)
    event = stored.event
    match event:
        case RoleGranted():
            out[event.user_id] = TeamMember(
                user_id=event.user_id,
                role=event.role,
                name=event.name,
                since=stored.at,
                by=event.by,
            )
        case RoleRevoked():
            out.pop(event.user_id, None)
        case _:
            assert_never(event)
    return out


def fold_team(events: Iterable[StoredChatEvent]) -> dict[PersonKey, TeamMember]:
    """Replay a chat's log into its team."""
    team = empty_team()
    for stored in events:
        team = apply_team_event(team, stored)
    return team


__all__ = ["Team", "apply_team_event", "empty_team", "fold_team"]
