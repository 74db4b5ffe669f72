"""Each session's log as converted so far, so a model step reads only the log's new tail.

The context (``engine.agent.context``) is the whole log as chat messages; reading and
converting the whole log on every step made a long session pay a cold read, a fold and a
conversion per step (docs/storage.md). The log is append-only with dense seqs, so the events
after the last seq read are exactly what is new: :class:`SessionHistory` keeps, per session,
that seq, the turns converted so far (a :class:`~engine.agent.context.TurnSplitter`) and the
projections folded so far, and tops them up with ``read(after_seq=...)``.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from engine.agent.context import Turn, TurnSplitter
from engine.ports import EventLog
from engine.projections import SessionProjections, apply_session_event


@dataclass(slots=True)
class _Cached:
    log: EventLog
    splitter: TurnSplitter
    last_seq: int = 0
    projections: SessionProjections = field(default_factory=SessionProjections)


class SessionHistory:
    """The converted turns and projections of recently used sessions, kept up to date.

    Holds at most ``max_sessions`` sessions (the least recently read is dropped and read whole
    again on its next use): a session's messages stay in memory while it is cached.
    """

    def __init__(self, *, max_sessions: int = 16) -> None:
        self._max = max_sessions
        self._cache: OrderedDict[str, _Cached] = OrderedDict()

    async def read(
        self, log: EventLog, session_id: str, *, result_cap: int, vision: bool = False
    ) -> tuple[list[Turn], SessionProjections]:
        """The session's turns (as ``split_turns`` of the whole log) and its projections (as
        ``fold_session``), reading only the events not seen yet.

        The turns are the cache's own: pass them to ``assemble_messages``, never change them.
        Another log or ``result_cap`` than last time for a session reads that log whole.
        """
        cached = self._cache.get(session_id)
        splitter = cached.splitter if cached is not None else None
        if (
            cached is None
            or cached.log is not log
            or splitter is None
            or (splitter.result_cap, splitter.vision) != (result_cap, vision)
        ):
            splitter = TurnSplitter(result_cap=result_cap, vision=vision)
            cached = self._cache[session_id] = _Cached(log, splitter)
        self._cache.move_to_end(session_id)
        while len(self._cache) > self._max:
            self._cache.popitem(last=False)
        tail = await log.read(session_id, after_seq=cached.last_seq)
        # Another call for this session may have topped the cache up during the await.
        tail = [stored for stored in tail if stored.seq > cached.last_seq]
        if tail:
            projections = cached.projections
            for stored in tail:
                projections = apply_session_event(projections, stored.event)
            cached.splitter.feed(stored.event for stored in tail)
            cached.last_seq = tail[-1].seq
            cached.projections = projections
        return cached.splitter.turns(), cached.projections

    def forget(self, session_id: str) -> None:
        """Drop a session's cache (its next read is a whole one)."""
        self._cache.pop(session_id, None)


__all__ = ["SessionHistory"]
