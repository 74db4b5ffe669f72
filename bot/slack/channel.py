"""The agent's Channel on Slack (``engine.agent.channel.Channel``; docs/slack.md).

Replies are rendered Markdown -> mrkdwn and posted where the session lives (the channel, the DM
or the thread); one longer than ``document_chars`` goes as its first paragraph plus the whole
answer as ``answer.md`` (``files_upload_v2``). ``ask_user`` options are buttons whose press
comes back as the person's message; tool approvals carry Allow once / Allow for this session /
Deny as buttons with the engine's press data; plan and goal changes redraw the cards. Slack has
no typing indicator for bots and no drafts: those are no-ops.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bot import presses as cb
from bot.approvals import (
    TRUSTS_PROJECT_CONFIG,
    approval_buttons,
    closed_text,
    question,
    unattended_parts,
)
from bot.cardview import first_paragraph
from bot.routes import Routes
from bot.slack import keys
from bot.slack.cards import SlackCards
from bot.slack.outbox import SlackOutbox
from bot.slack.render import (
    MESSAGE_CHARS,
    SLACK_LIMITS,
    fence,
    markdown_to_mrkdwn,
    split_mrkdwn,
)
from bot.slack.render import slack_escape as escape
from engine.api import ApprovalView
from engine.events import ApprovalDecision, TurnOutcome
from engine.keys import MessageKey
from engine.text import clip

_log = logging.getLogger("plangate.slack.channel")

REPLY_DOCUMENT_CHARS = 6000
ANSWER_FILE = "answer.md"
SUMMARY_CHARS = 1500
MAX_COMMAND_SHOWN = 2500
MAX_DIFF_SHOWN = 2500
MAX_OPTIONS = 10


def _buttons(row: Sequence[tuple[str, str]]) -> dict[str, Any]:
    return {
        "type": "actions",
        "elements": [
            {
                "type": "button",
                "text": {"type": "plain_text", "text": clip(label, 75), "emoji": True},
                "action_id": data,
                "value": data,
            }
            for label, data in row
        ],
    }


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": clip(text, 3000)}}


@dataclass(frozen=True, slots=True)
class Question:
    """An ``ask_user`` question on screen."""

    session_id: str
    options: tuple[str, ...]
    channel: str
    ts: str


class SlackChannel:
    """``Channel`` for Slack; every method is safe to call from any agent task."""

    def __init__(
        self,
        outbox: SlackOutbox,
        cards: SlackCards,
        routes: Routes,
        *,
        document_chars: int = REPLY_DOCUMENT_CHARS,
    ) -> None:
        self._outbox = outbox
        self._cards = cards
        self._routes = routes
        self._document_chars = document_chars
        self._questions: dict[str, Question] = {}
        self._approvals: dict[str, tuple[str, str, str]] = {}  # request id -> channel, ts, text
        self._posting: dict[str, asyncio.Future[None]] = {}
        self.limits = SLACK_LIMITS

    async def place(self, session_id: str) -> tuple[str, str | None] | None:
        """Where the session lives: (conversation id, thread ts); None when not on Slack."""
        route = await self._routes.lookup(session_id)
        if route is None or not keys.is_slack_chat(route.chat_id):
            _log.warning("plangate.slack.no_route session=%s", session_id)
            return None
        return keys.channel_of(route.chat_id), keys.ts_of(route.thread_id)

    async def say(self, session_id: str, mrkdwn: str) -> None:
        """Post ``mrkdwn`` where the session lives, cut into messages Slack shows whole."""
        place = await self.place(session_id)
        if place is None:
            return
        for piece in split_mrkdwn(mrkdwn, MESSAGE_CHARS):
            await self._outbox.post(place[0], piece, thread_ts=place[1])

    async def reply(self, session_id: str, text: str, *, reply_to: MessageKey | None) -> None:
        """A turn's final text; longer than ``document_chars``: a summary and ``answer.md``."""
        if not text.strip():
            return
        mrkdwn = await asyncio.to_thread(markdown_to_mrkdwn, text)
        if len(mrkdwn) <= self._document_chars:
            await self.say(session_id, mrkdwn)
            return
        place = await self.place(session_id)
        if place is None:
            return
        summary = markdown_to_mrkdwn(clip(first_paragraph(text), SUMMARY_CHARS))
        await self._outbox.upload(
            place[0],
            text.encode("utf-8"),
            ANSWER_FILE,
            comment=f"{summary}\n\n_The whole answer is in {ANSWER_FILE}._",
            thread_ts=place[1],
        )

    async def ask(self, session_id: str, question: str, options: Sequence[str]) -> None:
        place = await self.place(session_id)
        if place is None:
            return
        token = secrets.token_hex(4)
        shown = tuple(clip(o, 75) for o in options[:MAX_OPTIONS])
        body = "❓ " + markdown_to_mrkdwn(question)
        blocks = [_section(body)]
        if shown:
            blocks.append(_buttons([(o, f"q:{token}:{i}") for i, o in enumerate(shown)]))
        ts = await self._outbox.post(place[0], clip(body, 3000), blocks=blocks, thread_ts=place[1])
        if shown:
            self._questions[token] = Question(
                session_id, tuple(options[:MAX_OPTIONS]), place[0], ts
            )

    def answer(self, action_id: str) -> tuple[Question, str] | None:
        """The question and option an option button names (None: not asked in this process)."""
        _, token, index = [*action_id.split(":"), "", ""][:3]
        question = self._questions.get(token)
        if question is None or not index.isdigit() or int(index) >= len(question.options):
            return None
        del self._questions[token]
        return question, question.options[int(index)]

    async def typing(self, session_id: str) -> None:
        return None  # Slack shows bots no typing indicator through the Web API

    async def turn_started(self, session_id: str) -> None:
        self._cards.refresh(session_id, "plan")

    async def turn_ended(self, session_id: str, outcome: TurnOutcome) -> None:
        self._cards.refresh(session_id, "plan")
        self._cards.refresh(session_id, "goal")

    async def plan_changed(self, session_id: str) -> None:
        self._cards.refresh(session_id, "plan")

    async def goal_changed(self, session_id: str) -> None:
        self._cards.refresh(session_id, "goal")

    async def notice(self, session_id: str, text: str) -> None:
        await self.say(session_id, escape(text))

    async def send_file(
        self, session_id: str, data: bytes, filename: str, *, caption: str | None
    ) -> None:
        place = await self.place(session_id)
        if place is None:
            raise RuntimeError("this session has no Slack conversation")
        await self._outbox.upload(
            place[0],
            data,
            filename,
            comment=escape(caption) if caption else None,
            thread_ts=place[1],
        )

    async def drafts_wanted(self, session_id: str) -> bool:
        return False  # a Slack message edited a few times a second would spend the edit tier

    async def draft(self, session_id: str, text: str, *, more: bool = False) -> None:
        return None

    def _approval_text(self, view: ApprovalView) -> str:
        """The approval message in mrkdwn, worded as on every channel (bot.approvals)."""
        code = fence(clip(view.command, MAX_COMMAND_SHOWN))
        if view.diff:
            code += "\n" + fence(clip(view.diff, MAX_DIFF_SHOWN))
        if view.unattended:
            bold, rest = unattended_parts(view)
            text = f"🔐 *{escape(bold)}*{escape(rest)}\n{code}"
            if view.also:
                text += "\nAlso not run:\n" + "\n".join(
                    f"• `{escape(clip(c, 200, one_line=True))}`" for c in view.also[:15]
                )
        else:
            text = f"🔐 *{escape(question(view))}*"
            if view.reason:
                text += f"\nWhy: {escape(clip(view.reason, 300))}"
            text += f"\n{code}"
        if view.rule and view.trusts_project_config:
            text += f"\n_{TRUSTS_PROJECT_CONFIG}_"
        return text

    def _approval_rows(self, view: ApprovalView) -> list[list[tuple[str, str]]]:
        return [
            [(label, cb.encode(p.kind, p.action, p.short_id, p.revision)) for label, p in row]
            for row in approval_buttons(view)
        ]

    async def approval_asked(self, session_id: str, view: ApprovalView) -> None:
        """One approval message with the buttons; an unattended round's notice asked again
        for the same request (more commands it could not run) is edited in place."""
        text = self._approval_text(view)
        blocks = [_section(text)] + [_buttons(row) for row in self._approval_rows(view)]
        known = self._approvals.get(view.request_id)
        if known is not None:
            await self._outbox.update(known[0], known[1], clip(text, 3000), blocks=blocks)
            self._approvals[view.request_id] = (known[0], known[1], text)
            return
        place = await self.place(session_id)
        if place is None:
            return
        posted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._posting[view.request_id] = posted
        try:
            ts = await self._outbox.post(
                place[0], clip(text, 3000), blocks=blocks, thread_ts=place[1]
            )
            self._approvals[view.request_id] = (place[0], ts, text)
        finally:
            posted.set_result(None)
            self._posting.pop(view.request_id, None)

    async def approval_closed(
        self, session_id: str, view: ApprovalView, decision: ApprovalDecision
    ) -> None:
        posting = self._posting.get(view.request_id)
        if posting is not None:
            await posting
        found = self._approvals.pop(view.request_id, None)
        if found is None:
            return
        channel, ts, text = found
        closed = escape(closed_text(view, decision))
        full = f"{text}\n{closed}"
        await self._outbox.update(channel, ts, clip(full, 3000), blocks=[_section(full)])


__all__ = ["Question", "SlackChannel", "escape"]
