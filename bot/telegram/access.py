"""Who may do what, decided before any handler runs (docs/telegram.md).

``decide`` is pure: facts about one update (``UpdateFacts``, extracted by ``facts_of``) plus
the policy and a little state in, an ``AccessDecision`` out. ``AccessGate`` holds that state
(groups an owner added, when each non-owner was last refused, who is expected to answer
after Keep planning) and is the ``TypeHandler`` callback registered in group -1: it acts on
the decision and raises ``ApplicationHandlerStop`` for everything the handlers must not see.

Rules: who may do what is ``engine.roles.policy.may`` (role x action), the one rule the
engine's own checks use too; the gate maps each command and press onto its action and asks
it, with the sender's role in the chat (``roles``: owner, approver or member; docs/roles.md).
Owners' private chats are always allowed, other private chats are ignored. A group is
allowed when listed or when an owner added the bot; from any other group the bot leaves. In
an allowed group the bot hears an owner's commands, messages that mention it, replies to its
messages and the next message of whoever pressed Keep planning or Revise; anyone may use
/show-plan, /show_plan, /status, /help, /start and /team; someone whose role does not allow
what they address the bot with is told what their role allows, at most once per user per chat
per minute. What the bot says to members (the read-only answers) and every refusal draw on
one answer budget per user and per chat (``bot.flood``: past it they are dropped
silently and counted; the outbox sends them last and drops them first); owners and approvers'
allowed commands are never counted. A press the role does not allow gets a short alert saying so.
Anonymous admins and messages sent as a chat count as members.

When an allowed group is upgraded to a supergroup, Telegram posts a service message in each
(``migrate_to_chat_id`` in the old, ``migrate_from_chat_id`` in the new); either one carries
the group's permission to the new id and calls ``on_migrate(old, new)``, so the bot stays.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from telegram import Message, MessageEntity, Update
from telegram.constants import ChatMemberStatus, ChatType, ParseMode
from telegram.error import TelegramError
from telegram.ext import ApplicationHandlerStop, ContextTypes, TypeHandler

from bot import flood
from bot import presses as cb
from bot.telegram.keys import SessionKey, message_key
from engine.api import (
    ALERT_TEXTS,
    KNOWN_COMMANDS,
    command_action,
    may,
    press_action,
    refusal_text,
    words_action,
)
from engine.roles.types import Action, Role

log = logging.getLogger("plangate.access")

REFUSAL_INTERVAL_S = 60.0
# Answers to non-owners per chat per minute, refusals included (bot.flood has the budget).
REFUSALS_PER_CHAT = flood.PER_CHAT
# Why a message got no answer: the answer budget is spent (counted as dropped).
OVER_BUDGET = "answer budget spent"
# What a member who addresses the bot hears (other roles: engine.roles.policy.refusal_text).
REFUSAL_TEXT = refusal_text("member")
# A press the presser's role does not allow: engine.roles.policy.ALERT_TEXTS, by role.
ALERT_TEXT = ALERT_TEXTS["member"]

AccessAction = Literal[
    "allow", "ignore", "refuse", "alert", "leave", "group_added", "group_gone", "migrate"
]
UpdateKind = Literal["message", "callback", "my_chat_member", "other"]

_COMMAND = re.compile(r"/([A-Za-z0-9_][A-Za-z0-9_-]{0,63})(?:@([A-Za-z0-9_]{3,32}))?(?=\s|$)")
_JOINED = {ChatMemberStatus.MEMBER, ChatMemberStatus.ADMINISTRATOR, ChatMemberStatus.OWNER}
_GROUP_TYPES = {ChatType.GROUP, ChatType.SUPERGROUP, ChatType.CHANNEL}


@dataclass(frozen=True, slots=True)
class UpdateFacts:
    """What the access decision needs to know about one update."""

    kind: UpdateKind
    chat_id: int | None = None
    chat_type: str | None = None
    user_id: int | None = None
    thread_key: int = 0
    as_chat: bool = False  # anonymous admin or a message sent on behalf of a chat
    sender_chat_id: int | None = None
    command: str | None = None  # normalised: "/Show-Plan@bot" -> "show_plan"
    command_args: str = ""  # what follows the command word
    reply_to_message_id: int | None = None
    press: tuple[str, str] | None = None  # a callback's (kind, action): ("p", "approve")
    command_for_other_bot: bool = False
    command_for_this_bot: bool = False  # "/cmd@thisbot": addressed to the bot by name
    mentions_bot: bool = False
    reply_to_bot: bool = False
    bot_joined: bool = False  # my_chat_member: the bot is now in the chat
    migrate_from: int | None = None  # a group upgraded to a supergroup: the old id
    migrate_to: int | None = None  # ... and the new one

    @property
    def migration(self) -> tuple[int, int] | None:
        """(old chat id, new chat id) for either migration service message."""
        if self.chat_id is None:
            return None
        if self.migrate_to is not None:
            return (self.chat_id, self.migrate_to)
        if self.migrate_from is not None:
            return (self.migrate_from, self.chat_id)
        return None

    @property
    def is_group(self) -> bool:
        return self.chat_type in _GROUP_TYPES

    @property
    def refusal_key(self) -> tuple[int, int]:
        """Who a refusal is rate-limited for: (chat, user or the chat it speaks as)."""
        who = self.sender_chat_id if self.as_chat and self.sender_chat_id else self.user_id
        return (self.chat_id or 0, who or 0)


@dataclass(frozen=True, slots=True)
class AccessDecision:
    """What to do with an update. ``role``: the sender's role in the chat (``owner`` says
    whether it is ``"owner"``); ``feedback``: it is the awaited answer after Keep planning /
    Revise."""

    action: AccessAction
    reason: str
    owner: bool = False
    feedback: bool = False
    role: Role = "member"
    answer: bool = False  # a reply to one of the agent's questions, heard as the answer

    @property
    def passes(self) -> bool:
        """True when the update goes on to the handlers."""
        return self.action in ("allow", "group_added")


def parse_command(text: str, *, bot_username: str) -> tuple[str | None, bool]:
    """The normalised command at the start of ``text`` and whether it names another bot.

    Telegram cuts a command at ``-``, so ``/show-plan`` is read here from the raw text.
    """
    m = _COMMAND.match(text)
    if m is None:
        return None, False
    name = m.group(1).lower().replace("-", "_")
    target = m.group(2)
    return name, bool(target) and target.lower() != bot_username.lower()


def _mentions(message: Message, bot_username: str) -> bool:
    wanted = "@" + bot_username.lower()
    mentions = [
        *message.parse_entities([MessageEntity.MENTION]).values(),
        # A file's caption carries its own entities (a document "@bot look at this").
        *message.parse_caption_entities([MessageEntity.MENTION]).values(),
    ]
    return any(text.lower() == wanted for text in mentions)


def facts_of(update: Update, *, bot_id: int, bot_username: str) -> UpdateFacts:
    """Extract the facts of one update (pure apart from reading the update)."""
    if update.my_chat_member is not None:
        cm = update.my_chat_member
        return UpdateFacts(
            kind="my_chat_member",
            chat_id=cm.chat.id,
            chat_type=cm.chat.type,
            user_id=cm.from_user.id,
            bot_joined=cm.new_chat_member.status in _JOINED,
        )
    if update.callback_query is not None:
        q = update.callback_query
        msg = q.message
        if not isinstance(msg, Message):
            return UpdateFacts(kind="other", user_id=q.from_user.id)
        return UpdateFacts(
            kind="callback",
            chat_id=msg.chat.id,
            chat_type=msg.chat.type,
            user_id=q.from_user.id,
            thread_key=message_key(msg)[1],
            press=_press_of(q.data),
        )
    msg = update.message
    if msg is None:
        # Edited messages, channel posts, reactions...: nothing the bot acts on.
        chat = update.effective_chat
        return UpdateFacts(kind="other", chat_id=chat.id if chat else None)
    text = msg.text or msg.caption or ""
    command, other_bot = parse_command(text, bot_username=bot_username)
    args = text.split(maxsplit=1)[1] if command is not None and len(text.split()) > 1 else ""
    reply = msg.reply_to_message
    sender_chat = msg.sender_chat
    return UpdateFacts(
        kind="message",
        chat_id=msg.chat.id,
        chat_type=msg.chat.type,
        user_id=msg.from_user.id if msg.from_user else None,
        thread_key=message_key(msg)[1],
        as_chat=sender_chat is not None,
        sender_chat_id=sender_chat.id if sender_chat else None,
        command=command,
        command_args=args,
        command_for_other_bot=other_bot,
        command_for_this_bot=command is not None
        and not other_bot
        and bool(re.match(r"/\S*@", text)),
        mentions_bot=_mentions(msg, bot_username),
        reply_to_bot=bool(reply and reply.from_user and reply.from_user.id == bot_id),
        reply_to_message_id=reply.message_id if reply is not None else None,
        migrate_from=msg.migrate_from_chat_id,
        migrate_to=msg.migrate_to_chat_id,
    )


def _press_of(data: str | None) -> tuple[str, str] | None:
    """A callback's (kind, action) for the role check; ``q`` for an ask_user option."""
    if data is None:
        return None
    if data.startswith("q:"):
        return ("q", "")
    press = cb.decode(data)
    if press is not None:
        return (press.kind, press.action)
    # Other kinds (a voice transcript's Send, forged data): what it names, and the role rule
    # makes an unknown one the owner's.
    kind, _, rest = data.partition(":")
    return (kind, rest.split(":", 1)[0]) if kind else None


def facts_action(facts: UpdateFacts, *, feedback: bool = False, answering: bool = False) -> Action:
    """What the update asks to do, for ``engine.roles.policy.may``. ``answering``: a message
    that replies to one of the agent's questions."""
    if facts.kind == "callback":
        # No data at all: nothing to act on, the owner's (its handler says "out of date").
        return press_action(*facts.press) if facts.press is not None else "control"
    if facts.command is not None:
        return command_action(facts.command, facts.command_args)
    return words_action(feedback=feedback, answer=answering)


def decide(
    facts: UpdateFacts,
    *,
    owner_ids: Collection[int],
    allowed_chat_ids: Collection[int],
    added_groups: Collection[int],
    expecting_reply: bool = False,
    refused_recently: bool = False,
    role: Role | None = None,
    answering: bool = False,
    budget_left: bool = True,
) -> AccessDecision:
    """The access decision for one update. Pure; the caller keeps the state it reads.

    ``role``: the sender's role in the chat (the gate looks it up); without it an owner id is
    the owner and anyone else a member. A message sent as a chat is always a member's.
    ``answering``: the message replies to one of the agent's questions (an approver may answer).
    ``budget_left``: the answer budget (``bot.flood``) has room for this sender: a member's
    read-only answer and any refusal draw on it."""
    if facts.as_chat or facts.user_id is None:
        role = "member"
    elif facts.user_id in owner_ids:
        role = "owner"
    elif role is None:
        role = "member"
    owner = role == "owner"

    def d(
        action: AccessAction, reason: str, *, feedback: bool = False, answer: bool = False
    ) -> AccessDecision:
        return AccessDecision(
            action, reason, owner=owner, feedback=feedback, role=role, answer=answer
        )

    if facts.kind == "other" or facts.chat_id is None:
        return d("ignore", "not a message or a press")
    is_group = facts.chat_type in _GROUP_TYPES
    if facts.kind == "my_chat_member":
        if not is_group:
            return d("ignore", "private chat membership")
        if not facts.bot_joined:
            return d("group_gone", "the bot left or was removed")
        if may(role, "settings"):  # adding the bot to a group is a setting, the owner's
            return d("group_added", "an owner added the bot")
        if facts.chat_id in allowed_chat_ids or facts.chat_id in added_groups:
            return d("ignore", "added to an allowed group by a non-owner")
        return d("leave", "added by a non-owner to a group that is not allowed")
    if not is_group:
        if may(role, "control"):  # a private chat with the bot is all words for the agent
            return d("allow", "owner's private chat", feedback=_feedback(facts, expecting_reply))
        return d("ignore", "private chat of a non-owner")
    migration = facts.migration
    if migration is not None:
        if carries(*migration, allowed_chat_ids=allowed_chat_ids, added_groups=added_groups):
            return d("migrate", "an allowed group became a supergroup")
        return d("ignore", "migration already carried over, or of a group not allowed")
    if facts.chat_id not in allowed_chat_ids and facts.chat_id not in added_groups:
        return d("leave", "group not allowed")
    if facts.kind == "callback":
        if may(role, facts_action(facts)):
            return d("allow", f"{role}'s press")
        return d("alert", f"a press the {role} role does not allow")
    if facts.command_for_other_bot:
        return d("ignore", "command for another bot")
    if facts.command is not None and facts.command not in KNOWN_COMMANDS:
        # One short line pointing to /help, only to someone who spoke to the bot by name (or
        # replied to it): a group's commands for other bots stay unanswered.
        if not (facts.command_for_this_bot or facts.reply_to_bot):
            return d("ignore", "an unknown command not addressed to the bot")
        if not budget_left:
            return d("ignore", OVER_BUDGET)
        return d("allow", "an unknown command, answered with /help")
    addressed = facts.command is not None or facts.mentions_bot or facts.reply_to_bot
    # Awaited feedback counts only from someone whose role may give it.
    feedback = _feedback(facts, expecting_reply) and may(role, words_action(feedback=True))
    if not addressed and not feedback:
        return d("ignore", f"{role}'s chatter, not addressed to the bot")
    action = facts_action(facts, feedback=feedback, answering=answering)
    if may(role, action):
        if action == "read" and role == "member" and not budget_left:
            return d("ignore", OVER_BUDGET)
        return d("allow", f"{role} addresses the bot", feedback=feedback, answer=action == "answer")
    if refused_recently:
        return d("ignore", "already refused this minute")
    if not budget_left:
        return d("ignore", OVER_BUDGET)
    return d("refuse", f"not allowed for the {role} role")


def carries(
    old_chat_id: int,
    new_chat_id: int,
    *,
    allowed_chat_ids: Collection[int],
    added_groups: Collection[int],
) -> bool:
    """The one rule of a group's migration: carried over when the old id is allowed (listed
    or owner-added) and the new one is not yet (so it is carried once). The service message
    (``decide``) and a send that met ``ChatMigrated`` (``AccessGate.carry_over``) both ask."""
    allowed = (allowed_chat_ids, added_groups)
    return any(old_chat_id in ids for ids in allowed) and not any(
        new_chat_id in ids for ids in allowed
    )


def _feedback(facts: UpdateFacts, expecting_reply: bool) -> bool:
    # A command is never the awaited answer; it keeps the expectation for the next message.
    return expecting_reply and facts.command is None


Refuse = Callable[[Update, str], Awaitable[Any]]
# (chat id, user id) -> the user's role in the chat (the engine's RoleService answers).
RoleLookup = Callable[[int, int], Awaitable[Role]]
# Every group message's sender: (chat id, user id, username or None, display name).
SeenHook = Callable[[int, int, str | None, str], None]
# (chat id, message id) -> whether that message is one of the agent's open questions.
QuestionHook = Callable[[int, int], bool]
GroupHook = Callable[[int], Awaitable[None]]
# Persists that the bot is now in an owner-added group (True) or no longer (False).
SaveGroups = Callable[[int, bool], Awaitable[None]]


class ChatMoves(Protocol):
    """Where the gate hears of a group that became a supergroup on a send (the outbox)."""

    def listen(self, *, chat_migrated: Callable[[int, int], Awaitable[None]]) -> None: ...


MigrateHook = Callable[[int, int], Awaitable[None]]


class AccessGate:
    """The stateful side of ``decide`` and the group -1 ``TypeHandler`` callback.

    Register with ``application.add_handler(gate.handler(), group=-1)``. Handlers read
    ``gate.decision(update)`` for ``owner`` and ``feedback``. Persist groups with the hooks.
    """

    def __init__(
        self,
        *,
        owner_ids: Iterable[int],
        allowed_chat_ids: Iterable[int] = (),
        added_groups: Iterable[int] = (),
        clock: Callable[[], float] = time.monotonic,
        refuse: Refuse | None = None,
        on_group_added: GroupHook | None = None,
        on_group_gone: GroupHook | None = None,
        on_migrate: MigrateHook | None = None,
        refusal_text: str | None = None,
        alert_text: str | None = None,
        roles: RoleLookup | None = None,
        on_seen: SeenHook | None = None,
        questions: QuestionHook | None = None,
        save_groups: SaveGroups | None = None,
        outbox: ChatMoves | None = None,
    ) -> None:
        self.owner_ids = frozenset(owner_ids)
        self.allowed_chat_ids = frozenset(allowed_chat_ids)
        self.added_groups: set[int] = set(added_groups)
        self._clock = clock
        self._refuse = refuse
        self._on_group_added = on_group_added
        self._on_group_gone = on_group_gone
        self._on_migrate = on_migrate
        # Fixed texts when given; otherwise each says what the refused person's role allows.
        self._refusal_text = refusal_text
        self._alert_text = alert_text
        self._roles = roles
        self._on_seen = on_seen
        self._questions = questions
        self._refused_at: dict[tuple[int, int], float] = {}
        # What the bot may still say to non-owners this minute (refusals and read-only answers).
        self.answers = flood.AnswerBudget()
        self._moving: dict[int, asyncio.Event] = {}  # supergroup ids being carried over
        self._expecting: dict[SessionKey, int] = {}
        self._decisions: OrderedDict[int, AccessDecision] = OrderedDict()
        self._save_groups = save_groups
        if outbox is not None:
            # A send that finds the group upgraded before its service message came: the same
            # move as the service message's.
            outbox.listen(chat_migrated=self.carry_over)

    # ---- hooks for the command plane ------------------------------------------------

    def expect_reply(self, key: SessionKey, user_id: int) -> None:
        """After Keep planning / Revise: hear this owner's next message in this session."""
        self._expecting[key] = user_id

    def cancel_expect(self, key: SessionKey) -> None:
        """Stop waiting for an answer in this session (e.g. the plan was discarded)."""
        self._expecting.pop(key, None)

    def is_owner(self, user_id: int | None) -> bool:
        return user_id is not None and user_id in self.owner_ids

    async def carry_over(self, old_chat_id: int, new_chat_id: int) -> None:
        """A group became a supergroup: carry its permission (``on_group_added`` persists
        it) and run ``on_migrate`` once; the new chat's updates wait until that is done."""
        moving = self._moving.get(new_chat_id)
        if moving is not None:
            await moving.wait()
            return
        if not self._carry(old_chat_id, new_chat_id):
            return
        log.info("plangate.access.migrate from=%s to=%s", old_chat_id, new_chat_id)
        moving = self._moving[new_chat_id] = asyncio.Event()
        try:
            await self._groups_changed(self._on_group_added, new_chat_id)
            if self._on_migrate is not None:
                await self._on_migrate(old_chat_id, new_chat_id)
        finally:
            moving.set()
            del self._moving[new_chat_id]

    def _carry(self, old_chat_id: int, new_chat_id: int) -> bool:
        if not carries(
            old_chat_id,
            new_chat_id,
            allowed_chat_ids=self.allowed_chat_ids,
            added_groups=self.added_groups,
        ):
            return False
        self.added_groups.add(new_chat_id)
        self.added_groups.discard(old_chat_id)
        return True

    async def _groups_changed(self, hook: GroupHook | None, chat_id: int) -> None:
        """The set of added groups changed at ``chat_id``: tell ``hook``, save the set."""
        if hook is not None:
            await hook(chat_id)
        if self._save_groups is not None:
            await self._save_groups(chat_id, chat_id in self.added_groups)

    def decision(self, update: Update) -> AccessDecision | None:
        """The decision taken for this update (kept for the last 1,024 updates)."""
        return self._decisions.get(update.update_id)

    # ---- deciding ---------------------------------------------------------------------

    async def role_of(self, facts: UpdateFacts) -> Role | None:
        """The sender's role in the chat, from ``roles`` (``None`` without a lookup)."""
        if self._roles is None or facts.chat_id is None or facts.user_id is None:
            return None
        if facts.as_chat or facts.user_id in self.owner_ids:
            return None  # decide() knows these without asking
        found = await self._roles(facts.chat_id, facts.user_id)
        # Owners are the gate's own list: a lookup never makes anyone else one.
        return "member" if found == "owner" else found

    def decide(
        self, update: Update, *, bot_id: int, bot_username: str, role: Role | None = None
    ) -> AccessDecision:
        """Decide for ``update`` and update the gate's state (refusal times, expectations)."""
        facts = facts_of(update, bot_id=bot_id, bot_username=bot_username)
        key = (facts.chat_id or 0, facts.thread_key)
        now = self._clock()
        last = self._refused_at.get(facts.refusal_key)
        chat, who = facts.refusal_key
        d = decide(
            facts,
            owner_ids=self.owner_ids,
            allowed_chat_ids=self.allowed_chat_ids,
            added_groups=self.added_groups,
            expecting_reply=facts.kind == "message" and self._expecting.get(key) == facts.user_id,
            refused_recently=last is not None and now - last < REFUSAL_INTERVAL_S,
            role=role,
            answering=self._answering(facts),
            budget_left=self.answers.allows(chat, who, now),
        )
        if d.action == "refuse":
            self._refused_at[facts.refusal_key] = now
        # A member's read-only answer (approvers are the owner's team: not counted).
        answered = d.action == "allow" and d.role == "member" and facts_action(facts) == "read"
        if d.action == "refuse" or (answered and facts.is_group):
            self.answers.take(chat, who, now)  # what this update will answer
        elif d.reason == OVER_BUDGET:
            self.answers.drop()
            log.debug("plangate.access.dropped chat=%s dropped=%d", chat, self.answers.dropped)
        if d.feedback:
            self._expecting.pop(key, None)
        if d.action == "group_added" and facts.chat_id is not None:
            self.added_groups.add(facts.chat_id)
        if d.action in ("group_gone", "leave") and facts.chat_id is not None:
            self.added_groups.discard(facts.chat_id)
        self._decisions[update.update_id] = d
        while len(self._decisions) > 1024:
            self._decisions.popitem(last=False)
        return d

    def _answering(self, facts: UpdateFacts) -> bool:
        reply = facts.reply_to_message_id
        if self._questions is None or not facts.reply_to_bot or reply is None:
            return False
        return facts.chat_id is not None and self._questions(facts.chat_id, reply)

    def _saw(self, update: Update, facts: UpdateFacts) -> None:
        """Tell ``on_seen`` who wrote in a group (``/team add @name`` finds them by it)."""
        msg = update.message
        user = msg.from_user if msg is not None else None
        if self._on_seen is None or user is None or facts.as_chat or user.is_bot:
            return
        if facts.chat_id is not None and facts.chat_type in _GROUP_TYPES:
            self._on_seen(facts.chat_id, user.id, user.username, user.full_name)

    # ---- the TypeHandler -------------------------------------------------------------

    def handler(self) -> TypeHandler[Any, ContextTypes.DEFAULT_TYPE, None]:
        """The ``TypeHandler`` to add in group -1 (it must run before every other handler)."""
        return TypeHandler(Update, self)

    async def __call__(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """Apply the decision; raise ``ApplicationHandlerStop`` unless the update passes."""
        bot = context.bot
        chat = update.effective_chat
        moving = self._moving.get(chat.id) if chat is not None else None
        if moving is not None:
            await moving.wait()  # judged once the group's move to this id is complete
        facts = facts_of(update, bot_id=bot.id, bot_username=bot.username)
        self._saw(update, facts)
        role = await self.role_of(facts)
        d = self.decide(update, bot_id=bot.id, bot_username=bot.username, role=role)
        log.debug("plangate.access.decision update=%s action=%s", update.update_id, d.action)
        try:
            if d.action == "group_added" and chat:
                await self._groups_changed(self._on_group_added, chat.id)
            elif d.action == "group_gone" and chat:
                await self._groups_changed(self._on_group_gone, chat.id)
            elif d.action == "migrate":
                migration = facts_of(update, bot_id=bot.id, bot_username=bot.username).migration
                if migration is not None:
                    await self.carry_over(*migration)
            elif d.action == "alert" and update.callback_query is not None:
                alert = self._alert_text or ALERT_TEXTS[d.role]
                await update.callback_query.answer(alert, show_alert=True)
            elif d.action == "refuse" and update.message is not None:
                text = self._refusal_text or refusal_text(d.role)
                if self._refuse is not None:
                    await self._refuse(update, text)
                else:
                    await update.message.reply_text(text, parse_mode=ParseMode.HTML)
            elif d.action == "leave" and chat is not None:
                log.info("plangate.access.leave chat=%s", chat.id)
                await bot.leave_chat(chat.id)
                await self._groups_changed(self._on_group_gone, chat.id)
        except TelegramError as err:
            log.warning(
                "plangate.access.action_failed action=%s error=%s", d.action, type(err).__name__
            )
        if not d.passes:
            raise ApplicationHandlerStop
