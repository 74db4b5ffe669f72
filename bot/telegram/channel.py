"""The agent's Channel on Telegram (``engine.ports.Channel``).

Replies are rendered Markdown -> Telegram HTML, split at 4,096 UTF-16 units, and posted as a
reply to the message that opened the turn; ``ask_user`` questions carry their options as
buttons whose press comes back as the owner's message; plan and goal changes go to the
presenter (coalesced card edits); progress shows as ``typing``, never as a stream of messages.

Option buttons use their own callback kind, ``q:<token>:<index>``: the token names one
question in this process, so a press on a question asked before a restart is "out of date".
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import logging
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from telegram import Bot, InlineKeyboardButton, InlineKeyboardMarkup
from telegram.error import BadRequest, TelegramError

from bot import presses as cb
from bot.approvals import (
    TRUSTS_PROJECT_CONFIG,
    approval_buttons,
    closed_text,
    question,
    unattended_parts,
)
from bot.telegram.keys import msg_id
from bot.telegram.outbox import Outbox
from bot.telegram.presenter import CardPresenter
from bot.telegram.render import (
    TELEGRAM_TEXT_LIMIT,
    clip_html,
    escape,
    escape_within,
    markdown_messages,
    messages_or_document,
    summary_html,
    utf16_len,
)
from bot.telegram.routes import ChatRoute
from engine.api import ApprovalView
from engine.events import ApprovalDecision, TurnOutcome
from engine.keys import MessageKey
from engine.limits import ChannelLimits
from engine.tasks import BackgroundTasks
from engine.text import ELLIPSIS, clip

_log = logging.getLogger("plangate.channel")

QUESTION_PATTERN = r"^q:[0-9a-f]{8}:[0-9]{1,2}$"
_QUESTION = re.compile(QUESTION_PATTERN)
MAX_OPTION_LABEL = 60
MAX_OPTIONS = 10
# The longest command an approval message shows inline, in UTF-16 units of HTML, so the
# message with its diff stays under Telegram's 4,096; a longer one is attached whole as a
# document and the message shows its start.
MAX_COMMAND_SHOWN = 1200
MAX_COMMAND_HEAD = 300
# How many of an unattended notice's other commands it lists (each clipped), then a count.
MAX_ALSO_LISTED = 15
# Unattended notices remembered for editing; a round edits only its own, the newest.
MAX_NOTICES_KEPT = 64
# A write's diff longer than this (escaped) goes as a .patch document above the message.
MAX_DIFF_SHOWN = 2500
# A reply whose rendered text is longer than this (PLANGATE_REPLY_DOCUMENT_CHARS) goes as a
# short summary message plus the whole answer as answer.md.
REPLY_DOCUMENT_CHARS = 6000
# What Telegram carries in one piece: 4,096 characters a message, a caption cut short of its
# 1,024 (room for the escaping), and the 20 MB a phone still takes (a bot may send 50 MB).
TELEGRAM_LIMITS = ChannelLimits(message_chars=4096, caption_chars=1000, file_bytes=20 * 1024 * 1024)
ANSWER_FILE = "answer.md"
# The summary: the answer's first paragraph, at most this many visible characters.
SUMMARY_CHARS = 1500
# A streamed reply's draft changes at most this often (Telegram animates the changes).
DRAFT_EVERY_S = 1.0
# A draft shows at most this many characters: the end of a long one (it is plain text).
DRAFT_CHARS = 4000
# Telegram shows "typing" for about 5 s; asking again sooner only spends API calls. In a
# group every call counts against the 20-per-minute budget (AIORateLimiter counts chat
# actions too), which replies and card edits need more: there, typing is shown sparingly.
TYPING_EVERY_S = 4.0
TYPING_EVERY_GROUP_S = 20.0


@dataclass(slots=True)
class _Draft:
    """A reply being shown as a draft while it streams (one per session, one per turn).

    Only the end of the text is kept (a draft shows at most ``DRAFT_CHARS``): pieces are
    appended and folded into that tail once they hold twice as much, so each character is
    copied a bounded number of times however small the pieces (linear work in the answer).
    """

    draft_id: int
    pieces: list[str] = field(default_factory=list)
    kept: int = 0  # characters in ``pieces``
    total: int = 0  # characters of the whole draft text
    version: int = 0  # bumped by every change; ``sent`` is the version on screen
    sent: int = 0
    sent_at: float | None = None
    task: asyncio.Task[None] | None = None
    failed: bool = False

    def put(self, text: str, *, more: bool) -> None:
        if not more:
            self.pieces, self.kept, self.total = [], 0, 0
        self.pieces.append(text)
        self.kept += len(text)
        self.total += len(text)
        self.version += 1
        if self.kept > 2 * DRAFT_CHARS:
            tail = "".join(self.pieces)[-DRAFT_CHARS:]
            self.pieces, self.kept = [tail], len(tail)

    def shown(self) -> str:
        """What the draft shows: the text, or its end after an ellipsis."""
        text = "".join(self.pieces)
        if self.total <= DRAFT_CHARS:
            return text
        return ELLIPSIS + text[-(DRAFT_CHARS - 1) :]


@dataclass(frozen=True, slots=True)
class Question:
    """An ``ask_user`` question on screen: its session and the options offered."""

    session_id: str
    options: tuple[str, ...]
    chat_id: int
    message_id: int


class TelegramChannel:
    """``Channel`` for Telegram; every method is safe to call from any agent task."""

    def __init__(
        self,
        outbox: Outbox,
        presenter: CardPresenter,
        *,
        document_chars: int = REPLY_DOCUMENT_CHARS,
        bot: Bot | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._outbox = outbox
        self._presenter = presenter
        self._document_chars = document_chars
        self._bot = bot
        self._clock = clock
        self._sleep = sleep
        self._drafts: dict[str, _Draft] = {}
        self._questions: dict[str, Question] = {}
        # The question each session has open now, options or not: (chat id, message id, its
        # options' token). A reply to it is an answer (an approver may give it, once;
        # docs/roles.md); the next turn closes it, answered or not.
        self._open: dict[str, tuple[int, int, str | None]] = {}
        self._typing_at: dict[str, float] = {}
        # Approval messages on screen, by request id: where to say how they ended.
        self._approvals: dict[str, tuple[int, int, str]] = {}
        # Approval messages still being posted, by request id.
        self._posting: dict[str, asyncio.Future[None]] = {}
        # Unattended turns' notices, by request id: where they are, their text and keyboard.
        self._notices: dict[str, tuple[int, int, str, InlineKeyboardMarkup | None]] = {}
        self._tasks = BackgroundTasks(_log)
        self.limits = TELEGRAM_LIMITS

    async def route(self, session_id: str) -> ChatRoute | None:
        """Where the session lives (:meth:`CardPresenter.route`); a miss is logged."""
        route = await self._presenter.route(session_id)
        if route is None:
            _log.warning("plangate.channel.no_route session=%s", session_id)
        return route

    async def reply(self, session_id: str, text: str, *, reply_to: MessageKey | None) -> None:
        """Post a turn's final text (Markdown) as a reply to the message that opened it.

        Rendered longer than ``document_chars`` visible characters: a short summary message
        (the first paragraph) and the whole text as ``answer.md``, rather than a wall of
        messages (docs/inputs.md). Rendering runs in a thread.
        """
        self._end_draft(session_id)  # the final message replaces the draft
        route = await self.route(session_id)
        if route is None or not text.strip():
            return
        replied = msg_id(reply_to)
        chunks = await messages_or_document(text, max_visible=self._document_chars)
        if chunks is None:
            await self._answer_document(route, text, reply_to=replied)
            return
        for i, chunk in enumerate(chunks):
            await self._send(route, chunk, reply_to=replied if i == 0 else None)

    async def _answer_document(self, route: ChatRoute, text: str, *, reply_to: int | None) -> None:
        """The summary message, then the whole answer as ``answer.md`` (both reply to the
        opening message)."""
        summary = await asyncio.to_thread(summary_html, text, SUMMARY_CHARS)
        note = f"<i>The whole answer ({len(text):,} characters) is attached as {ANSWER_FILE}.</i>"
        await self._send(route, f"{summary}\n\n{note}" if summary else note, reply_to=reply_to)
        await self._outbox.send_document(
            route.chat_id,
            text.encode("utf-8", "replace"),
            ANSWER_FILE,
            thread_id=route.thread,
            reply_to=reply_to,
        )

    async def drafts_wanted(self, session_id: str) -> bool:
        """Drafts in private chats only: a group's 20 calls a minute are for the card."""
        route = await self._presenter.route(session_id)
        return self._bot is not None and route is not None and route.chat_id > 0

    async def draft(self, session_id: str, text: str, *, more: bool = False) -> None:
        """Show the reply so far (``sendMessageDraft``), at most once every ``DRAFT_EVERY_S``:
        a newer text replaces one not yet shown; the call goes through the outbox. ``more``:
        ``text`` continues the draft (each piece once). Returns at once."""
        if not text or self._bot is None:
            return
        route = await self._presenter.route(session_id)
        if route is None or route.chat_id < 0:
            return  # never in a group
        state = self._drafts.get(session_id)
        if state is None:
            state = self._drafts[session_id] = _Draft(draft_id=secrets.randbelow(2**31 - 1) + 1)
        if state.failed:
            return
        state.put(text, more=more)
        if state.task is None or state.task.done():
            state.task = self._tasks.spawn(
                self._show_drafts(route, state), name=f"draft:{session_id}"
            )

    async def _show_drafts(self, route: ChatRoute, state: _Draft) -> None:
        bot = self._bot
        assert bot is not None
        while state.version != state.sent:
            if state.sent_at is not None:
                wait = state.sent_at + DRAFT_EVERY_S - self._clock()
                if wait > 0:
                    await self._sleep(wait)
                    continue
            version, shown = state.version, state.shown()
            if not shown.strip():
                state.sent = version  # nothing to show yet (a reply opening with spaces)
                continue

            async def send(shown: str = shown) -> bool:
                # Failures end the drafts here, inside the call: the outbox must never retry
                # a draft (the final reply would wait behind it). The final message still comes.
                try:
                    return await bot.send_message_draft(
                        route.chat_id, state.draft_id, shown, message_thread_id=route.thread
                    )
                except TelegramError as err:
                    _log.info("plangate.channel.draft_failed %s", type(err).__name__)
                    state.failed = True
                    return False

            await self._outbox.call(route.chat_id, send)
            if state.failed:
                return
            state.sent, state.sent_at = version, self._clock()

    def _end_draft(self, session_id: str) -> None:
        state = self._drafts.pop(session_id, None)
        if state is not None and state.task is not None:
            state.task.cancel()

    async def send_file(
        self, session_id: str, data: bytes, filename: str, *, caption: str | None
    ) -> None:
        """Attach a file the agent named (``send_file``); raises when it could not be sent."""
        route = await self.route(session_id)
        if route is None:
            raise RuntimeError("this session has no chat to send to")
        await self._outbox.send_document(
            route.chat_id,
            data,
            filename,
            caption_html=escape(clip(caption, 1000)) if caption else None,
            thread_id=route.thread,
        )

    async def _send(self, route: ChatRoute, html: str, *, reply_to: int | None) -> None:
        """Send HTML; if Telegram cannot parse it (a renderer bug), send it as plain text."""
        try:
            sent = await self._outbox.send_text(
                route.chat_id, html, thread_id=route.thread, reply_to=reply_to
            )
            self._presenter.saw_message(route.chat_id, sent.message_id)
        except BadRequest as err:
            if "parse entities" not in err.message:
                raise
            _log.warning("plangate.channel.html_refused %s", err.message)
            await self._outbox.send_text(
                route.chat_id, escape(_plain(html)), thread_id=route.thread, reply_to=reply_to
            )

    async def ask(self, session_id: str, question: str, options: Sequence[str]) -> None:
        """Post a question; each option is a button that answers it as the owner's message."""
        route = await self.route(session_id)
        if route is None:
            return
        token = secrets.token_hex(4)
        shown = tuple(o for o in options if o.strip())[:MAX_OPTIONS]
        markup = None
        if shown:
            markup = InlineKeyboardMarkup(
                [
                    [InlineKeyboardButton(_label(o), callback_data=f"q:{token}:{i}")]
                    for i, o in enumerate(shown)
                ]
            )
        # Only the first message is shown: render no more than it can hold, off the loop.
        shown_text = question[: 2 * TELEGRAM_TEXT_LIMIT]
        # The mark takes 2 of the message's units; a blank question shows as the mark alone.
        chunks = await asyncio.to_thread(markdown_messages, shown_text, TELEGRAM_TEXT_LIMIT - 2)
        html = "❓ " + (chunks[0] if chunks else "")
        msg = await self._outbox.send_text(
            route.chat_id, html, thread_id=route.thread, reply_markup=markup
        )
        if shown:
            self._questions[token] = Question(session_id, shown, route.chat_id, msg.message_id)
        self._close_question(session_id)  # a newer question is the one open now
        self._open[session_id] = (route.chat_id, msg.message_id, token if shown else None)

    def asked(self, chat_id: int, message_id: int) -> bool:
        """Whether ``message_id`` in ``chat_id`` is a question the agent has open now."""
        return any(q[:2] == (chat_id, message_id) for q in self._open.values())

    def answered(self, chat_id: int, message_id: int) -> None:
        """A reply to the open question ``message_id`` was heard as its answer: it is
        answered once."""
        for session_id, q in list(self._open.items()):
            if q[:2] == (chat_id, message_id):
                self._close_question(session_id)

    def _close_question(self, session_id: str) -> None:
        """The session's open question is answered or moved past: replies and its option
        buttons no longer answer it."""
        closed = self._open.pop(session_id, None)
        if closed is not None and closed[2] is not None:
            self._questions.pop(closed[2], None)

    def answer(self, data: str) -> tuple[Question, str] | None:
        """Resolve an option press (``q:<token>:<i>``) once; None when unknown or used."""
        if not _QUESTION.fullmatch(data):
            return None
        _, token, index = data.split(":")
        question = self._questions.get(token)
        if question is None or int(index) >= len(question.options):
            return None
        del self._questions[token]  # a question is answered once
        self._close_question(question.session_id)
        return question, question.options[int(index)]

    async def typing(self, session_id: str) -> None:
        """Show "typing": at most every 4 s per session, every 20 s in a group."""
        route = await self.route(session_id)
        if route is None:
            return
        now = asyncio.get_running_loop().time()
        every = TYPING_EVERY_GROUP_S if route.chat_id < 0 else TYPING_EVERY_S
        last = self._typing_at.get(session_id)
        if last is not None and now - last < every:
            return
        self._typing_at[session_id] = now
        await self._outbox.typing(route.chat_id, thread_id=route.thread)

    async def turn_started(self, session_id: str) -> None:
        """A turn opened: the plan card shows it is busy (coalesced redraw). The question
        the agent asked before is answered or moved past: it is no longer open."""
        self._close_question(session_id)
        self._presenter.refresh(session_id, "plan")

    async def turn_ended(self, session_id: str, outcome: TurnOutcome) -> None:
        """A turn closed: redraw the cards (a round may have moved the goal)."""
        self._typing_at.pop(session_id, None)
        self._end_draft(session_id)
        self._presenter.refresh(session_id, "plan")
        self._presenter.refresh(session_id, "goal")

    async def plan_changed(self, session_id: str) -> None:
        """Redraw the plan card (coalesced; the draw reads the latest state)."""
        self._presenter.refresh(session_id, "plan")

    async def goal_changed(self, session_id: str) -> None:
        """Redraw the goal card (coalesced)."""
        self._presenter.refresh(session_id, "goal")

    async def approval_asked(self, session_id: str, view: ApprovalView) -> None:
        """Post one approval message: the tool, the whole command and the buttons.

        A waiting call gets Allow once / Allow for this session (when a rule can allow the
        command; the button names what it adds) / Deny. A command too long to show whole is
        attached first as ``command.sh`` and the message says so. A call denied in an
        unattended turn is that turn's one notice, with one Allow button that adds the rule;
        called again for the same request (``view.also`` grew), the notice is edited in place.
        The plan card redraws to show "waiting for you".
        """
        route = await self.route(session_id)
        if route is None:
            return
        known = self._notices.get(view.request_id)
        if known is not None:
            chat_id, message_id, head, markup = known
            html_text = head + _also_html(view.also)
            self._outbox.edit(chat_id, message_id, html_text, reply_markup=markup)
            return
        code = await self._command_html(route, view)
        if view.diff:
            code += await self._diff_html(route, view)
        if view.unattended:
            bold, rest = unattended_parts(view)
            html_text = f"🔐 <b>{escape(bold)}</b>{escape(rest)}\n{code}"
        else:
            html_text = f"🔐 <b>{escape(question(view))}</b>"
            if view.reason:
                html_text += f"\nWhy: {escape_within(view.reason, 300)}"
            html_text += f"\n{code}"
        rows = [
            [
                InlineKeyboardButton(
                    label, callback_data=cb.encode(p.kind, p.action, p.short_id, p.revision)
                )
                for label, p in row
            ]
            for row in approval_buttons(view)
        ]
        if view.rule and view.trusts_project_config:
            html_text += f"\n<i>{TRUSTS_PROJECT_CONFIG}</i>"
        markup = InlineKeyboardMarkup(rows) if rows else None

        async def post() -> None:
            try:
                msg = await self._outbox.send_text(
                    route.chat_id, html_text, thread_id=route.thread, reply_markup=markup
                )
                if view.unattended:
                    if len(self._notices) >= MAX_NOTICES_KEPT:  # only a round's own grow
                        self._notices.pop(next(iter(self._notices)))
                    self._notices[view.request_id] = (
                        route.chat_id,
                        msg.message_id,
                        html_text,
                        markup,
                    )
                else:
                    self._approvals[view.request_id] = (route.chat_id, msg.message_id, html_text)
            finally:
                self._posting.pop(view.request_id, None)

        # The post goes on when the asking call is stopped meanwhile (the outbox sends it
        # anyway): it still records the message, so the close can take its buttons away.
        posting = self._tasks.spawn(post(), name=f"approval_asked:{view.request_id}")
        self._posting[view.request_id] = posting
        await asyncio.shield(posting)
        self._presenter.refresh(session_id, "plan")

    async def _command_html(self, route: ChatRoute, view: ApprovalView) -> str:
        """The whole command in the message; one too long for it goes first as a document."""
        command = view.command or view.tool
        inline = escape(command) if len(command) <= MAX_COMMAND_SHOWN else None
        if inline is not None and utf16_len(inline) <= MAX_COMMAND_SHOWN:
            return f"<pre>{inline}</pre>"
        name = "command.sh"
        await self._outbox.send_document(
            route.chat_id,
            command.encode("utf-8", "replace"),
            name,
            caption_html=escape(f"The whole command {view.tool} would run ({len(command)} chars)"),
            thread_id=route.thread,
        )
        head = escape_within(command, MAX_COMMAND_HEAD)
        return (
            f"<pre>{head}</pre>\nThe command is {len(command):,} characters long: it is attached "
            f"whole above as {name}. Read it there before you allow it."
        )

    async def _diff_html(self, route: ChatRoute, view: ApprovalView) -> str:
        """The diff inline when short; else sent as a ``.patch`` document and named here."""
        diff = view.diff or ""
        # Escaping never shrinks text: a diff longer than the budget skips the escape.
        inline = escape(diff) if len(diff) <= MAX_DIFF_SHOWN else None
        if inline is not None and utf16_len(inline) <= MAX_DIFF_SHOWN:
            return f'\n<pre><code class="language-diff">{inline}</code></pre>'
        name = (view.command.rsplit("/", 1)[-1].split(" ")[-1] or "change") + ".patch"
        await self._outbox.send_document(
            route.chat_id,
            diff.encode("utf-8"),
            name,
            caption_html=escape(f"The change {view.command} would make"),
            thread_id=route.thread,
        )
        return f"\nThe diff ({diff.count(chr(10))} lines) is attached above as {escape(name)}."

    async def approval_closed(
        self, session_id: str, view: ApprovalView, decision: ApprovalDecision
    ) -> None:
        """Say on the approval message how it ended; its buttons go."""
        self._presenter.refresh(session_id, "plan")
        posting = self._posting.get(view.request_id)
        if posting is not None:
            # Closed while its message is still being posted (a /stop, a paced chat): its
            # buttons go once it is there, so no message with live buttons is left behind.
            # The close does not wait for it (a /stop must not wait on a paced chat).
            async def close_when_posted() -> None:
                with contextlib.suppress(Exception):
                    await posting
                self._closed(view, decision)

            self._tasks.spawn(close_when_posted(), name=f"approval_closed:{view.request_id}")
            return
        self._closed(view, decision)

    def _closed(self, view: ApprovalView, decision: ApprovalDecision) -> None:
        found = self._approvals.pop(view.request_id, None)
        if found is None:
            return
        chat_id, message_id, html_text = found
        ended = escape(closed_text(view, decision))
        self._outbox.edit(chat_id, message_id, f"{html_text}\n<i>{ended}</i>", reply_markup=None)

    async def notice(self, session_id: str, text: str) -> None:
        """A short system line, in italics."""
        route = await self.route(session_id)
        if route is None or not text.strip():
            return
        await self._outbox.send_text(
            route.chat_id, clip_html("<i>" + escape(text[:3500]) + "</i>"), thread_id=route.thread
        )


def _also_html(also: Sequence[str]) -> str:
    """The other commands an unattended notice could not run."""
    if not also:
        return ""
    lines = [f"• <code>{escape_within(c, 120)}</code>" for c in also[:MAX_ALSO_LISTED]]
    if len(also) > MAX_ALSO_LISTED:
        lines.append(f"… and {len(also) - MAX_ALSO_LISTED} more")
    return f"\nAlso not run ({len(also)}):\n" + "\n".join(lines)


def _plain(html_text: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", html_text))


def _label(option: str) -> str:
    return clip(option, MAX_OPTION_LABEL, one_line=True)


__all__ = ["QUESTION_PATTERN", "TELEGRAM_LIMITS", "Question", "TelegramChannel"]
