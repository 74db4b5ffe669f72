"""RoleService: each chat's team, read back from the chat log and changed through it.

Owners come from the settings and hold everywhere; approvers are granted per chat (a forum
topic shares its group's team). A chat's team is loaded once per process, then kept in memory
and changed only through :meth:`grant` and :meth:`revoke`, which log first: what is in the log
is the team after a restart.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection

from engine.keys import ChatKey, PersonKey
from engine.ports import ChatLog
from engine.roles.fold import apply_team_event, fold_team
from engine.roles.policy import may
from engine.roles.types import (
    Action,
    ChatEvent,
    GrantedRole,
    Person,
    Role,
    RoleGranted,
    RoleRevoked,
    TeamMember,
)


class RoleService:
    """The teams of every chat this process has seen.

    ``owner_ids`` ``None`` means no owner list was given (an engine embedded without a front
    end that knows people, as the engine's own tests do): every actor then counts as an owner.
    A front end always passes its owners. ``room`` maps a chat key to the chat whose team
    applies (a bound thread's parent: ``engine.bindings.ChatBindings.room``); without it every
    key is its own room.
    """

    def __init__(
        self,
        log: ChatLog,
        *,
        owner_ids: Collection[PersonKey] | None,
        room: Callable[[ChatKey], ChatKey] | None = None,
    ) -> None:
        self._log = log
        self.owner_ids = None if owner_ids is None else frozenset(owner_ids)
        self._room = room
        self._teams: dict[ChatKey, dict[PersonKey, TeamMember]] = {}
        self._locks: dict[ChatKey, asyncio.Lock] = {}

    def _lock(self, chat_id: ChatKey) -> asyncio.Lock:
        return self._locks.setdefault(chat_id, asyncio.Lock())

    async def _team_locked(self, chat_id: ChatKey) -> dict[PersonKey, TeamMember]:
        team = self._teams.get(chat_id)
        if team is None:
            team = self._teams[chat_id] = fold_team(await self._log.read_chat(chat_id))
        return team

    def is_owner(self, user_id: PersonKey | None) -> bool:
        """Whether ``user_id`` is an owner (everyone is, when no owner list was given)."""
        if self.owner_ids is None:
            return True
        return user_id is not None and user_id in self.owner_ids

    async def team(self, chat_id: ChatKey) -> dict[PersonKey, TeamMember]:
        """The chat's granted roles by user id (a copy)."""
        async with self._lock(chat_id):
            return dict(await self._team_locked(chat_id))

    async def role_of(self, chat_id: ChatKey | None, user_id: PersonKey | None) -> Role:
        """The role of ``user_id`` in ``chat_id`` (a thread: in its parent); nobody known
        (``None``) is a member."""
        if user_id is None:
            return "member"
        if self.is_owner(user_id):
            return "owner"
        if chat_id is None:
            return "member"
        if self._room is not None:
            chat_id = self._room(chat_id)
        team = self._teams.get(chat_id)
        if team is None:
            async with self._lock(chat_id):
                team = await self._team_locked(chat_id)
        member = team.get(user_id)
        return member.role if member is not None else "member"

    async def may(self, chat_id: ChatKey | None, user_id: PersonKey | None, action: Action) -> bool:
        """Whether ``user_id`` may do ``action`` in the chat now (the permission table)."""
        return may(await self.role_of(chat_id, user_id), action)

    async def _append_locked(self, chat_id: ChatKey, event: ChatEvent) -> None:
        team = await self._team_locked(chat_id)
        for stored in await self._log.append_chat(chat_id, [event]):
            team = apply_team_event(team, stored)
        self._teams[chat_id] = team

    async def grant(
        self, chat_id: ChatKey, person: Person, role: GrantedRole, *, by: PersonKey | None
    ) -> bool:
        """Give ``person`` ``role`` in the chat (logged); False when they already hold it."""
        async with self._lock(chat_id):
            held = (await self._team_locked(chat_id)).get(person.user_id)
            if held is not None and held.role == role and held.name == person.name:
                return False
            event = RoleGranted(user_id=person.user_id, role=role, name=person.name, by=by)
            await self._append_locked(chat_id, event)
            return held is None or held.role != role

    async def revoke(
        self, chat_id: ChatKey, user_id: PersonKey, *, by: PersonKey | None
    ) -> TeamMember | None:
        """Make ``user_id`` a member again (logged); returns the role they held, if any."""
        async with self._lock(chat_id):
            held = (await self._team_locked(chat_id)).get(user_id)
            if held is None:
                return None
            await self._append_locked(chat_id, RoleRevoked(user_id=user_id, by=by))
            return held

    async def migrate(self, old_chat_id: ChatKey, new_chat_id: ChatKey) -> None:
        """A group became a supergroup: its team holds under the new id (once: idempotent)."""
        team = await self.team(old_chat_id)
        async with self._lock(new_chat_id):
            if await self._team_locked(new_chat_id):
                return  # carried over already (or granted there since)
            for member in team.values():
                person = Person(member.user_id, member.name)
                event = RoleGranted(
                    user_id=person.user_id, role=member.role, name=person.name, by=member.by
                )
                await self._append_locked(new_chat_id, event)


__all__ = ["RoleService"]
