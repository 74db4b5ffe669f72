"""Plan approvals as votes: who approved which revision, read back from the log.

Each approval press (or ``/execute``) is logged as a ``command/run``: ``approval_vote`` while
more approvals are needed (``PLANGATE_PLAN_APPROVALS``), ``approve`` for the one that
completes them. Both carry ``{plan_id, revision, name}``. The votes of one plan revision are
those commands for it, one per person (the first counts): a new revision starts from none, and
a restart reads them back. The approvals a committed plan records (``approved_by``) are these
votes, in order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from engine.events import CommandRun, StoredEvent
from engine.keys import ChatKey, PersonKey
from engine.plan.types import PlanApproval
from engine.ports import EventLog
from engine.roles.service import RoleService

VOTE_COMMANDS = frozenset({"approve", "approval_vote"})


@dataclass(frozen=True, slots=True)
class Vote:
    """One person's approval of one plan revision."""

    user_id: PersonKey
    name: str
    at: float

    def approval(self) -> PlanApproval:
        """As the sidecar's ``approved_by`` keeps it."""
        when = datetime.fromtimestamp(self.at, UTC).isoformat()
        return PlanApproval(user_id=self.user_id, name=self.name, at=when)


def votes_for(stored: Iterable[StoredEvent], plan_id: str, revision: int) -> list[Vote]:
    """The votes for ``plan_id`` at ``revision`` among ``stored`` (pure): one per person.

    An ``approve`` logged before votes carried a plan id counts for the revision it names.
    """
    out: list[Vote] = []
    seen: set[PersonKey] = set()
    for s in stored:
        e = s.event
        if not isinstance(e, CommandRun) or e.name not in VOTE_COMMANDS or e.actor is None:
            continue
        if e.data.get("revision") != revision or e.data.get("plan_id", plan_id) != plan_id:
            continue
        if e.actor in seen:
            continue
        seen.add(e.actor)
        out.append(Vote(user_id=e.actor, name=str(e.data.get("name") or ""), at=s.at))
    return out


class PlanVotes:
    """The votes of each session's current plan revision (read from the log once, then kept
    up to date by :meth:`add`).

    With ``roles`` (and ``chat_of``, the chat each session is bound to) a vote counts only
    while its voter still holds a role that may approve there: a removed approver's vote
    drops out of the count of a revision still undecided (a plan already approved stays
    approved). Without: every vote counts."""

    def __init__(
        self,
        log: EventLog,
        *,
        roles: RoleService | None = None,
        chat_of: Callable[[str], ChatKey | None] = lambda _session_id: None,
    ) -> None:
        self._log = log
        self._roles = roles
        self._chat_of = chat_of
        self._cache: dict[str, tuple[str, int, list[Vote]]] = {}

    async def votes(self, session_id: str, plan_id: str, revision: int) -> list[Vote]:
        """The votes for ``plan_id`` at ``revision`` in the session that count now."""
        cached = self._cache.get(session_id)
        if cached is not None and cached[:2] == (plan_id, revision):
            found = list(cached[2])
        else:
            stored = await self._log.read(session_id, types=("command/run",))
            found = votes_for(stored, plan_id, revision)
            self._cache[session_id] = (plan_id, revision, list(found))
        roles = self._roles
        if roles is None:
            return found
        # Asked each time: a role may be removed between two presses.
        chat = self._chat_of(session_id)
        return [v for v in found if await roles.may(chat, v.user_id, "approve")]

    def add(self, session_id: str, plan_id: str, revision: int, vote: Vote) -> None:
        """Count a vote that was just logged (a second one by the same person is ignored)."""
        cached = self._cache.get(session_id)
        votes = cached[2] if cached is not None and cached[:2] == (plan_id, revision) else []
        if all(v.user_id != vote.user_id for v in votes):
            votes = [*votes, vote]
        self._cache[session_id] = (plan_id, revision, votes)

    async def approvals(self, session_id: str, plan_id: str, revision: int) -> list[PlanApproval]:
        """The votes as ``approved_by`` entries (the plan service records them on approval)."""
        return [v.approval() for v in await self.votes(session_id, plan_id, revision)]


__all__ = ["VOTE_COMMANDS", "PlanVotes", "Vote", "votes_for"]
