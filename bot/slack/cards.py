"""The plan card and the goal card as Block Kit messages, edited in place (docs/slack.md).

A card is drawn from the engine's card data as every front end draws it (bot.cardview: its
lines of styled text and its buttons), written here in Slack's own format: the lines in
mrkdwn, one section per 3,000 characters, one actions block per row of buttons. A button's
``action_id`` and ``value`` carry the press it sends (kind, action, short id, revision:
bot.presses's encoding), so a press is decoded and judged by the engine as on any
channel.

The plan card's ts lives in the plan sidecar's ``flow`` (as an integer, bot.slack.keys), the goal
card's in the engine's store (``set_goal_card``); a restart edits the same messages.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, Literal

from slack_sdk.errors import SlackApiError

from bot import presses as cb
from bot.cardview import CardText, Line, goal_card_text, plan_card_text
from bot.routes import ChatRoute, Routes
from bot.slack import keys
from bot.slack.outbox import SlackOutbox
from bot.slack.render import SECTION_CHARS, markdown_to_mrkdwn, slack_escape, split_mrkdwn
from engine.api import EngineApi
from engine.tasks import BackgroundTasks
from engine.text import clip

_log = logging.getLogger("plangate.slack.cards")

CardKind = Literal["plan", "goal"]
MAX_SECTIONS = 40  # of Slack's 50 blocks per message, the rest for rows of buttons
FALLBACK_CHARS = 300  # the notification text of a card
_PRIMARY = {"approve", "resume", "start", "merge"}
_DANGER = {"discard_yes", "clear_yes", "drop_yes"}


def line_mrkdwn(line: Line) -> str:
    """One card line in mrkdwn: each span escaped and marked as its style asks."""
    out: list[str] = []
    for span in line:
        if span.style == "markdown":
            out.append(markdown_to_mrkdwn(span.text))
        elif span.style == "pre":
            out.append("```\n" + slack_escape(span.text).replace("```", "`\u200b``") + "\n```")
        else:
            text = slack_escape(span.text)
            bare = text.strip()
            if span.style == "code":
                text = "`" + text.replace("`", "'") + "`" if bare else text
            elif span.style in ("bold", "italic") and bare:
                # A mark holds only when it touches the words it marks.
                mark = "*" if span.style == "bold" else "_"
                lead, trail = text[: len(text) - len(text.lstrip())], text[len(text.rstrip()) :]
                text = f"{lead}{mark}{bare}{mark}{trail}"
            out.append(text)
    return "".join(out)


def blocks_of(card: CardText) -> tuple[str, list[dict[str, Any]]]:
    """A card as ``(fallback text, blocks)``."""
    text = "\n".join(line_mrkdwn(line) for line in card.lines)
    sections = split_mrkdwn(text, SECTION_CHARS)[:MAX_SECTIONS]
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": piece}}
        for piece in sections
        if piece.strip()
    ]
    for row in card.buttons:
        elements = []
        for label, press in row:
            data = cb.encode(press.kind, press.action, press.short_id, press.revision)
            button: dict[str, Any] = {
                "type": "button",
                "text": {"type": "plain_text", "text": clip(label, 75), "emoji": True},
                "action_id": data,
                "value": data,
            }
            if press.action in _PRIMARY:
                button["style"] = "primary"
            elif press.action in _DANGER:
                button["style"] = "danger"
            elements.append(button)
        if elements:
            blocks.append({"type": "actions", "elements": elements})
    plain = card.plain().strip()
    first = plain.split("\n", 1)[0] if plain else "plangate"
    return clip(first, FALLBACK_CHARS), blocks


class SlackCards:
    """Draws each session's cards: a redraw is coalesced per card and never awaited by the
    handler that asked for it; one drawing per card at a time."""

    def __init__(
        self,
        engine: EngineApi,
        outbox: SlackOutbox,
        routes: Routes,
    ) -> None:
        self._engine = engine
        self._outbox = outbox
        self._routes = routes
        self._dirty: dict[tuple[str, CardKind], bool] = {}  # value: post anew (restick)
        self._running: dict[tuple[str, CardKind], asyncio.Task[None]] = {}
        self._tasks = BackgroundTasks(_log)
        # A plan card posted before its plan had a sidecar (planning just began): its ts, until
        # the sidecar's flow can hold it.
        self._unbound: dict[str, str] = {}

    def refresh(self, session_id: str, kind: CardKind, *, anew: bool = False) -> None:
        """Redraw the card from the engine's data (``anew``: post it at the bottom)."""
        slot = (session_id, kind)
        self._dirty[slot] = self._dirty.get(slot, False) or anew
        if slot not in self._running:
            self._running[slot] = self._tasks.spawn(self._loop(slot), name=f"card:{kind}")

    async def flush(self) -> None:
        while self._running:
            with contextlib.suppress(Exception):
                await asyncio.gather(*self._running.values())

    async def _loop(self, slot: tuple[str, CardKind]) -> None:
        try:
            while slot in self._dirty:
                anew = self._dirty.pop(slot)
                try:
                    if slot[1] == "plan":
                        await self._draw_plan(slot[0], anew=anew)
                    else:
                        await self._draw_goal(slot[0], anew=anew)
                except Exception as exc:  # a card that failed is drawn again on the next change
                    _log.warning(
                        "slack: card %s not drawn (%s: %s)", slot[1], type(exc).__name__, exc
                    )
        finally:
            self._running.pop(slot, None)

    async def _place(self, session_id: str) -> tuple[ChatRoute, str, str | None] | None:
        route = await self._routes.lookup(session_id)
        if route is None or not keys.is_slack_chat(route.chat_id):
            return None
        return route, keys.channel_of(route.chat_id), keys.ts_of(route.thread_id)

    async def _show(
        self,
        channel: str,
        thread_ts: str | None,
        card: CardText,
        old_ts: str | None,
        *,
        anew: bool,
    ) -> str | None:
        """Edit the card at ``old_ts`` (or post it; ``anew``: post, and the old loses its
        buttons); the new ts when one was posted."""
        text, blocks = blocks_of(card)
        if anew and old_ts is not None and self._outbox.last_ts.get(channel) == old_ts:
            anew = False  # already the newest message: edited where it is
        if old_ts is not None and not anew:
            try:
                await self._outbox.update(channel, old_ts, text, blocks=blocks)
                return None
            except SlackApiError as err:
                if err.response.get("error") != "message_not_found":
                    raise
        if old_ts is not None and anew:
            stripped_text, stripped = blocks_of(card.without_buttons())
            with contextlib.suppress(SlackApiError):
                await self._outbox.update(channel, old_ts, stripped_text, blocks=stripped)
        return await self._outbox.post(channel, text, blocks=blocks, thread_ts=thread_ts)

    async def _draw_plan(self, session_id: str, *, anew: bool) -> None:
        place = await self._place(session_id)
        if place is None:
            return
        route, channel, thread_ts = place
        data = await self._engine.plan_card(session_id)
        sidecar = data.sidecar
        flow = sidecar.flow if sidecar is not None else None
        here = keys.chat_ref(route.chat_id)
        old = flow.card_id if flow is not None and flow.chat_id == here else None
        old_ts = old if old is not None else self._unbound.get(session_id)
        if old_ts is None and data.state == "none" and data.ended is None:
            return  # nothing to show and nothing on screen
        card = plan_card_text(data, now=time.time())
        ts = await self._show(channel, thread_ts, card, old_ts, anew=anew)
        if sidecar is None:
            if ts is not None:
                self._unbound[session_id] = ts
            return
        if ts is None and old is None and old_ts is not None:
            ts = old_ts  # the card drawn before the sidecar existed: now it is the plan's
        self._unbound.pop(session_id, None)
        if ts is not None:
            await self._engine.set_plan_flow(
                session_id,
                chat_id=here,
                thread_id=keys.engine_chat(route.chat_id, route.thread_id).key
                if route.thread_id
                else None,
                card_id=keys.message_ref(ts),
                plan_id=sidecar.id,
            )

    async def _draw_goal(self, session_id: str, *, anew: bool) -> None:
        place = await self._place(session_id)
        if place is None:
            return
        route, channel, thread_ts = place
        data = await self._engine.goal_card(session_id)
        old = data.card_id if data.chat_id == keys.chat_ref(route.chat_id) else None
        if old is None and data.goal is None:
            return
        ts = await self._show(channel, thread_ts, goal_card_text(data), old, anew=anew)
        if ts is not None:
            # The goal card's message lives in the engine's store, as the plan card's does.
            await self._engine.set_goal_card(
                session_id, chat_id=keys.chat_ref(route.chat_id), card_id=keys.message_ref(ts)
            )


__all__ = ["SlackCards", "blocks_of"]
