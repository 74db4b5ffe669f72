"""Each session's events read so far, so a model step reads only the log's new tail.

The context (``engine.agent.context``) is built from the whole log on every step; reading the
whole log each time made a long session pay a cold read per step (docs/storage.md). The log is
append-only with dense seqs, so the events after the last seq read are exactly what is new:
:class:`SessionHistory` keeps, per session, that seq, the events up to it and the projections
folded over them, and tops them up with ``read(after_seq=...)``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from engine.events import SessionEvent
from engine.ports import EventLog
from engine.projections import SessionProjections, apply_session_event


@dataclass(slots=True)
class _Cached:
    log: EventLog
    last_seq: int = 0
    events: list[SessionEvent] = field(default_factory=list)
    projections: SessionProjections = field(default_factory=SessionProjections)


class SessionHistory:
    """The events and projections of recently used sessions, kept up to date incrementally.

    Holds at most ``max_sessions`` sessions (the least recently read is dropped and read whole
    again on its next use): a session's events stay in memory while it is cached.
    """

    def __init__(self, *, max_sessions: int = 16) -> None:
        self._max = max_sessions
        self._cache: OrderedDict[str, _Cached] = OrderedDict()

    async def read(
        self, log: EventLog, session_id: str
    ) -> tuple[Sequence[SessionEvent], SessionProjections]:
        """The session's whole log and its projections, reading only events not seen yet.

        Equal to ``log.read(session_id)`` folded with ``fold_session``. The returned sequence
        is the cache's own list: read it before the next call, never change it. Passing another
        log than last time for a session reads that log whole.
        """
        cached = self._cache.get(session_id)
        if cached is None or cached.log is not log:
            # Events read from another log say nothing about this one.
            cached = self._cache[session_id] = _Cached(log)
        self._cache.move_to_end(session_id)
        while len(self._cache) > self._max:
            self._cache.popitem(last=False)
        tail = await log.read(session_id, after_seq=cached.last_seq)
        # Another call for this session may have topped the cache up during the await.
        tail = [stored for stored in tail if stored.seq > cached.last_seq]
        projections = cached.projections
        for stored in tail:
            cached.events.append(stored.event)
            projections = apply_session_event(projections, stored.event)
        if tail:
            cached.last_seq = tail[-1].seq
            cached.projections = projections
        return cached.events, cached.projections

    def forget(self, session_id: str) -> None:
        """Drop a session's cached events (its next read is a whole one)."""
        self._cache.pop(session_id, None)


__all__ = ["SessionHistory"]
