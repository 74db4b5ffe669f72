"""The plan card and the goal card on Telegram: one live message each per session.

The presenter draws what the engine says (``engine.plan_card()`` / ``engine.goal_card()``)
with ``bot.telegram.cards`` and delivers it through the outbox; it keeps no card state of its own,
only where the cards are:

- one card message per plan, edited in place from ``/plan`` to Done; its id is written to the
  sidecar's ``flow`` (``engine.set_plan_flow``) the moment Telegram returns it, before any
  other call for that card, so every later drawing (the final Done included) edits it and a
  restart keeps editing it; the goal card's id lives in the meta table;
- in review the card carries the plan itself; a plan too long for one message goes once per
  revision as the ``.md`` document (a reply to the card) and the card lists the steps;
- refreshes are coalesced: at most one draw per card per ``edit_interval_s``, reading the
  engine at draw time, so the last state is always the one delivered; an unchanged text and
  keyboard makes no call (the outbox compares);
- the card is posted anew only on restick (``/plan``, ``/show-plan``), when it has scrolled
  far up as a plan enters review (``REPOST_AFTER_MESSAGES``), or when its message is gone;
  the old message keeps a "moved below" line and no buttons;
- pinning is a setting (``pin``: ``auto`` pins in private chats only).

Every public verb returns at once and works in a background task; :meth:`flush` waits for
them (tests, shutdown). Failures are logged, never raised into a handler.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Literal

from telegram import Bot, Message

from bot.cardview import BUSY_NOTE as BUSY_NOTE
from bot.cardview import ENDED_NOTE as _ENDED_NOTE
from bot.cardview import SETUP_NOTE as SETUP_NOTE
from bot.cardview import plan_note
from bot.telegram import cards
from bot.telegram.keys import chat_key, msg_id, msg_key, tg_flow
from bot.telegram.outbox import Outbox
from bot.telegram.routes import (
    ChatRoute,
    MetaStore,
    Routes,
    goal_card_key,
    patch_key,
    review_rev_key,
)
from engine.api import EngineApi, GoalCardData, PlanCardData
from engine.tasks import BackgroundTasks

_log = logging.getLogger("plangate.presenter")

CardKind = Literal["plan", "goal"]
PinCards = Literal["auto", "always", "never"]
# A plan entering review is reposted at the bottom when this many messages came after it.
REPOST_AFTER_MESSAGES = 10
# While a turn works, the card's "last progress" line is brought up to date this often.
HEARTBEAT_S = 60.0

MOVED_NOTE = "This card moved below ⬇️"


def plan_view(
    data: PlanCardData, *, now: float | None = None, attached: bool = False
) -> cards.CardView:
    """The plan card for the engine's card data.

    A plan that just ended is drawn from its last sidecar: a completed one as done, a
    discarded or abandoned one as "No plan" with a line saying what happened to it.
    ``attached``: the plan text went as a document, so the review card lists the steps.
    """
    sidecar = data.sidecar
    if data.ended in _ENDED_NOTE and sidecar is not None:
        note = _ENDED_NOTE[data.ended].format(title=sidecar.title or "Untitled plan")
        if data.worktree is not None and data.worktree.message:
            note += f" · {data.worktree.message}"  # what happened to its branch
        return cards.build_plan_card(None, "none", note=note)
    return cards.build_plan_card(
        sidecar,
        data.state,
        note=plan_note(data, now=time.time() if now is None else now),
        markdown=data.markdown,
        attached=attached,
        approvals=data.approvals,
        approvals_needed=data.approvals_needed,
        worktree=data.worktree,
        raise_cap=data.raise_cap,
        steps=data.steps,
        checks=data.checks,
        retry=data.retry,
        output=data.setup_tail,
        actions=data.actions,
        branch=data.branch_actions,
    )


def goal_view(data: GoalCardData, *, note: str | None = None) -> cards.CardView:
    """The goal card for the engine's card data."""
    return cards.build_goal_card(
        data.goal,
        armed=data.armed,
        confirm_clear=data.state == "confirm_clear",
        note=note,
        tokens_used=data.tokens_used,
        last_check=data.last_check,
        actions=data.actions,
    )


@dataclass
class _Slot:
    """One card of one session: where it is and what is waiting to be drawn."""

    message_id: int | None = None
    chat_id: int | None = None
    # The plan the card was drawn for (a plan card's message belongs to one plan).
    plan_id: str | None = None
    pinned: bool = False
    # The ended plan whose last card this slot drew (a finished plan is posted at most once).
    ended_posted: str | None = None
    dirty: bool = False
    note: str | None = None
    last_draw_s: float = -math.inf
    last_state: str | None = None
    # A press or a command asked for this redraw: it goes now, ahead of progress edits.
    interactive: bool = False
    waiting: bool = False  # the refresh loop sleeps out the edit interval
    task: asyncio.Task[None] | None = None
    heartbeat: asyncio.Task[None] | None = None
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
        group_edit_interval_s: float | None = None,
        bot: Bot | None = None,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        pin: PinCards = "auto",
    ) -> None:
        self._engine = engine
        self._outbox = outbox
        self._routes = routes
        self._meta = meta
        self._interval_s = edit_interval_s
        # In a group every call counts against about 20 a minute: progress edits are spaced
        # further, leaving the budget to what a person waits for.
        self._group_interval_s = max(edit_interval_s, group_edit_interval_s or edit_interval_s)
        self._bot = bot
        self._clock = clock
        self._sleep = sleep
        self._slots: dict[tuple[str, CardKind], _Slot] = {}
        self._tasks = BackgroundTasks(_log, event="failed")
        self._holds: dict[str, int] = {}
        self._pin_mode = pin
        self._closed = False
        # The newest message id seen per chat (ours and the owners'): how far up a card is.
        self._latest: dict[int, int] = {}
        # A delivery past the outbox's deadline: the chat's cards are drawn again.
        outbox.listen(delivery_failed=self._delivery_failed)

    # ---- public verbs ------------------------------------------------------------------

    def saw_message(self, chat_id: int, message_id: int) -> None:
        """A message appeared in the chat (an update, or one of ours): cards scroll up."""
        if message_id > self._latest.get(chat_id, 0):
            self._latest[chat_id] = message_id

    def refresh(self, session_id: str, kind: CardKind, *, interactive: bool = False) -> None:
        """Redraw the card in place soon (coalesced), from the engine's card data.

        ``interactive``: the visible answer to a press or a command; it is drawn at once,
        not after the edit interval, and goes ahead of queued progress edits. While the
        session is held (a command is being decided) the redraw waits for :meth:`release`,
        so the command's reply comes before a card the command created.
        """
        slot = self._slot(session_id, kind)
        slot.dirty = True
        slot.interactive = slot.interactive or interactive
        if not self._holds.get(session_id):
            self._kick(session_id, kind, slot)

    def _kick(self, session_id: str, kind: CardKind, slot: _Slot) -> None:
        """Start the slot's refresh loop; an interactive redraw cuts a sleeping one short."""
        if slot.interactive and slot.waiting and slot.task is not None and not slot.task.done():
            slot.task.cancel()  # it only sleeps out the interval: draw now instead
            slot.task = None
        if slot.task is None or slot.task.done():
            loop = self._refresh_loop(session_id, kind, slot)
            slot.task = self._tasks.spawn(loop, name=f"refresh:{kind}:{session_id}")

    def redraw_chat(self, chat_id: int) -> None:
        """Redraw every card of the sessions in ``chat_id`` (a delivery there failed)."""
        sessions = set(self._routes.sessions_in(chat_id))
        sessions.update(sid for (sid, _), slot in self._slots.items() if slot.chat_id == chat_id)
        for session_id in sorted(sessions):
            self.refresh(session_id, "plan")
            self.refresh(session_id, "goal")

    async def _delivery_failed(self, chat_id: int, message_id: int | None, err: Exception) -> None:
        # Past the outbox's deadline: draw the chat's cards again from the latest state.
        self.redraw_chat(chat_id)

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
            if slot is not None and slot.dirty:
                self._kick(session_id, kind, slot)

    def restick(
        self,
        session_id: str,
        kind: CardKind,
        *,
        note: str | None = None,
        reply_to: int | None = None,
    ) -> None:
        """Post the card anew at the bottom and strip the old one's keyboard (in background)."""
        slot = self._slot(session_id, kind)
        slot.dirty = False  # the restick draws the latest state itself
        slot.note = note
        draw = self._draw(session_id, kind, slot, restick=True, reply_to=reply_to)
        self._tasks.spawn(self._locked(slot, draw), name=f"restick:{kind}:{session_id}")

    def show_copy(self, session_id: str, route: ChatRoute, *, reply_to: int | None) -> None:
        """Send a copy of the plan card without buttons (a non-owner's /show-plan)."""
        self._tasks.spawn(self._send_copy(session_id, route, reply_to), name=f"copy:{session_id}")

    def retire(self, session_id: str) -> None:
        """Strip the keyboards of a session's cards and forget them (``/new``).

        Known ids come from this process, the goal card's meta entry and the plan's flow, so
        cards drawn before a restart lose their buttons too.
        """
        known: set[tuple[int, int]] = set()
        for kind in ("plan", "goal"):
            slot = self._slots.pop((session_id, kind), None)
            if slot is not None and slot.heartbeat is not None:
                slot.heartbeat.cancel()
            if slot is not None and slot.message_id is not None and slot.chat_id is not None:
                known.add((slot.chat_id, slot.message_id))
        self._tasks.spawn(self._retire(session_id, known), name=f"retire:{session_id}")

    async def flush(self) -> None:
        """Wait until every pending draw has been delivered (bounded by the callers)."""
        await self._tasks.drain()
        await self._outbox.flush()

    async def aclose(self) -> None:
        """Cancel pending draws (shutdown)."""
        self._closed = True
        for slot in self._slots.values():
            if slot.heartbeat is not None:
                slot.heartbeat.cancel()
        await self._tasks.aclose()

    # ---- scheduling --------------------------------------------------------------------

    def _slot(self, session_id: str, kind: CardKind) -> _Slot:
        return self._slots.setdefault((session_id, kind), _Slot())

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
            _log.warning("plangate.presenter.failed %s: %s", type(exc).__name__, exc)

    async def _refresh_loop(self, session_id: str, kind: CardKind, slot: _Slot) -> None:
        while slot.dirty:
            interval = self._group_interval_s if (slot.chat_id or 0) < 0 else self._interval_s
            wait = slot.last_draw_s + interval - self._now()
            if wait > 0 and not slot.interactive:
                slot.waiting = True
                try:
                    await self._sleep(wait)
                finally:
                    slot.waiting = False
            if self._holds.get(session_id):
                return  # release() starts the loop again
            slot.dirty = False
            interactive, slot.interactive = slot.interactive, False
            async with slot.lock:
                draw = self._draw(session_id, kind, slot, restick=False, interactive=interactive)
                await self._guard(draw)
            slot.last_draw_s = self._now()

    def _beat(self, session_id: str, slot: _Slot) -> None:
        """Bring a working card's "last progress" up to date in a while (one timer a card).

        Not one of the draws :meth:`flush` waits for: it only rewrites a relative time.
        """
        if slot.heartbeat is not None and not slot.heartbeat.done():
            return

        async def later() -> None:
            await self._sleep(HEARTBEAT_S)
            if not self._closed and self._slots.get((session_id, "plan")) is slot:
                self.refresh(session_id, "plan")

        slot.heartbeat = asyncio.get_running_loop().create_task(later())

    # ---- drawing -----------------------------------------------------------------------

    async def _draw(
        self,
        session_id: str,
        kind: CardKind,
        slot: _Slot,
        *,
        restick: bool,
        reply_to: int | None = None,
        interactive: bool = False,
    ) -> None:
        if kind == "plan":
            await self._draw_plan(
                session_id, slot, restick=restick, reply_to=reply_to, interactive=interactive
            )
        else:
            await self._draw_goal(session_id, slot, restick=restick, interactive=interactive)

    async def route(self, session_id: str, data: PlanCardData | None = None) -> ChatRoute | None:
        """Where the session lives: the routes seen, else the plan sidecar's ``flow`` (pass
        the plan card ``data`` already read to save a read); ``None`` when neither knows."""
        route = await self._routes.lookup(session_id)
        if route is not None:
            return route
        if data is None:
            data = await self._engine.plan_card(session_id)
        flow = tg_flow(data.sidecar.flow) if data.sidecar is not None else None
        if flow is not None and flow.chat_id is not None:
            return ChatRoute(flow.chat_id, flow.thread_id)
        return None

    async def _draw_plan(
        self,
        session_id: str,
        slot: _Slot,
        *,
        restick: bool,
        reply_to: int | None = None,
        interactive: bool = False,
    ) -> None:
        data = await self._engine.plan_card(session_id)
        route = await self.route(session_id, data)
        if route is None:
            _log.info("plangate.presenter.no_route session=%s", session_id)
            return
        sidecar = data.sidecar
        current: int | None = None
        if sidecar is not None:
            flow = tg_flow(sidecar.flow)
            if flow.chat_id in (None, route.chat_id):
                current = flow.card_id
            mine = slot.chat_id == route.chat_id and slot.message_id is not None
            if current is None and mine and slot.plan_id == sidecar.id:
                current = slot.message_id  # drawn by this process, its id not yet stored
            elif current is None and mine and slot.plan_id != sidecar.id:
                # The previous plan's card: leave its last text, take its buttons away.
                assert slot.message_id is not None
                self._outbox.edit_keyboard(route.chat_id, slot.message_id, None)
                slot.message_id = None
            # An ended plan whose card is unknown: a plan that finished before its first
            # drawing gets one Done card, never a second; a discarded one gets none.
            if (
                current is None
                and data.ended is not None
                and not restick
                and (data.ended != "completed" or slot.ended_posted == sidecar.id)
            ):
                return
        else:
            current = slot.message_id if slot.chat_id == route.chat_id else None
            if current is None and not restick:
                return  # no plan and no card on screen: nothing to draw
        attached = False
        review_ids: list[int] | None = None
        entering_review = data.state == "review" and slot.last_state != "review"
        slot.last_state = data.state
        if sidecar is not None and data.state == "review" and data.markdown:
            note = plan_note(data, now=time.time())
            attached = not cards.review_fits(
                sidecar,
                data.markdown,
                state=data.state,
                note=note,
                approvals=data.approvals,
                approvals_needed=data.approvals_needed,
            )
            if entering_review and current is not None and self._scrolled(route, current):
                restick = True
        view = plan_view(data, attached=attached)
        plan_id = sidecar.id if sidecar is not None and data.ended is None else None
        moved = self._moved_html(sidecar.title if sidecar is not None else "", "📋")

        async def stored(card_id: int) -> None:
            if sidecar is not None:
                await self._engine.set_plan_flow(
                    session_id,
                    chat_id=chat_key(route.chat_id),
                    thread_id=thread_key(route),
                    card_id=msg_key(card_id),
                    plan_id=sidecar.id,
                )

        new_id = await self._deliver(
            route,
            current,
            view,
            slot,
            restick=restick,
            moved_html=moved,
            reply_to=reply_to,
            on_new_id=stored,
            interactive=interactive,
        )
        slot.plan_id = sidecar.id if sidecar is not None else None
        if data.ended is not None and sidecar is not None:
            slot.ended_posted = sidecar.id
        if attached and sidecar is not None and data.markdown is not None:
            # Once per revision (plan id too: revisions restart with every plan).
            posted = f"{sidecar.id}:{sidecar.revision}"
            if await self._meta.get_meta(review_rev_key(session_id)) != posted:
                review_ids = [await self._send_plan_document(route, sidecar.title, data, new_id)]
                await self._meta.set_meta(review_rev_key(session_id), posted)
                await self._engine.set_plan_flow(
                    session_id,
                    chat_id=chat_key(route.chat_id),
                    thread_id=thread_key(route),
                    card_id=msg_key(new_id),
                    review_ids=[str(i) for i in review_ids],
                    plan_id=plan_id,
                )
        worktree = data.worktree
        if (
            worktree is not None
            and sidecar is not None
            and worktree.patch
            and not cards.patch_inline(sidecar, data.state, worktree, note=plan_note(data, now=0))
        ):
            # The diff too long for the Done card goes once, as a reply to it.
            posted = f"{worktree.plan_id}:{worktree.patch_name}"
            if await self._meta.get_meta(patch_key(session_id)) != posted:
                await self._meta.set_meta(patch_key(session_id), posted)
                await self._send_patch(route, worktree.patch_name, worktree.patch, new_id)
        if data.busy and data.state == "active":
            self._beat(session_id, slot)
        if sidecar is None or data.state in ("none", "done"):
            slot.message_id = None  # the plan is gone: the next plan gets a card of its own
            slot.plan_id = None

    def _scrolled(self, route: ChatRoute, card_id: int) -> bool:
        """The card has scrolled far up: enough messages came after it."""
        return self._latest.get(route.chat_id, card_id) - card_id > REPOST_AFTER_MESSAGES

    @staticmethod
    def _moved_html(title: str, icon: str) -> str:
        return f"{icon} <b>{cards.clip_line(title or 'Plan')}</b>\n<i>{MOVED_NOTE}</i>"

    async def _draw_goal(
        self, session_id: str, slot: _Slot, *, restick: bool, interactive: bool = False
    ) -> None:
        data = await self._engine.goal_card(session_id)
        note, slot.note = slot.note, None
        route = await self.route(session_id)
        if route is None:
            _log.info("plangate.presenter.no_route session=%s", session_id)
            return
        current = await self._goal_card_id(session_id, data, route.chat_id)
        if current is None and not restick and (data.goal is None or data.goal.source == "task"):
            # Nothing on screen, and nothing worth a card: a task goal is only a label of the
            # plan card's current task, so it never posts a goal card by itself.
            return
        view = goal_view(data, note=note)

        async def stored(card_id: int) -> None:
            await self._engine.set_goal_card(
                session_id, chat_id=chat_key(route.chat_id), card_id=msg_key(card_id)
            )

        new_id = await self._deliver(
            route,
            current,
            view,
            slot,
            restick=restick,
            moved_html=self._moved_html("Goal", "🎯"),
            on_new_id=stored,
            interactive=interactive,
        )
        slot.chat_id, slot.message_id = route.chat_id, new_id
        if data.goal is None:  # cleared: the next goal gets a new card
            await self._engine.set_goal_card(session_id, chat_id=None, card_id=None)

    async def _goal_card_id(self, session_id: str, data: GoalCardData, chat_id: int) -> int | None:
        """The goal card's message in ``chat_id``, as the engine keeps it. A home from before
        the engine kept it has it in the meta table: adopted into the engine once."""
        if data.card_id is not None:
            return msg_id(data.card_id) if data.chat_id == chat_key(chat_id) else None
        legacy = await self._meta.get_meta(goal_card_key(session_id))
        if not legacy:
            return None
        await self._meta.set_meta(goal_card_key(session_id), "")
        found = _stored_card(legacy, chat_id)
        if found is not None:
            await self._engine.set_goal_card(
                session_id, chat_id=chat_key(chat_id), card_id=msg_key(found)
            )
        return found

    async def _deliver(
        self,
        route: ChatRoute,
        current: int | None,
        view: cards.CardView,
        slot: _Slot,
        *,
        restick: bool,
        moved_html: str,
        on_new_id: Callable[[int], Awaitable[None]],
        reply_to: int | None = None,
        interactive: bool = False,
    ) -> int:
        """Edit the card in place, or post it anew (restick, first card, or edit lost).

        A new card's id is stored (``on_new_id``) before any other call for it; then the old
        message keeps no buttons and says where the card went, so it never shows a stale
        state ("working…") forever.
        """
        markup = cards.to_markup(view)
        if current is not None and not restick:
            result = await self._outbox.edit(
                route.chat_id, current, view.text, reply_markup=markup, interactive=interactive
            )
            if result.outcome != "not_found":
                return current
            _log.info("plangate.presenter.repost chat=%s message=%s", route.chat_id, current)
            current = None
        msg = await self._outbox.send_text(
            route.chat_id, view.text, thread_id=route.thread, reply_markup=markup, reply_to=reply_to
        )
        slot.chat_id, slot.message_id = route.chat_id, msg.message_id
        self.saw_message(route.chat_id, msg.message_id)
        await on_new_id(msg.message_id)
        was_pinned, slot.pinned = slot.pinned, False
        if current is not None:
            self._outbox.edit(route.chat_id, current, moved_html, reply_markup=None)
            if was_pinned:
                await self._unpin(route.chat_id, current)
        if self._pins(route.chat_id):
            slot.pinned = await self._pin(route.chat_id, msg.message_id)
        return msg.message_id

    def _pins(self, chat_id: int) -> bool:
        if self._pin_mode == "auto":
            return chat_id > 0  # private chats only: in a group a pin is a call and a ping
        return self._pin_mode == "always"

    async def _pin(self, chat_id: int, message_id: int) -> bool:
        try:
            return await self._outbox.pin(chat_id, message_id)
        except Exception as exc:  # pinning is a nicety: missing rights or a 403 change nothing
            _log.info("plangate.presenter.pin_failed chat=%s %s", chat_id, type(exc).__name__)
            return False

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
            _log.info("plangate.presenter.unpin_failed chat=%s %s", chat_id, type(exc).__name__)

    async def _send_plan_document(
        self, route: ChatRoute, title: str, data: PlanCardData, card_id: int
    ) -> int:
        """The plan too long for the card, as the session ``.md``, a reply to the card."""
        markdown = data.markdown or ""
        msg: Message = await self._outbox.send_document(
            route.chat_id,
            markdown.encode("utf-8"),
            "plan.md",
            caption_html=f"📄 The plan: <b>{cards.clip_line(title or 'Untitled plan')}</b>",
            thread_id=route.thread,
            reply_to=card_id,
        )
        self.saw_message(route.chat_id, msg.message_id)
        return msg.message_id

    async def _send_patch(self, route: ChatRoute, name: str, patch: str, card_id: int) -> None:
        """A finished plan's whole diff, as ``plan-<slug>.patch``, a reply to its Done card."""
        msg: Message = await self._outbox.send_document(
            route.chat_id,
            patch.encode("utf-8"),
            name,
            caption_html=f"🌿 The plan's changes: <b>{cards.clip_line(name)}</b>",
            thread_id=route.thread,
            reply_to=card_id,
        )
        self.saw_message(route.chat_id, msg.message_id)

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
            goal_id = await self._goal_card_id(
                session_id, await self._engine.goal_card(session_id), route.chat_id
            )
            if goal_id is not None:
                known.add((route.chat_id, goal_id))
        data = await self._engine.plan_card(session_id)
        flow = tg_flow(data.sidecar.flow) if data.sidecar is not None else None
        if flow is not None and flow.chat_id is not None and flow.card_id is not None:
            known.add((flow.chat_id, flow.card_id))
        for chat_id, message_id in sorted(known):
            self._outbox.edit_keyboard(chat_id, message_id, None)


def thread_key(route: ChatRoute) -> str | None:
    """The flow's ``thread_id``: the forum topic's chat key (``None`` outside a topic)."""
    return chat_key(route.chat_id, route.thread_id) if route.thread_id else None


def _stored_card(stored: str | None, chat_id: int) -> int | None:
    if not stored:
        return None
    try:
        chat, message = stored.split(":", 1)
        return int(message) if int(chat) == chat_id else None
    except ValueError:
        return None


__all__ = ["CardKind", "CardPresenter", "PinCards", "goal_view", "plan_note", "plan_view"]
