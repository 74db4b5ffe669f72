"""A third channel is its own package and one entry of ``bot.runner.FRONT_ENDS``: the
composition `plangate run` uses (the engine's channel queue, the router, the first front end
owning the engine) serves any ``bot.channels.FrontEnd`` without knowing it
(docs/architecture.md, "Adding a third channel")."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from bot.channels import ChannelQueue, FrontEnd, Serving
from bot.compose import Plangate, open_plangate
from bot.runner import FRONT_ENDS, serve_front_ends
from bot.settings import Settings
from engine.api import ApprovalView, EngineApi
from engine.app import EngineConfig
from engine.events import ApprovalDecision, TurnOutcome
from engine.keys import Chat, MessageKey, PersonKey, make_key
from engine.limits import ChannelLimits
from engine.model.script import say
from engine.model.scripted import ScriptedProvider
from engine.ports import Channel

MEMO_LIMITS = ChannelLimits(message_chars=500)
PERSON = make_key("memo", "ada")
CHAT = Chat.private(make_key("memo", "ada"))


class MemoChannel:
    """The third channel's ``Channel``: it writes down what it is told."""

    limits = MEMO_LIMITS

    def __init__(self) -> None:
        self.replies: list[str] = []
        self.heard = asyncio.Event()

    async def reply(self, session_id: str, text: str, *, reply_to: MessageKey | None) -> None:
        self.replies.append(text)
        self.heard.set()

    async def ask(self, session_id: str, question: str, options: Sequence[str]) -> None: ...
    async def typing(self, session_id: str) -> None: ...
    async def turn_started(self, session_id: str) -> None: ...
    async def turn_ended(self, session_id: str, outcome: TurnOutcome) -> None: ...
    async def plan_changed(self, session_id: str) -> None: ...
    async def goal_changed(self, session_id: str) -> None: ...
    async def notice(self, session_id: str, text: str) -> None: ...

    async def send_file(
        self, session_id: str, data: bytes, filename: str, *, caption: str | None
    ) -> None: ...

    async def drafts_wanted(self, session_id: str) -> bool:
        return False

    async def draft(self, session_id: str, text: str, *, more: bool = False) -> None: ...
    async def approval_asked(self, session_id: str, view: ApprovalView) -> None: ...
    async def approval_closed(
        self, session_id: str, view: ApprovalView, decision: ApprovalDecision
    ) -> None: ...


class MemoServing:
    """The third channel built on the engine: its wire is one message from Ada."""

    def __init__(self, engine: EngineApi) -> None:
        self._engine = engine
        self.memo = MemoChannel()

    @property
    def channel(self) -> Channel:
        return self.memo

    async def serve(self, stop: asyncio.Event, *, owns_engine: bool) -> None:
        assert owns_engine  # the only front end served starts and stops the engine
        await self._engine.start()
        try:
            sid = await self._engine.session_for_chat(CHAT)
            await self._engine.user_message(sid, "hello", actor=PERSON, message_id=None)
            await asyncio.wait_for(self.memo.heard.wait(), 30)
        finally:
            await self._engine.shutdown()


class MemoFrontEnd:
    """The third channel's entry (what ``bot/memo/front.py`` would hold)."""

    name = "memo"
    limits = MEMO_LIMITS

    def __init__(self) -> None:
        self.built: MemoServing | None = None

    def wanted(self, settings: Settings) -> bool:
        return True

    def owns(self, chat_id: int) -> bool:
        return False

    def owner_keys(self, settings: Settings) -> frozenset[PersonKey]:
        return frozenset({PERSON})

    def secrets(self, settings: Settings) -> list[str]:
        return []

    def replicated(self, settings: Settings) -> bool:
        return False

    async def ready(self, settings: Settings) -> None:
        return None

    def build(
        self, settings: Settings, opened: Plangate, *, transcriber: object, replicas: object
    ) -> Serving:
        self.built = MemoServing(opened.engine)
        return self.built

    async def doctor(self, settings: Settings) -> list[tuple[bool, str]]:
        return [(True, "memo: ok")]


def test_the_entries_are_front_ends() -> None:
    entries: Sequence[FrontEnd] = (*FRONT_ENDS, MemoFrontEnd())
    assert [entry.name for entry in entries] == ["telegram", "slack", "memo"]


async def test_the_composition_serves_a_third_channel_it_does_not_know(tmp_path: Path) -> None:
    entry = MemoFrontEnd()
    settings = Settings(workspace=tmp_path)
    queue = ChannelQueue(entry.limits)
    workspace = tmp_path / "work"
    workspace.mkdir()
    async with open_plangate(
        tmp_path / "home",
        model=ScriptedProvider([say("Hi from the third channel.")]),
        channel=queue,
        config=EngineConfig(workspace=workspace, owner_ids=entry.owner_keys(settings)),
    ) as opened:
        serving = entry.build(settings, opened, transcriber=None, replicas=None)
        await asyncio.wait_for(
            serve_front_ends([(entry, serving)], opened, queue, asyncio.Event()), 60
        )
    assert entry.built is not None
    # The words the engine had for the chat reached the third channel (a private chat's
    # reply carries the usage footer).
    [reply] = entry.built.memo.replies
    assert reply.startswith("Hi from the third channel.")
