"""Support for the application tests: a recording EngineApi fake, settings, a running bot.

``RecordingEngine`` is a small in-test implementation of OUR engine facade (not of the library
under test): it keeps one plan sidecar and one goal per session, answers commands and presses
the way ``engine/api.py`` documents, and records every call. The Telegram side is all real:
python-telegram-bot's Application over HTTP to the fake Bot API server.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from telegram.ext import AIORateLimiter, Application

from bot.channels import ChannelQueue
from bot.telegram.app import build_application, drain, parts, prepare
from bot.telegram.keys import engine_chat, msg_id, session_key, user_id_of
from engine.api import (
    CommandName,
    GoalCardData,
    Outcome,
    PlanCardData,
    PlanCardState,
    Press,
    RestoredGoal,
    goal_actions,
    plan_actions,
)
from engine.events import Attachment
from engine.goal.types import GoalSnapshot
from engine.keys import Chat
from engine.plan.types import PlanSidecar, PlanTask
from engine.roles.types import Person, Role
from storage.db import Database
from tests.fakebot.fixtures import running_app
from tests.fakebot.server import FakeBotApi

OWNER = 1001
STRANGER = 2002
GROUP = -100777
STALE = "This card is out of date."


@dataclass
class Settings:
    telegram_token: str
    telegram_api_url: str
    owner_ids: frozenset[int] = frozenset({OWNER})
    allowed_chat_ids: frozenset[int] = frozenset({GROUP})
    flow_edit_interval: float = 0.05
    flow_group_edit_interval: float = 0.05
    pin_cards: str = "auto"
    webhook_url: str | None = None
    webhook_secret: str | None = None
    webhook_listen: str | None = None
    max_upload_mb: float = 20.0
    max_image_px: int = 2048
    reply_document_chars: int = 6000
    model: str = ""


def settings_for(api: FakeBotApi, **kw: Any) -> Settings:
    return Settings(telegram_token=api.token, telegram_api_url=api.base_url, **kw)


@dataclass
class Call:
    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)


class RecordingEngine:
    """An EngineApi that records calls and keeps a toy plan and goal per session."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.keys: dict[tuple[int, int], str] = {}
        self.chats: dict[tuple[int, int], Chat] = {}
        self.plans: dict[str, PlanSidecar] = {}
        self.plan_states: dict[str, PlanCardState] = {}
        self.goals: dict[str, GoalSnapshot] = {}
        self.armed: set[str] = set()
        self.goal_cards: dict[str, tuple[str | None, str | None]] = {}
        self.outcomes: dict[str, Outcome] = {}
        # Card states the owner chose (confirmations), as the engine keeps them.
        self.chosen: dict[str, PlanCardState] = {}
        self.restored: list[RestoredGoal] = []
        self.fail_plan_card = False
        # Extra PlanCardData fields per session (busy, last_progress_at, waiting...).
        self.card_extra: dict[str, dict[str, Any]] = {}
        # Set to the bot's channel to be told of plan changes mid-command, as the engine is.
        self.channel: Any = None
        # (chat id, user id) -> role, for role_of (everyone else is a member).
        self.roles: dict[tuple[int, int], Role] = {}
        # Where uploads go (None: the bot refuses them, as an engine without an inbox).
        self.inbox_root: Path | None = None

    def named(self, name: str) -> list[Call]:
        return [c for c in self.calls if c.name == name]

    # ---- toy state helpers for tests ---------------------------------------------------

    def open_plan(self, session_id: str, *, title: str = "Add login") -> PlanSidecar:
        plan = PlanSidecar(
            id=uuid.uuid4().hex,
            session_id=session_id,
            title=title,
            status="Editing",
            pre_init_editing=True,
            revision=1,
        )
        self.plans[session_id] = plan
        self.plan_states[session_id] = "planning"
        return plan

    def write_plan(self, session_id: str, markdown: str) -> PlanSidecar:
        plan = self.plans[session_id]
        plan = plan.model_copy(
            update={
                "description": markdown,
                "pre_init_editing": False,
                "revision": plan.revision + 1,
            }
        )
        self.plans[session_id] = plan
        self.plan_states[session_id] = "review"
        return plan

    def activate(self, session_id: str, titles: Sequence[str]) -> PlanSidecar:
        plan = self.plans[session_id]
        tasks = [PlanTask(id=str(i + 1), order=i, title=t) for i, t in enumerate(titles)]
        plan = plan.model_copy(
            update={"status": "Active", "tasks": tasks, "revision": plan.revision + 1}
        )
        self.plans[session_id] = plan
        self.plan_states[session_id] = "active"
        return plan

    def complete(self, session_id: str, task_id: str) -> PlanSidecar:
        plan = self.plans[session_id]
        tasks = [
            t.model_copy(update={"status": "completed"}) if t.id == task_id else t
            for t in plan.tasks
        ]
        plan = plan.model_copy(update={"tasks": tasks, "revision": plan.revision + 1})
        self.plans[session_id] = plan
        if all(t.status == "completed" for t in tasks):
            self.plan_states[session_id] = "done"
        return plan

    def set_goal(self, session_id: str, **kw: Any) -> GoalSnapshot:
        base: dict[str, Any] = {
            "id": uuid.uuid4().hex,
            "revision": 1,
            "objective": "keep the tests green",
            "phase": "active",
            "max_goal_rounds": 3,
        }
        goal = GoalSnapshot(**(base | kw))
        self.goals[session_id] = goal
        return goal

    # ---- EngineApi -------------------------------------------------------------------------

    # The fake takes the engine's keys and records them as the Telegram ids they name
    # (bot.telegram.keys), so the tests read in Telegram's terms what the front end asked.

    async def session_for_chat(self, chat: Chat) -> str:
        chat_id, thread_id = _tg_chat(chat)
        self.chats[(chat_id, thread_id)] = chat
        self.calls.append(Call("session_for_chat", (chat_id, thread_id)))
        return self.keys.setdefault((chat_id, thread_id), f"s{len(self.keys) + 1}")

    async def new_session(self, chat: Chat, *, actor: str) -> Outcome:
        chat_id, thread_id = _tg_chat(chat)
        self.calls.append(Call("new_session", (chat_id, thread_id), {"actor": user_id_of(actor)}))
        self.keys[(chat_id, thread_id)] = f"s{len(self.keys) + 100}"
        return Outcome(reply="New session.")

    async def project(self, chat: Chat, args: str, *, actor: str) -> Outcome:
        chat_id, thread_id = _tg_chat(chat)
        self.calls.append(Call("project", (chat_id, thread_id, args), {"actor": user_id_of(actor)}))
        return Outcome(reply=f"Project: {args or 'default'}")

    async def migrate_chat(self, old: str, new: str) -> list[str]:
        old_chat_id, new_chat_id = _tg_key(old)[0], _tg_key(new)[0]
        self.calls.append(Call("migrate_chat", (old_chat_id, new_chat_id)))
        moved = [k for k in self.keys if k[0] == old_chat_id]
        for key in moved:
            self.keys[(new_chat_id, key[1])] = self.keys.pop(key)
        return [self.keys[(new_chat_id, k[1])] for k in moved]

    async def user_message(
        self,
        session_id: str,
        text: str,
        *,
        actor: str | None,
        message_id: str | None,
        feedback: bool = False,
        answer: bool = False,
        attachments: Sequence[Attachment] = (),
    ) -> None:
        self.calls.append(
            Call(
                "user_message",
                (session_id, text),
                {
                    "actor": user_id_of(actor),
                    "message_id": msg_id(message_id),
                    "feedback": feedback,
                    "attachments": list(attachments),
                },
            )
        )

    async def role_of(self, chat: str, user_id: str | None) -> Role:
        return self.roles.get((_tg_key(chat)[0], user_id_of(user_id) or 0), "member")

    async def team(
        self,
        chat: Chat,
        args: str,
        *,
        actor: str | None,
        actor_name: str = "",
        target: Person | None = None,
    ) -> Outcome:
        shown = None if target is None else (user_id_of(target.user_id), target.name)
        self.calls.append(
            Call(
                "team", (_tg_key(chat.room)[0], args), {"actor": user_id_of(actor), "target": shown}
            )
        )
        return Outcome(reply=f"team {args}".strip())

    def inbox_dir(self, session_id: str) -> Path | None:
        return self.inbox_root / session_id if self.inbox_root is not None else None

    async def command(
        self,
        session_id: str,
        name: CommandName,
        args: str,
        *,
        actor: str | None,
        actor_name: str = "",
    ) -> Outcome:
        self.calls.append(Call("command", (session_id, name, args), {"actor": user_id_of(actor)}))
        if name in self.outcomes:
            return self.outcomes[name]
        if name == "plan":
            if session_id not in self.plans:
                self.open_plan(session_id)
                if self.channel is not None:
                    await self.channel.plan_changed(session_id)
                    await asyncio.sleep(0.05)  # long enough for an unheld refresh to draw
                return Outcome(reply="Planning.", plan_card="restick")
            return Outcome(reply="Already planning.", plan_card="restick")
        if name == "show_plan":
            if session_id not in self.plans:
                return Outcome(reply="No plan.")
            return Outcome(plan_card="restick")
        if name == "discard":
            if session_id not in self.plans:
                return Outcome(reply="Nothing to discard.")
            del self.plans[session_id]
            self.plan_states[session_id] = "none"
            return Outcome(reply="Discarded.", plan_card="refresh")
        return Outcome(reply=f"ok {name}")

    async def press(
        self,
        session_id: str,
        press: Press,
        *,
        actor: str | None,
        message_id: str | None = None,
        actor_name: str = "",
    ) -> Outcome:
        kind, action, short_id, revision = press.kind, press.action, press.short_id, press.revision
        self.calls.append(
            Call(
                "press",
                (session_id,),
                {
                    "kind": kind,
                    "action": action,
                    "short_id": short_id,
                    "revision": revision,
                    "actor": user_id_of(actor),
                    "message_id": msg_id(message_id),
                },
            )
        )
        if kind == "g":
            goal = self.goals.get(session_id)
            if goal is None or goal.id[:8] != short_id or goal.revision != revision:
                return Outcome(reply=STALE)
            if action == "resume":
                self.armed.add(session_id)
                return Outcome(reply="Resumed.", goal_card="refresh")
            return Outcome(reply=f"goal {action}", goal_card="refresh")
        plan = self.plans.get(session_id)
        if plan is None or plan.id[:8] != short_id or plan.revision != revision:
            return Outcome(reply=STALE)
        if action == "approve" and self.plan_states.get(session_id) == "review":
            self.activate(session_id, ["Write the model", "Add the view", "Test it"])
            return Outcome(reply="Approved.", plan_card="refresh")
        if action == "keep":
            self.plan_states[session_id] = "written"
            return Outcome(reply="What should change?", plan_card="refresh", await_feedback=True)
        if action == "discard":
            self.chosen[session_id] = "confirm_discard"
            return Outcome(plan_card="refresh")
        if action == "cancel":
            self.chosen.pop(session_id, None)
            return Outcome(plan_card="refresh")
        return Outcome(reply=STALE)

    async def plan_card(self, session_id: str) -> PlanCardData:
        if self.fail_plan_card:
            raise RuntimeError("plan store down")
        plan = self.plans.get(session_id)
        state = self.chosen.get(session_id) or self.plan_states.get(session_id, "none")
        markdown = plan.description if plan is not None and state == "review" else None
        extra = self.card_extra.get(session_id, {})
        # The card's actions come from the engine's table, as the real engine's do.
        actions = plan_actions(state, raise_cap=extra.get("raise_cap"))
        return PlanCardData(
            state=state, sidecar=plan, markdown=markdown or None, actions=actions, **extra
        )

    async def goal_card(self, session_id: str) -> GoalCardData:
        goal = self.goals.get(session_id)
        armed = session_id in self.armed
        chat_id, card_id = self.goal_cards.get(session_id, (None, None))
        return GoalCardData(
            state="live" if goal else "none",
            goal=goal,
            armed=armed,
            actions=goal_actions(goal, armed=armed, confirm_clear=False),
            chat_id=chat_id,
            card_id=card_id,
        )

    async def set_goal_card(
        self, session_id: str, *, chat_id: str | None, card_id: str | None
    ) -> None:
        self.goal_cards[session_id] = (chat_id, card_id)

    async def set_plan_flow(
        self,
        session_id: str,
        *,
        chat_id: str,
        thread_id: str | None,
        card_id: str | None,
        review_ids: Sequence[str] | None = None,
        plan_id: str | None = None,
    ) -> None:
        self.calls.append(
            Call(
                "set_plan_flow",
                (session_id,),
                {
                    "chat_id": _tg_key(chat_id)[0],
                    "thread_id": _tg_key(thread_id)[1] or None if thread_id is not None else None,
                    "card_id": msg_id(card_id),
                    "review_ids": None if review_ids is None else [msg_id(r) for r in review_ids],
                    "plan_id": plan_id,
                },
            )
        )
        plan = self.plans.get(session_id)
        if plan is None or (plan_id is not None and plan.id != plan_id):
            return
        flow = plan.flow.model_copy(
            update={"chat_id": chat_id, "thread_id": thread_id, "card_id": card_id}
            | ({"review_ids": list(review_ids)} if review_ids is not None else {})
        )
        self.plans[session_id] = plan.model_copy(update={"flow": flow})

    async def start(self, *, recover: bool = True) -> list[RestoredGoal]:
        self.calls.append(Call("start", (recover,)))
        return list(self.restored)

    async def shutdown(self) -> None:
        self.calls.append(Call("shutdown", ()))


def _tg_key(key: str) -> tuple[int, int]:
    found = session_key(key)
    assert found is not None, f"not a Telegram chat key: {key!r}"
    return found


def _tg_chat(chat: Chat) -> tuple[int, int]:
    """A chat's Telegram ids, checking the kind and parent the front end gave."""
    found = _tg_key(chat.key)
    assert chat == engine_chat(found), chat
    return found


async def eventually(predicate: Callable[[], bool], *, timeout_s: float = 30.0) -> None:
    """Wait (bounded) until ``predicate()`` holds, polling every 10 ms.

    The bound only stops a hung test; a passing test never waits for it, so it is generous
    for a loaded 2-core machine (a turn with a model call and a sandboxed bash can take
    seconds there).
    """

    async def loop() -> None:
        while not predicate():
            await asyncio.sleep(0.01)

    await asyncio.wait_for(loop(), timeout_s)


@asynccontextmanager
async def open_db(path: Path) -> AsyncIterator[Database]:
    db = await Database.open(path)
    try:
        yield db
    finally:
        await db.close()


@asynccontextmanager
async def running_bot(
    api: FakeBotApi,
    engine: Any,
    db: Database,
    *,
    settings: Settings | None = None,
    notices: ChannelQueue | None = None,
    chat_interval_s: float = 0.0,
    group_per_minute: int = 10_000,
    transcriber: Any = None,
    **outbox_kw: Any,
) -> AsyncIterator[Application[Any, Any, Any, Any, Any, Any]]:
    """The real Application polling the fake, prepared and running.

    The outbox paces as given (the tests' default: no waits); AIORateLimiter is off.
    ``outbox_kw``: ``clock`` and ``sleep`` for the outbox (a ``ManualClock`` skips waits).
    """
    application = build_application(
        settings or settings_for(api),
        engine,
        db_meta=db,
        rate_limiter=AIORateLimiter(overall_max_rate=0, group_max_rate=0),
        chat_interval_s=chat_interval_s,
        group_per_minute=group_per_minute,
        transcriber=transcriber,
        **outbox_kw,
    )
    # ``notices``: the engine's channel (bot.channels), delivered to this bot's while it runs.
    delivering = (
        asyncio.ensure_future(notices.deliver(parts(application).channel))
        if notices is not None
        else None
    )
    try:
        async with running_app(application) as app:
            await prepare(app)
            yield app
            # As serve() does on the way out: deliver what is queued (replies, card draws, the
            # update_id write).
            await asyncio.wait_for(drain(app), 10)
    finally:
        if delivering is not None:
            delivering.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await delivering
