"""The plan card and the goal card on Telegram: one live message each per session.

The presenter draws a card from ``engine.plan_card()`` / ``engine.goal_card()`` with
``bot.cards`` and delivers it through the outbox:

- one card message per session, edited in place; the plan card's id lives in the sidecar's
  ``flow`` (``engine.set_plan_flow``), the goal card's in the meta table, so a restart keeps
  editing the same message;
- refreshes are coalesced: at most one draw per card per ``edit_interval_s``, and the draw
  reads the engine at draw time, so the last state is always the one delivered; an unchanged
  text and keyboard makes no call (the outbox compares);
- "message to edit not found" reposts the card;
- restick = a new card at the bottom, the old card's keyboard stripped, the new one pinned
  where allowed;
- when the plan card enters review, the plan text goes first (rendered and split, or as a
  ``.md`` document when long), then the card is posted under it.

Every public verb returns at once and works in a background task; :meth:`flush` waits for
them (tests, shutdown). Failures are logged, never raised into a handler.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Literal, cast, get_args

from telegram import Bot, Message

from bot import cards
from bot.outbox import Outbox
from bot.render import escape, messages_or_document
from bot.routes import ChatRoute, MetaStore, Routes, goal_card_key, review_rev_key
from engine.api import EngineApi, GoalCardData, GoalCardState, PlanCardData, PlanCardState

_log = logging.getLogger("telegram.presenter")

CardKind = Literal["plan", "goal"]
# Review text longer than this many messages goes as one .md document instead.
MAX_REVIEW_MESSAGES = 3

_ENDED_NOTE = {
    "discarded": "🗑 Discarded: {title}",
    "abandoned": "📦 Set aside by /new: {title}",
}
BUSY_NOTE = "⏳ The agent is working…"
MOVED_NOTE = "This card moved below ⬇️"


def plan_view(data: PlanCardData) -> cards.CardView:
    """The plan card for the engine's card data.

    A plan that just ended is drawn from its last sidecar: a completed one as done, a
    discarded or abandoned one as "No plan" with a line saying what happened to it.
    """
    sidecar = data.sidecar
    if data.ended in _ENDED_NOTE and sidecar is not None:
        note = _ENDED_NOTE[data.ended].format(title=sidecar.title or "Untitled plan")
        return cards.build_plan_card(None, "none", note=note)
    busy = data.busy and data.state in ("planning", "written", "active")
    return cards.build_plan_card(sidecar, data.state, note=BUSY_NOTE if busy else None)


def goal_view(data: GoalCardData, *, note: str | None = None) -> cards.CardView:
    """The goal card for the engine's card data."""
    return cards.build_goal_card(
        data.goal, armed=data.armed, confirm_clear=data.state == "confirm_clear", note=note
    )


@dataclass
class _Slot:
    """One card of one session: where it is and what is waiting to be drawn."""

    message_id: int | None = None
    chat_id: int | None = None
    dirty: bool = False
    override: str | None = None
    note: str | None = None
    last_draw_s: float = -math.inf
    task: asyncio.Task[None] | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class CardPresenter:
    """Draws and keeps the plan and goal cards of every session (see the module docstring)."""

    def __init__(
        self,
        engine: EngineApi,
        outbox: Outbox,
        routes: Routes,
        meta: MetaStore,
        *,
        edit_interval_s: float = 1.5,
        bot: Bot | None = None,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._engine = engine
        self._outbox = outbox
        self._routes = routes
        self._meta = meta
        self._interval_s = edit_interval_s
        self._bot = bot
        self._clock = clock
        self._sleep = sleep
        self._slots: dict[tuple[str, CardKind], _Slot] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._holds: dict[str, int] = {}

    # ---- public verbs ------------------------------------------------------------------

    def refresh(self, session_id: str, kind: CardKind, *, state: str | None = None) -> None:
        """Redraw the card in place soon (coalesced); ``state`` overrides the derived state.

        While the session is held (a command is being decided) the redraw waits for
        :meth:`release`, so the command's reply comes before a card the command created.
        """
        slot = self._slot(session_id, kind)
        slot.dirty = True
        slot.override = state
        if self._holds.get(session_id):
            return
        if slot.task is None or slot.task.done():
            slot.task = self._spawn(self._refresh_loop(session_id, kind, slot))

    def hold(self, session_id: str) -> None:
        """Hold the session's refreshes while a command or press is decided and answered."""
        self._holds[session_id] = self._holds.get(session_id, 0) + 1

    def release(self, session_id: str) -> None:
        """End one :meth:`hold`; refreshes asked for meanwhile are drawn now (once)."""
        left = self._holds.get(session_id, 0) - 1
        if left > 0:
            self._holds[session_id] = left
            return
        self._holds.pop(session_id, None)
        for kind in ("plan", "goal"):
            slot = self._slots.get((session_id, kind))
            if slot is not None and slot.dirty and (slot.task is None or slot.task.done()):
                slot.task = self._spawn(self._refresh_loop(session_id, kind, slot))

    def restick(
        self, session_id: str, kind: CardKind, *, state: str | None = None, note: str | None = None
    ) -> None:
        """Post the card anew at the bottom and strip the old one's keyboard (in background)."""
        slot = self._slot(session_id, kind)
        slot.dirty = False  # the restick draws the latest state itself
        slot.override = state
        slot.note = note
        self._spawn(self._locked(slot, self._draw(session_id, kind, slot, restick=True)))

    def show_copy(self, session_id: str, route: ChatRoute, *, reply_to: int | None) -> None:
        """Send a copy of the plan card without buttons (a non-owner's /show-plan)."""
        self._spawn(self._send_copy(session_id, route, reply_to))

    def retire(self, session_id: str) -> None:
        """Strip the keyboards of a session's cards and forget them (``/new``).

        Known ids come from this process, the goal card's meta entry and the plan's flow, so
        cards drawn before a restart lose their buttons too.
        """
        known: set[tuple[int, int]] = set()
        for kind in ("plan", "goal"):
            slot = self._slots.pop((session_id, kind), None)
            if slot is not None and slot.message_id is not None and slot.chat_id is not None:
                known.add((slot.chat_id, slot.message_id))
        self._spawn(self._guard(self._retire(session_id, known)))

    async def flush(self) -> None:
        """Wait until every pending draw has been delivered (bounded by the callers)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        await self._outbox.flush()

    async def aclose(self) -> None:
        """Cancel pending draws (shutdown)."""
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    # ---- scheduling --------------------------------------------------------------------

    def _slot(self, session_id: str, kind: CardKind) -> _Slot:
        return self._slots.setdefault((session_id, kind), _Slot())

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _now(self) -> float:
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()

    async def _locked(self, slot: _Slot, coro: Coroutine[Any, Any, None]) -> None:
        async with slot.lock:
            await self._guard(coro)

    async def _guard(self, coro: Coroutine[Any, Any, None]) -> None:
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # worker boundary: a card failure never reaches a handler
            _log.warning("telegram.presenter.failed %s: %s", type(exc).__name__, exc)

    async def _refresh_loop(self, session_id: str, kind: CardKind, slot: _Slot) -> None:
        while slot.dirty:
            wait = slot.last_draw_s + self._interval_s - self._now()
            if wait > 0:
                await self._sleep(wait)
            if self._holds.get(session_id):
                return  # release() starts the loop again
            slot.dirty = False
            async with slot.lock:
                await self._guard(self._draw(session_id, kind, slot, restick=False))
            slot.last_draw_s = self._now()

    # ---- drawing -----------------------------------------------------------------------

    async def _draw(self, session_id: str, kind: CardKind, slot: _Slot, *, restick: bool) -> None:
        if kind == "plan":
            await self._draw_plan(session_id, slot, restick=restick)
        else:
            await self._draw_goal(session_id, slot, restick=restick)

    async def _route(self, session_id: str, data: PlanCardData | None = None) -> ChatRoute | None:
        route = await self._routes.lookup(session_id)
        if route is not None:
            return route
        if data is None:
            data = await self._engine.plan_card(session_id)
        flow = data.sidecar.flow if data.sidecar is not None else None
        if flow is not None and flow.chat_id is not None:
            return ChatRoute(flow.chat_id, flow.thread_id or 0)
        return None

    async def _draw_plan(self, session_id: str, slot: _Slot, *, restick: bool) -> None:
        data = await self._engine.plan_card(session_id)
        if slot.override is not None:
            data = dataclasses.replace(data, state=_plan_state(slot.override))
            slot.override = None
        route = await self._route(session_id, data)
        if route is None:
            _log.info("telegram.presenter.no_route session=%s", session_id)
            return
        sidecar = data.sidecar
        view = plan_view(data)
        if sidecar is not None:
            flow = sidecar.flow
            current = flow.card_id if flow.chat_id in (None, route.chat_id) else None
            if current is None and slot.message_id is not None and slot.chat_id == route.chat_id:
                # The previous plan's card: leave its last text, take its buttons away.
                self._outbox.edit_keyboard(route.chat_id, slot.message_id, None)
                slot.message_id = None
        else:
            current = slot.message_id if slot.chat_id == route.chat_id else None
            if current is None and not restick:
                return  # no plan and no card on screen: nothing to draw
        review_ids: list[int] | None = None
        if data.state == "review" and sidecar is not None:
            # Revisions restart with every plan: the plan id is part of what was posted.
            posted = f"{sidecar.id}:{sidecar.revision}"
            if await self._meta.get_meta(review_rev_key(session_id)) != posted:
                review_ids = await self._send_review(route, sidecar.title, sidecar.description)
                await self._meta.set_meta(review_rev_key(session_id), posted)
                restick = True
        title = sidecar.title if sidecar is not None and sidecar.title else "Plan"
        moved = f"📋 <b>{escape(_short(title))}</b>\n<i>{MOVED_NOTE}</i>"
        new_id = await self._deliver(route, current, view, restick=restick, moved_html=moved)
        slot.chat_id = route.chat_id
        slot.message_id = new_id
        if sidecar is not None and (new_id != current or review_ids is not None):
            await self._engine.set_plan_flow(
                session_id,
                chat_id=route.chat_id,
                thread_id=route.thread,
                card_id=new_id,
                review_ids=review_ids,
            )
        if sidecar is None and data.state in ("none", "done"):
            slot.message_id = None  # the plan is gone: the next plan gets a card of its own

    async def _draw_goal(self, session_id: str, slot: _Slot, *, restick: bool) -> None:
        data = await self._engine.goal_card(session_id)
        if slot.override is not None:
            data = dataclasses.replace(data, state=_goal_state(slot.override))
            slot.override = None
        note, slot.note = slot.note, None
        route = await self._route(session_id)
        if route is None:
            _log.info("telegram.presenter.no_route session=%s", session_id)
            return
        stored = await self._meta.get_meta(goal_card_key(session_id))
        current = _stored_card(stored, route.chat_id)
        if current is None and not restick and (data.goal is None or data.goal.source == "task"):
            # Nothing on screen, and nothing worth a card: a task goal is only a label of the
            # plan card's current task, so it never posts a goal card by itself.
            return
        view = goal_view(data, note=note)
        moved = f"🎯 <b>Goal</b>\n<i>{MOVED_NOTE}</i>"
        new_id = await self._deliver(route, current, view, restick=restick, moved_html=moved)
        slot.chat_id, slot.message_id = route.chat_id, new_id
        if new_id != current:
            await self._meta.set_meta(goal_card_key(session_id), f"{route.chat_id}:{new_id}")
        if data.goal is None:
            await self._meta.set_meta(goal_card_key(session_id), "")  # cleared: next goal, new card

    async def _deliver(
        self,
        route: ChatRoute,
        current: int | None,
        view: cards.CardView,
        *,
        restick: bool,
        moved_html: str,
    ) -> int:
        """Edit the card in place, or post it anew (restick, first card, or edit lost).

        A reposted card's old message keeps no buttons and says where the card went, so it
        never shows a stale state ("working…") forever.
        """
        markup = cards.to_markup(view)
        if current is not None and not restick:
            result = await self._outbox.edit(route.chat_id, current, view.text, reply_markup=markup)
            if result.outcome != "not_found":
                return current
            _log.info("telegram.presenter.repost chat=%s message=%s", route.chat_id, current)
            current = None
        msg = await self._outbox.send_text(
            route.chat_id, view.text, thread_id=route.thread, reply_markup=markup
        )
        if current is not None:
            self._outbox.edit(route.chat_id, current, moved_html, reply_markup=None)
            await self._unpin(route.chat_id, current)
        await self._pin(route.chat_id, msg.message_id)
        return msg.message_id

    async def _pin(self, chat_id: int, message_id: int) -> None:
        try:
            await self._outbox.pin(chat_id, message_id)
        except Exception as exc:  # pinning is a nicety: missing rights or a 403 change nothing
            _log.info("telegram.presenter.pin_failed chat=%s %s", chat_id, type(exc).__name__)

    async def _unpin(self, chat_id: int, message_id: int) -> None:
        """Unpin the card a restick replaced, so pins do not pile up (failures ignored)."""
        bot = self._bot
        if bot is None:
            return

        async def run() -> bool:
            return bool(await bot.unpin_chat_message(chat_id, message_id))

        try:
            await self._outbox.call(chat_id, run)
        except Exception as exc:  # an unpinned or unpinnable card changes nothing
            _log.info("telegram.presenter.unpin_failed chat=%s %s", chat_id, type(exc).__name__)

    async def _send_review(self, route: ChatRoute, title: str, markdown: str) -> list[int]:
        """Post the plan text for review; returns the ids of the messages sent."""
        if not markdown.strip():
            return []
        chunks = await messages_or_document(markdown, max_messages=MAX_REVIEW_MESSAGES)
        if chunks is None:
            msg: Message = await self._outbox.send_document(
                route.chat_id,
                markdown.encode("utf-8"),
                "plan.md",
                caption_html=f"📄 The plan: <b>{escape(title or 'Untitled plan')}</b>",
                thread_id=route.thread,
            )
            return [msg.message_id]
        ids: list[int] = []
        for chunk in chunks:
            sent = await self._outbox.send_text(route.chat_id, chunk, thread_id=route.thread)
            ids.append(sent.message_id)
        return ids

    async def _send_copy(self, session_id: str, route: ChatRoute, reply_to: int | None) -> None:
        async def send() -> None:
            data = await self._engine.plan_card(session_id)
            view = plan_view(data).without_buttons()
            await self._outbox.send_text(
                route.chat_id, view.text, thread_id=route.thread, reply_to=reply_to
            )

        await self._guard(send())

    async def _retire(self, session_id: str, known: set[tuple[int, int]]) -> None:
        route = await self._routes.lookup(session_id)
        if route is not None:
            stored = await self._meta.get_meta(goal_card_key(session_id))
            goal_id = _stored_card(stored, route.chat_id)
            if goal_id is not None:
                known.add((route.chat_id, goal_id))
        data = await self._engine.plan_card(session_id)
        flow = data.sidecar.flow if data.sidecar is not None else None
        if flow is not None and flow.chat_id is not None and flow.card_id is not None:
            known.add((flow.chat_id, flow.card_id))
        for chat_id, message_id in sorted(known):
            self._outbox.edit_keyboard(chat_id, message_id, None)

    def card_id(self, session_id: str, kind: CardKind) -> int | None:
        """The message id this process last drew a session's card in (tests, diagnostics)."""
        slot = self._slots.get((session_id, kind))
        return slot.message_id if slot is not None else None


def _plan_state(value: str) -> PlanCardState:
    if value in get_args(PlanCardState):
        return cast(PlanCardState, value)
    raise ValueError(f"unknown plan card state {value!r}")


def _goal_state(value: str) -> GoalCardState:
    if value in get_args(GoalCardState):
        return cast(GoalCardState, value)
    raise ValueError(f"unknown goal card state {value!r}")


def _short(title: str, limit: int = 120) -> str:
    title = " ".join(title.split())
    return title if len(title) <= limit else title[: limit - 1] + "…"


def _stored_card(stored: str | None, chat_id: int) -> int | None:
    if not stored:
        return None
    try:
        chat, message = stored.split(":", 1)
        return int(message) if int(chat) == chat_id else None
    except ValueError:
        return None


__all__ = ["CardKind", "CardPresenter", "goal_view", "plan_view"]
