"""The update callbacks of the Telegram application and the state they share.

``bot.telegram.app.build_application`` registers them (the handler map is in its docstring). Each
callback is ``async def verb(update, context) -> None``: parse -> call the engine -> render
the Outcome. None awaits an agent turn; rendering runs in background tasks through the outbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import traceback
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Literal

from telegram import ForceReply, Message, Update
from telegram.error import TelegramError
from telegram.ext import Application, ApplicationHandlerStop, ContextTypes

from bot import presses as cb
from bot.telegram.access import AccessGate
from bot.telegram.channel import TelegramChannel
from bot.telegram.keys import (
    SessionKey,
    chat_key,
    engine_chat,
    maybe_person,
    message_key,
    msg_key,
    person_key,
    update_key,
)
from bot.telegram.outbox import Dropped, Outbox
from bot.telegram.people import SeenPeople
from bot.telegram.presenter import CardPresenter
from bot.telegram.render import clip_html, escape
from bot.telegram.routes import (
    GROUPS_KEY,
    LAST_UPDATE_KEY,
    RECENT_UPDATES_KEY,
    ChatRoute,
    MetaStore,
    Routes,
)
from bot.telegram.updates import UpdateLedger
from bot.telegram.uploads import Incoming, InputSettings, UploadRefused, fetch, incoming_of, refusal
from bot.telegram.voice import (
    EMPTY_TEXT,
    NOT_CONFIGURED_TEXT,
    Transcript,
    Transcripts,
    closed_html,
    transcript_html,
    transcript_keyboard,
)
from engine.api import (
    ROLE_TEXT,
    STALE_TEXT,
    CommandName,
    EngineApi,
    Outcome,
    clean_name,
    inline_text,
    may,
    parse_team_args,
    refusal_text,
    save_upload,
    words_action,
)
from engine.events import Attachment
from engine.model.transcribe import Transcriber
from engine.model.types import ModelError
from engine.roles.types import Person, Role
from engine.tasks import BackgroundTasks
from engine.text import clip

_log = logging.getLogger("plangate.handlers")

MAX_TOAST = 200
NO_CAPTION = "(no caption)"
SHOW_PLAN_PATTERN = re.compile(r"^/show[-_]plan(?:@([A-Za-z0-9_]{3,32}))?(?:\s|$)", re.IGNORECASE)


@dataclass
class BotParts:
    """What ``build_application`` wires together (kept in ``bot_data["plangate"]``)."""

    engine: EngineApi
    meta: MetaStore
    outbox: Outbox
    routes: Routes
    presenter: CardPresenter
    channel: TelegramChannel
    gate: AccessGate
    token: str
    # Rendering, delivery and the update_id write started by handlers (a handler never waits
    # for them; bot.telegram.app.drain does).
    tasks: BackgroundTasks
    last_update_id: int | None = None
    loaded: bool = False
    load_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Which updates are processed; the ChatLaneProcessor (bot.telegram.updates) feeds it.
    ledger: UpdateLedger = field(default_factory=UpdateLedger)
    # Who wrote in each group, for /team add @name (bot.telegram.people).
    people: SeenPeople = field(default_factory=SeenPeople)
    # Limits of files, photos and voice from the chat (docs/inputs.md).
    inputs: InputSettings = field(default_factory=InputSettings)
    # Speech to text for voice notes (None: not set up), and the transcripts on offer.
    transcriber: Transcriber | None = None
    transcripts: Transcripts = field(default_factory=Transcripts)
    # The model's name, for /start's welcome.
    model_name: str = ""
    # One replica of several (bot.telegram.ingress): the shared inbox drops repeats, not the
    # ledger.
    inbox: bool = False


def parts(application: Application[Any, Any, Any, Any, Any, Any]) -> BotParts:
    """The wired parts of an application made by :func:`build_application`."""
    found = application.bot_data["plangate"]
    assert isinstance(found, BotParts)
    return found


async def load_state(bp: BotParts) -> None:
    """Load the update ledger (watermark, recent ids) and the owner-added groups (once).

    Concurrent callers (``prepare`` and the first update) wait for the one load: an update
    judged before the load finished could be a repeat let through.
    """
    async with bp.load_lock:
        if bp.loaded:
            return
        last = await bp.meta.get_meta(LAST_UPDATE_KEY)
        stored = int(last) if last and last.isdigit() else None
        if stored is not None:
            bp.ledger.restore(stored)
            bp.last_update_id = bp.ledger.watermark
        recent = await bp.meta.get_meta(RECENT_UPDATES_KEY)
        if recent:
            try:
                data = json.loads(recent)
                ids = {
                    int(i): None if d is None else float(d) for i, d in dict(data["ids"]).items()
                }
                date = float(data["date"]) if data.get("date") is not None else None
            except (ValueError, TypeError, KeyError) as exc:
                # Unreadable: the watermark alone still drops every older id.
                _log.warning("plangate.handlers.recent_updates_unreadable %s", exc)
            else:
                bp.ledger.restore_recent(ids, date)
        bp.gate.added_groups.update(await stored_groups(bp.meta))
        bp.loaded = True


async def stored_groups(meta: MetaStore) -> set[int]:
    """The groups owners added the bot to, as stored (an unreadable value reads as none)."""
    groups = await meta.get_meta(GROUPS_KEY)
    if groups:
        with contextlib.suppress(ValueError, TypeError):
            return {int(g) for g in json.loads(groups)}
    return set()


# How long the stored update_id may lag the processed one (one commit per window at most).
UPDATE_ID_FLUSH_S = 0.25


class Handlers:
    """The update callbacks; each is ``async def verb(update, context) -> None``."""

    def __init__(self, bp: BotParts) -> None:
        self.bp = bp
        self._writing_update_id = False
        bp.ledger.on_advance = self._update_id_advanced

    # ---- plumbing ----------------------------------------------------------------------

    async def _session(self, key: SessionKey) -> str:
        session_id = await self.bp.engine.session_for_chat(engine_chat(key))
        await self.bp.routes.remember(session_id, ChatRoute(key[0], key[1]))
        return session_id

    def _role(self, update: Update) -> Role:
        """The sender's role as the gate decided it (a member when the gate did not)."""
        d = self.bp.gate.decision(update)
        if d is not None:
            return d.role
        return "owner" if self.bp.gate.is_owner(self._actor(update)) else "member"

    @staticmethod
    def _actor(update: Update) -> int | None:
        """The sender's user id; ``None`` for a message sent as a chat (anonymous admin)."""
        user = update.effective_user
        msg = update.effective_message
        if user is None or (isinstance(msg, Message) and msg.sender_chat is not None):
            return None
        return user.id

    @staticmethod
    def _actor_name(update: Update) -> str:
        user = update.effective_user
        return user.full_name if user is not None else ""

    async def _decide(self, session_id: str, call: Awaitable[Outcome]) -> Outcome:
        """Await the engine's decision with the session's card refreshes held.

        The caller must hand the outcome to :meth:`_render` (or release) exactly once: that
        releases the hold after the reply is queued, so a card never overtakes the reply.
        """
        self.bp.presenter.hold(session_id)
        try:
            return await call
        except BaseException:
            self.bp.presenter.release(session_id)
            raise

    def _render(
        self,
        session_id: str,
        key: SessionKey,
        outcome: Outcome,
        *,
        reply_to: int | None,
        actor: int | None,
        actor_name: str | None = None,
        with_reply: bool = True,
    ) -> None:
        """Deliver an outcome: the reply (in order, before the cards), then the cards."""
        if outcome.await_feedback and actor is not None:
            self.bp.gate.expect_reply(key, actor)
        text = _reply_text(outcome) if with_reply else None
        if text is None:
            # No words: the card itself is the answer (to the command, when there is one).
            self._cards(session_id, outcome, reply_to=reply_to)
            self.bp.presenter.release(session_id)
            return

        html = text
        markup = None
        if outcome.await_feedback:
            # selective: only the owner's client opens the reply box. Telegram targets the
            # sender of the message replied to, or the users mentioned: a press has no
            # message of the owner's, so the owner is mentioned by name.
            markup = ForceReply(selective=True)
            if reply_to is None and actor is not None and key[0] < 0:
                html = f'<a href="tg://user?id={actor}">{escape(actor_name or "owner")}</a>, {text}'

        # A non-owner's answer in a group is expendable: it goes last and is dropped first, so
        # it never stands between an owner and the answer the owner waits for.
        priority: Literal["interactive", "low"] = (
            "low" if actor is None and key[0] < 0 else "interactive"
        )

        async def deliver() -> None:
            try:
                await self.bp.outbox.send_text(
                    key[0],
                    html,
                    thread_id=key[1] or None,
                    reply_to=reply_to,
                    reply_markup=markup,
                    priority=priority,
                )
            except Dropped:
                _log.debug("plangate.handlers.answer_dropped chat=%s", key[0])
            finally:
                self._cards(session_id, outcome)
                self.bp.presenter.release(session_id)

        self.bp.tasks.spawn(deliver(), name=f"reply:{session_id}")

    def _cards(self, session_id: str, outcome: Outcome, *, reply_to: int | None = None) -> None:
        p = self.bp.presenter
        if outcome.plan_card == "restick":
            p.restick(session_id, "plan", reply_to=reply_to)
        elif outcome.plan_card == "refresh":
            p.refresh(session_id, "plan", interactive=True)
        if outcome.goal_card == "restick":
            p.restick(session_id, "goal")
        elif outcome.goal_card == "refresh":
            p.refresh(session_id, "goal", interactive=True)

    # ---- group -2 ----------------------------------------------------------------------

    async def dedupe(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """Drop an update processed before (a repeat after a restart).

        An update let through is taken (processed, at most once): the ledger's watermark,
        which is stored, never passes an update still waiting for its lane (bot.telegram.updates).
        """
        bp = self.bp
        await load_state(bp)
        if bp.inbox:
            return
        if not bp.ledger.take(update):
            _log.info("plangate.handlers.repeat_dropped update=%s", update.update_id)
            raise ApplicationHandlerStop

    def _update_id_advanced(self, watermark: int) -> None:
        """The ledger's watermark moved: store it (every update up to it was taken)."""
        self.bp.last_update_id = watermark
        # Persisted in the background, coalesced: an fsync'd commit per update would double
        # a command's latency. A crash can then repeat at most the updates of the last
        # moment, which Telegram would re-deliver anyway (their offset is not yet confirmed).
        if not self._writing_update_id:
            self._writing_update_id = True
            self.bp.tasks.spawn(self._persist_update_id(), name="update_id")

    async def _persist_update_id(self) -> None:
        try:
            written: int | None = None
            while self.bp.last_update_id != written:
                # Gather a burst into one commit; a crash repeats at most this window.
                await asyncio.sleep(UPDATE_ID_FLUSH_S)
                written = self.bp.last_update_id
                ids, date = self.bp.ledger.recent()
                recent = json.dumps({"ids": ids, "date": date})
                # Concurrent writes: the group commit makes them one commit.
                await asyncio.gather(
                    self.bp.meta.set_meta(LAST_UPDATE_KEY, str(written)),
                    self.bp.meta.set_meta(RECENT_UPDATES_KEY, recent),
                )
        finally:
            self._writing_update_id = False

    # ---- commands ----------------------------------------------------------------------

    def command(
        self, name: CommandName
    ) -> Callable[[Update, ContextTypes.DEFAULT_TYPE], Coroutine[Any, Any, None]]:
        """A CommandHandler callback for one engine command."""

        async def run(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
            await self._run_command(update, name)

        run.__doc__ = f"/{name}: run it in the command plane and render the outcome."
        return run

    async def _run_command(self, update: Update, name: CommandName) -> None:
        msg = update.effective_message
        if msg is None:
            return
        key = message_key(msg)
        session_id = await self._session(key)
        self.bp.presenter.saw_message(key[0], msg.message_id)
        args = _command_args(msg.text or "")
        # The engine checks the actor's role itself (engine.roles), with the same rule.
        actor = self._actor(update)
        call = self.bp.engine.command(
            session_id, name, args, actor=maybe_person(actor), actor_name=self._actor_name(update)
        )
        outcome = await self._decide(session_id, call)
        self._render(session_id, key, outcome, reply_to=msg.message_id, actor=actor)

    async def show_plan(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """/show-plan, /show_plan, /show-plan@bot: restick the card (a copy for members)."""
        msg = update.effective_message
        if msg is None or msg.text is None:
            return
        m = SHOW_PLAN_PATTERN.match(msg.text)
        target = m.group(1) if m else None
        if target and target.lower() != (context.bot.username or "").lower():
            return  # addressed to another bot
        if may(self._role(update), "approve"):
            # Whoever may press the card's buttons gets the card itself: it moves to the bottom.
            await self._run_command(update, "show_plan")
            return
        key = message_key(msg)
        session_id = await self._session(key)
        call = self.bp.engine.command(
            session_id, "show_plan", "", actor=maybe_person(self._actor(update))
        )
        outcome = await self._decide(session_id, call)
        if outcome.plan_card is not None:
            # A non-owner's copy: no buttons, and the live card stays where it is.
            self.bp.presenter.show_copy(session_id, ChatRoute(*key), reply_to=msg.message_id)
            self.bp.presenter.release(session_id)
            return
        self._render(session_id, key, outcome, reply_to=msg.message_id, actor=self._actor(update))

    async def new(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """/new: end the key's session (its cards lose their buttons) and bind a fresh one."""
        msg = update.effective_message
        user = update.effective_user
        if msg is None or user is None:
            return
        key = message_key(msg)
        old = await self._session(key)
        outcome = await self.bp.engine.new_session(engine_chat(key), actor=person_key(user.id))
        self.bp.presenter.retire(old)
        self.bp.gate.cancel_expect(key)
        fresh = await self._session(key)
        self._render(fresh, key, outcome, reply_to=msg.message_id, actor=user.id)

    async def start(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """/start: a welcome that says what this chat is bound to (the project, for those who
        may see it; the model), the sender's role and what it allows, and what to try first."""
        msg = update.effective_message
        if msg is None:
            return
        key = message_key(msg)
        actor = self._actor(update)
        role = await self.bp.engine.role_of(chat_key(key[0]), maybe_person(actor))
        lines = [
            "👋 This is plangate: it plans before it changes a project, and works on once "
            "you approve."
        ]
        if may(role, "settings") and actor is not None:
            shown = await self.bp.engine.project(engine_chat(key), "", actor=person_key(actor))
            if shown.reply:
                lines.append(
                    f"This chat works on {shown.reply.splitlines()[0].removeprefix('Project: ')}."
                )
        if self.bp.model_name:
            lines.append(f"Model: {self.bp.model_name}.")
        lines.append(ROLE_TEXT[role])
        if may(role, "control"):
            lines.append("Try: /plan <what you want changed>. /help lists every command.")
        else:
            lines.append("Try: /show_plan or /status. /help lists every command.")
        self._send_reply(key, escape("\n".join(lines)), reply_to=msg.message_id, name="start")

    async def whoami(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """/whoami: the sender's name, Telegram id and role here (what pairing and /team use)."""
        msg = update.effective_message
        user = update.effective_user
        if msg is None or user is None:
            return
        key = message_key(msg)
        actor = self._actor(update)
        role = await self.bp.engine.role_of(chat_key(key[0]), maybe_person(actor))
        who = (
            "You are sending as the chat itself"
            if actor is None
            else (f"You are {user.full_name}, Telegram user id {user.id}")
        )
        text = escape(f"{who}. {ROLE_TEXT[role]}")
        self._send_reply(key, text, reply_to=msg.message_id, name="whoami")

    async def unknown_command(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """A command plangate does not have: one short line pointing to /help (the gate lets it
        through only in chats the bot works in, and in groups only when addressed to it)."""
        msg = update.effective_message
        if msg is None:
            return
        word = (msg.text or msg.caption or "").split(maxsplit=1)[0].split("@", 1)[0]
        text = escape(f"There is no {clip(word, 40, one_line=True)} command. /help lists them.")
        self._send_reply(message_key(msg), text, reply_to=msg.message_id, name="unknown")

    def _send_reply(self, key: SessionKey, text: str, *, reply_to: int, name: str) -> None:
        """Send ``text`` (HTML) as a reply, in the background like every reply: a paced send
        must not hold the chat's lane."""
        send = self.bp.outbox.send_text(key[0], text, thread_id=key[1] or None, reply_to=reply_to)
        self.bp.tasks.spawn(send, name=f"{name}:{key[0]}")

    async def team(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """/team [add <user> approver | remove <user>]: the chat's roles (docs/roles.md)."""
        msg = update.effective_message
        if msg is None:
            return
        key = message_key(msg)
        args = _command_args(msg.text or "")
        outcome = await self.bp.engine.team(
            engine_chat(key),
            args,
            actor=maybe_person(self._actor(update)),
            actor_name=self._actor_name(update),
            target=self._team_target(msg, args),
        )
        reply = _reply_text(outcome)
        if reply is None:
            return
        self._send_reply(key, reply, reply_to=msg.message_id, name="team")

    def _team_target(self, msg: Message, args: str) -> Person | None:
        """Who ``/team add|remove`` means: the user a numeric id names, the message replied
        to, or an ``@username`` seen in the chat. A chat's or a channel's (negative) id names
        no person: ``None``, and the engine says so."""
        spec = parse_team_args(args)
        if isinstance(spec, str) or spec.op == "list":
            return None
        if spec.user_id is not None:
            number = int(spec.user_id)
            return Person(person_key(number)) if number > 0 else None
        if spec.username is not None:
            return self.bp.people.find(msg.chat.id, spec.username)
        reply = msg.reply_to_message
        sender = None
        # In a forum every topic message "replies" to the topic's first message: not a person.
        if reply is not None and not (
            msg.is_topic_message and reply.message_id == msg.message_thread_id
        ):
            sender = reply.from_user
        if spec.user_id is None and sender is not None and not sender.is_bot:
            return Person(person_key(sender.id), sender.full_name)
        return None

    async def project(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """/project [name] (owner only: the gate refuses others): show or switch the project.

        A switch binds a fresh session, so the old session's cards lose their buttons as on
        /new.
        """
        msg = update.effective_message
        user = update.effective_user
        if msg is None or user is None:
            return
        key = message_key(msg)
        old = await self._session(key)
        args = _command_args(msg.text or "")
        outcome = await self.bp.engine.project(engine_chat(key), args, actor=person_key(user.id))
        fresh = await self._session(key)
        if fresh != old:
            self.bp.presenter.retire(old)
            self.bp.gate.cancel_expect(key)
        self._render(fresh, key, outcome, reply_to=msg.message_id, actor=user.id)

    # ---- buttons -----------------------------------------------------------------------

    async def press(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """A plan, goal or tool approval button: decode, engine.press, answer, redraw."""
        query = update.callback_query
        key = update_key(update)
        if query is None:
            return
        data = cb.decode(query.data)
        if data is None or key is None:
            # Malformed: answered, and nothing changes (the pressed card may be the live one).
            await _answer(query, STALE_TEXT, alert=False)
            return
        session_id = await self._session(key)
        pressed = query.message.message_id if isinstance(query.message, Message) else None
        outcome = await self._decide(
            session_id,
            self.bp.engine.press(
                session_id,
                data,
                actor=person_key(query.from_user.id),
                message_id=msg_key(pressed),
                actor_name=query.from_user.full_name,
            ),
        )
        reply = _reply_text(outcome)
        toast = outcome.reply if outcome.reply and len(outcome.reply) <= MAX_TOAST else None
        as_message = reply is not None and (outcome.await_feedback or toast is None)
        # The presser sees words at once, also when the full answer follows as a message (in
        # the group's pacing): its first line, or the whole of a short one.
        said = toast or (clip(outcome.reply, MAX_TOAST, one_line=True) if outcome.reply else None)
        await _answer(query, said, alert=outcome.alert)
        if data.kind == "a" or outcome.stale:
            # An approval message is used once; a stale card's buttons are dead.
            self._strip_pressed(query.message)
        if outcome.stale:
            # If it was the live card, the redraw restores its keyboard.
            self.bp.presenter.refresh(session_id, "plan")
            self.bp.presenter.refresh(session_id, "goal")
        self._render(
            session_id,
            key,
            outcome,
            reply_to=None,
            actor=query.from_user.id,
            actor_name=query.from_user.first_name,
            with_reply=as_message,
        )

    async def option(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """An ask_user option button: the option's text goes to the agent as the owner's."""
        query = update.callback_query
        if query is None or query.data is None:
            return
        found = self.bp.channel.answer(query.data)
        if found is None:
            await self._stale(update, text="This question is out of date.")
            return
        question, text = found
        key = update_key(update)
        if key is None or await self._session(key) != question.session_id:
            # Asked in a session that /new has since ended: it must not come back to life.
            await self._stale(update, text="This question is out of date.")
            return
        await _answer(query, clip(f"➡️ {text}", MAX_TOAST), alert=False)
        self.bp.outbox.edit_keyboard(question.chat_id, question.message_id, None, interactive=True)
        await self.bp.engine.user_message(
            question.session_id,
            text,
            actor=person_key(query.from_user.id),
            message_id=msg_key(question.message_id),
            answer=True,
        )

    async def unknown_press(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """Any other callback data (forged, or from an older bot): out of date, no change."""
        if update.callback_query is not None:
            await _answer(update.callback_query, STALE_TEXT, alert=False)

    async def _stale(self, update: Update, *, text: str = STALE_TEXT) -> None:
        query = update.callback_query
        if query is None:
            return
        await _answer(query, text, alert=False)
        self._strip_pressed(query.message)

    def _strip_pressed(self, message: object) -> None:
        if isinstance(message, Message):
            self.bp.outbox.edit_keyboard(
                message.chat.id, message.message_id, None, interactive=True
            )

    # ---- talking to the agent ------------------------------------------------------------

    async def text(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """A text message the gate let through: an owner's words, or an approver's feedback or
        answer to a question, go to the agent."""
        msg = update.effective_message
        user = update.effective_user
        if msg is None or user is None or not msg.text:
            return
        decision = self.bp.gate.decision(update)
        feedback = bool(decision and decision.feedback)
        # The gate let it through for this role (feedback, an answer to a question, an owner's
        # words); the engine checks the role again.
        if decision is None or not decision.passes:
            return
        key = message_key(msg)
        session_id = await self._session(key)
        self.bp.presenter.saw_message(key[0], msg.message_id)
        text = _strip_mention(msg.text, context.bot.username or "")
        if not text:
            return
        if msg.reply_to_message is not None:
            # A reply to a transcript on offer is the owner's corrected text: it goes instead.
            found = self.bp.transcripts.take_reply(key, msg.reply_to_message.message_id)
            if found is not None:
                self._close_transcript(found, "✏️ Your corrected text was sent instead.")
        answer = bool(decision and decision.answer)
        if answer and msg.reply_to_message is not None:
            # The question is answered once: a second reply to it is someone's own words.
            self.bp.channel.answered(key[0], msg.reply_to_message.message_id)
        await self.bp.engine.user_message(
            session_id,
            text,
            actor=person_key(user.id),
            message_id=msg_key(msg.message_id),
            feedback=feedback,
            answer=answer,
        )

    async def upload(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """A document or photo from an owner: fetched into the session inbox, then the caption
        and the saved path go to the agent (docs/inputs.md). Too big: one reply, nothing kept."""
        msg = update.effective_message
        user = update.effective_user
        decision = self.bp.gate.decision(update)
        # Files are words to the agent: the gate let them through as the sender's role allows
        # (an owner's own, or an approver's feedback or answer); the engine checks again.
        if msg is None or user is None or decision is None or not decision.passes:
            return
        inputs = self.bp.inputs
        incoming = incoming_of(msg, max_image_px=inputs.max_image_px)
        if incoming is None:
            return
        feedback, answer = decision.feedback, decision.answer
        key = message_key(msg)
        session_id = await self._session(key)
        self.bp.presenter.saw_message(key[0], msg.message_id)
        if incoming.kind == "voice":
            if not may(decision.role, words_action()):
                # A transcript goes to the agent with Send: one's own words, the owner's.
                self._say(key, msg.message_id, refusal_text(decision.role))
                return
            self._voice(context.bot, session_id, key, msg.message_id, incoming)
            return
        inbox = self.bp.engine.inbox_dir(session_id)
        if inbox is None:
            self._say(key, msg.message_id, "Files are not taken here (no inbox is set up).")
            return
        limit = inputs.limit_bytes
        refused = refusal(incoming, limit)
        if refused is not None:
            self._say(key, msg.message_id, refused)
            return
        try:
            data = await fetch(context.bot, incoming, limit)
        except UploadRefused as exc:
            self._say(key, msg.message_id, str(exc))
            return
        name = clean_name(incoming.name, default=incoming.default_name)
        try:
            path = await asyncio.to_thread(save_upload, inbox, name, data)
        except OSError as exc:
            _log.warning("plangate.handlers.upload_not_saved %s", exc)
            reason = exc.strerror or type(exc).__name__
            self._say(
                key,
                msg.message_id,
                f"⚠️ I could not save that file ({reason}); nothing reached the agent. "
                "Try sending it again.",
            )
            return
        _log.info(
            "plangate.handlers.upload_saved session=%s bytes=%d kind=%s",
            session_id,
            len(data),
            incoming.kind,
        )
        attachment = Attachment(
            kind="image" if incoming.kind == "image" else "file",
            path=str(path),
            name=path.name,
            size=len(data),
            mime=incoming.mime,
            text=inline_text(data, incoming.mime) if incoming.kind == "file" else None,
        )
        caption = _strip_mention(msg.caption or "", context.bot.username or "")
        await self.bp.engine.user_message(
            session_id,
            caption or NO_CAPTION,
            actor=person_key(user.id),
            message_id=msg_key(msg.message_id),
            feedback=feedback,
            answer=answer,
            attachments=[attachment],
        )

    def _voice(
        self, bot: Any, session_id: str, key: SessionKey, message_id: int, incoming: Incoming
    ) -> None:
        """Transcribe a voice note in the background and offer the text with Send/Discard.

        Nothing reaches the agent until the owner chooses, so the lane need not wait for the
        download and the speech-to-text call."""
        transcriber = self.bp.transcriber
        if transcriber is None:
            self._say(key, message_id, NOT_CONFIGURED_TEXT)
            return
        limit = self.bp.inputs.limit_bytes
        refused = refusal(incoming, limit)
        if refused is not None:
            self._say(key, message_id, refused)
            return

        async def work() -> None:
            try:
                await listen()
            except Exception as exc:
                # In the background nobody else would hear of it: the voice note would vanish.
                _log.exception("plangate.handlers.voice_failed %s", type(exc).__name__)
                self._say(
                    key,
                    message_id,
                    f"🎙 That voice note was lost ({type(exc).__name__}); send it again, "
                    "or type the message.",
                )

        async def listen() -> None:
            try:
                data = await fetch(bot, incoming, limit)
            except UploadRefused as exc:
                self._say(key, message_id, str(exc))
                return
            name = clean_name(incoming.name, default=incoming.default_name)
            try:
                text = await transcriber.transcribe(data, filename=name, mime=incoming.mime)
            except ModelError as exc:
                self._say(key, message_id, f"🎙 I could not transcribe that voice note: {exc}")
                return
            if not text:
                self._say(key, message_id, EMPTY_TEXT)
                return
            token = self.bp.transcripts.add(session_id, key, text, message_id)
            sent = await self.bp.outbox.send_text(
                key[0],
                transcript_html(text),
                thread_id=key[1] or None,
                reply_to=message_id,
                reply_markup=transcript_keyboard(token),
            )
            self.bp.transcripts.posted(token, sent.message_id)

        self.bp.tasks.spawn(work(), name=f"voice:{session_id}")

    async def voice_press(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """Send or Discard on a transcript: the text goes to the agent, or nowhere."""
        query = update.callback_query
        if query is None or query.data is None:
            return
        _, action, token = query.data.split(":")
        found = self.bp.transcripts.take(token)
        key = update_key(update)
        if found is None or key is None or await self._session(key) != found.session_id:
            # Used already, from before a restart, or of a session /new has since ended.
            await self._stale(update, text="This transcript is out of date.")
            return
        sent = action == "send"
        await _answer(query, "Sent to the agent." if sent else "Discarded.", alert=False)
        how = "✅ Sent to the agent." if sent else "🗑 Discarded."
        self._close_transcript(found, how)
        if sent:
            await self.bp.engine.user_message(
                found.session_id,
                found.text,
                actor=person_key(query.from_user.id),
                message_id=msg_key(found.voice_message_id),
            )

    def _close_transcript(self, found: Transcript, how: str) -> None:
        self.bp.outbox.edit(
            found.key[0],
            found.message_id,
            closed_html(found.text, how),
            reply_markup=None,
            interactive=True,
        )

    def _say(self, key: SessionKey, reply_to: int, text: str) -> None:
        """One plain line as a reply, in the background (a paced send must not hold the lane)."""

        async def send() -> None:
            await self.bp.outbox.send_text(
                key[0], escape(text), thread_id=key[1] or None, reply_to=reply_to
            )

        self.bp.tasks.spawn(send(), name=f"say:{key[0]}")

    # ---- errors --------------------------------------------------------------------------

    async def error(self, update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
        """The one application error handler: log the error type, never the token."""
        err = context.error
        if err is None:
            return
        update_id = update.update_id if isinstance(update, Update) else None
        detail = "".join(traceback.format_exception(type(err), err, err.__traceback__))
        _log.error(
            "plangate.handlers.error update=%s type=%s\n%s",
            update_id,
            type(err).__name__,
            redact(detail, self.bp.token),
        )
        # The person who sent a command, a message or a press hears that it failed (never
        # the details): a press as an alert, which costs no group message.
        if not isinstance(update, Update):
            return
        text = f"⚠️ That failed ({escape(type(err).__name__)}); the log has the details."
        if update.callback_query is not None:
            await _answer(update.callback_query, text, alert=True)
            return
        msg = update.effective_message
        if isinstance(msg, Message):
            # In the background, like every reply: a paced send must not hold the chat's lane.

            async def tell() -> None:
                await self.bp.outbox.send_text(
                    msg.chat.id, text, thread_id=message_key(msg)[1] or None,
                    reply_to=msg.message_id,
                )  # fmt: skip

            self.bp.tasks.spawn(tell(), name=f"error_notice:{msg.chat.id}")


def redact(text: str, token: str) -> str:
    """``text`` with the bot token (and its secret half) replaced."""
    if token:
        text = text.replace(token, "<token>")
        secret = token.split(":", 1)[-1]
        if len(secret) >= 8:
            text = text.replace(secret, "<token>")
    return text


async def _answer(query: Any, text: str | None, *, alert: bool) -> None:
    try:
        await query.answer(text, show_alert=alert)
    except TelegramError as err:
        # Too old or already answered: the press itself still counted.
        _log.info("plangate.handlers.answer_failed %s", type(err).__name__)


def _reply_text(outcome: Outcome) -> str | None:
    """The outcome's reply as HTML, with the queued messages it dropped listed under it."""
    parts_: list[str] = []
    if outcome.reply:
        parts_.append(escape(outcome.reply))
    if outcome.dropped:
        listed = "\n".join(f"• {escape(clip(d, 200, one_line=True))}" for d in outcome.dropped)
        parts_.append(f"Dropped {len(outcome.dropped)} queued message(s):\n{listed}")
    text = "\n\n".join(parts_)
    # Cut by visible UTF-16 units with entities kept whole: a cut by characters could split
    # "&amp;" or carry 4,000 emoji (8,000 units) into a message Telegram rejects.
    return clip_html(text, 4000) if text.strip() else None


def _command_args(text: str) -> str:
    """Everything after the command word, newlines kept (``/plan`` carries a request)."""
    parts_ = text.split(maxsplit=1)
    return parts_[1].strip() if len(parts_) > 1 else ""


def _strip_mention(text: str, username: str) -> str:
    if username:
        text = re.sub(rf"(?<![A-Za-z0-9_])@{re.escape(username)}\b", "", text, flags=re.I)
    return text.strip()


# ---- running -------------------------------------------------------------------------------


__all__ = [
    "SHOW_PLAN_PATTERN",
    "STALE_TEXT",
    "BotParts",
    "Handlers",
    "load_state",
    "parts",
    "redact",
]
