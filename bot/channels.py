"""What every front end shares at composition: the engine's channel as a queue, the routing of
one engine's words to several front ends, and what a front end declares to be served
(docs/architecture.md, "The front end's side" and "Adding a third channel").

The engine and a front end need each other: the engine tells the chat things through a
``Channel``, and a front end's channel draws its cards from the engine's API. So the
composition builds, in this order and with constructor arguments only:

1. a :class:`ChannelQueue` (it needs nothing): the engine's ``Channel``;
2. the engine on it (``bot.compose.open_plangate``);
3. each front end, given the engine;
4. then it runs ``queue.deliver(channel)`` beside the front ends: each call the engine made
   waits in the queue until then and is handed to the front end's channel in the order made;
   the engine awaits its result as if it had called that channel itself.

A chat belongs to exactly one front end (its route says which: :class:`ChatRouter`), so with
several, the queue delivers to a router that picks the session's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection, Coroutine, Sequence
from dataclasses import dataclass
from operator import methodcaller
from typing import TYPE_CHECKING, Any, Protocol

from bot.routes import ChatRoute, MetaStore, route_key
from engine.events import ApprovalDecision, TurnOutcome
from engine.keys import MessageKey, PersonKey
from engine.limits import ChannelLimits
from engine.ports import Channel
from engine.tasks import BackgroundTasks

if TYPE_CHECKING:
    from bot.compose import Plangate
    from bot.settings import Settings
    from bot.telegram.ingress import Replicas
    from engine.api import ApprovalView
    from engine.model.transcribe import Transcriber

_log = logging.getLogger("plangate.channels")


@dataclass(slots=True)
class _Call:
    """One call the engine made: the method (applied to the front end's channel) and the
    future its caller awaits."""

    name: str
    apply: Callable[[Channel], Awaitable[Any]]
    done: asyncio.Future[Any]


class ChannelQueue:
    """The engine's ``Channel`` while its front ends are built after it: every call waits in
    a queue until :meth:`deliver` hands it to the front end's channel.

    The caller awaits the real call's result (``drafts_wanted``'s answer, ``send_file``'s
    error); calls run concurrently, each started in the order made, so one chat waiting out
    a rate limit never holds another. A caller cancelled meanwhile cancels its call. Once
    delivery has ended (shutdown), calls are dropped as a chat that is gone would drop them:
    notifications return, ``drafts_wanted`` is False, ``send_file`` raises.
    """

    def __init__(self, limits: ChannelLimits) -> None:
        # Known before any front end is built: each declares its limits (FrontEnd.limits).
        self._limits = limits
        self._queue: asyncio.Queue[_Call] = asyncio.Queue()
        self._closed = False

    @property
    def limits(self) -> ChannelLimits:
        return self._limits

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if self._closed:
            if name == "send_file":
                raise RuntimeError("the chat is not connected")
            _log.info("plangate.channels.closed %s", name)
            return False if name == "drafts_wanted" else None
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(_Call(name, methodcaller(name, *args, **kwargs), done))
        return await done

    async def deliver(self, to: Channel) -> None:
        """Hand every call, queued or to come, to ``to`` until cancelled; then refuse the
        calls still waiting (see the class docstring) and stop those running."""
        running = BackgroundTasks(_log)
        try:
            while True:
                call = await self._queue.get()
                if not call.done.done():  # its caller gave up meanwhile
                    running.spawn(self._run(call, to), name=f"channel:{call.name}")
        finally:
            self._closed = True
            while not self._queue.empty():
                call = self._queue.get_nowait()
                if not call.done.done():
                    if call.name == "send_file":
                        call.done.set_exception(RuntimeError("the chat is not connected"))
                    else:
                        call.done.set_result(False if call.name == "drafts_wanted" else None)
            running.cancel()

    @staticmethod
    async def _run(call: _Call, to: Channel) -> None:
        task = asyncio.current_task()
        if task is not None:
            # The engine's caller was cancelled (a /stop): the call it made stops too.
            call.done.add_done_callback(_cancel_with(task))
        try:
            result = await call.apply(to)
        except asyncio.CancelledError:
            call.done.cancel()
            raise
        except Exception as exc:  # the caller hears it, as it would from the channel
            if not call.done.done():
                call.done.set_exception(exc)
        else:
            if not call.done.done():
                call.done.set_result(result)

    async def reply(self, session_id: str, text: str, *, reply_to: MessageKey | None) -> None:
        await self._call("reply", session_id, text, reply_to=reply_to)

    async def ask(self, session_id: str, question: str, options: Sequence[str]) -> None:
        await self._call("ask", session_id, question, options)

    async def typing(self, session_id: str) -> None:
        await self._call("typing", session_id)

    async def turn_started(self, session_id: str) -> None:
        await self._call("turn_started", session_id)

    async def turn_ended(self, session_id: str, outcome: TurnOutcome) -> None:
        await self._call("turn_ended", session_id, outcome)

    async def plan_changed(self, session_id: str) -> None:
        await self._call("plan_changed", session_id)

    async def goal_changed(self, session_id: str) -> None:
        await self._call("goal_changed", session_id)

    async def notice(self, session_id: str, text: str) -> None:
        await self._call("notice", session_id, text)

    async def send_file(
        self, session_id: str, data: bytes, filename: str, *, caption: str | None
    ) -> None:
        await self._call("send_file", session_id, data, filename, caption=caption)

    async def drafts_wanted(self, session_id: str) -> bool:
        return bool(await self._call("drafts_wanted", session_id))

    async def draft(self, session_id: str, text: str, *, more: bool = False) -> None:
        await self._call("draft", session_id, text, more=more)

    async def approval_asked(self, session_id: str, view: ApprovalView) -> None:
        await self._call("approval_asked", session_id, view)

    async def approval_closed(
        self, session_id: str, view: ApprovalView, decision: ApprovalDecision
    ) -> None:
        await self._call("approval_closed", session_id, view, decision)


def _cancel_with(task: asyncio.Task[None]) -> Callable[[asyncio.Future[Any]], None]:
    def cancel(done: asyncio.Future[Any]) -> None:
        if done.cancelled():
            task.cancel()

    return cancel


def smallest_limits(limits: Collection[ChannelLimits]) -> ChannelLimits:
    """What every one of several channels carries: the smallest of each limit (a tool's size
    is chosen before the session's channel is)."""
    return ChannelLimits(
        message_chars=min(one.message_chars for one in limits),
        caption_chars=min(one.caption_chars for one in limits),
        file_bytes=min(one.file_bytes for one in limits),
    )


async def route_of(meta: MetaStore, session_id: str) -> ChatRoute | None:
    """Where the session's chat is (its route in the meta table); None when unknown."""
    stored = await meta.get_meta(route_key(session_id))
    return ChatRoute.decode(stored) if stored else None


class ChatRouter:
    """``Channel`` over several front ends' channels: each call goes to the channel whose
    front end owns the session's chat (``owns(route.chat_id)``), else to the first."""

    def __init__(
        self, meta: MetaStore, channels: Sequence[tuple[Callable[[int], bool], Channel]]
    ) -> None:
        self._meta = meta
        self._channels = tuple(channels)
        self.limits = smallest_limits([channel.limits for _, channel in self._channels])

    async def _pick(self, session_id: str) -> Channel:
        if len(self._channels) > 1:
            route = await route_of(self._meta, session_id)
            if route is not None:
                for owns, channel in self._channels[1:]:
                    if owns(route.chat_id):
                        return channel
        return self._channels[0][1]

    async def reply(self, session_id: str, text: str, *, reply_to: MessageKey | None) -> None:
        await (await self._pick(session_id)).reply(session_id, text, reply_to=reply_to)

    async def ask(self, session_id: str, question: str, options: Sequence[str]) -> None:
        await (await self._pick(session_id)).ask(session_id, question, options)

    async def typing(self, session_id: str) -> None:
        await (await self._pick(session_id)).typing(session_id)

    async def turn_started(self, session_id: str) -> None:
        await (await self._pick(session_id)).turn_started(session_id)

    async def turn_ended(self, session_id: str, outcome: TurnOutcome) -> None:
        await (await self._pick(session_id)).turn_ended(session_id, outcome)

    async def plan_changed(self, session_id: str) -> None:
        await (await self._pick(session_id)).plan_changed(session_id)

    async def goal_changed(self, session_id: str) -> None:
        await (await self._pick(session_id)).goal_changed(session_id)

    async def notice(self, session_id: str, text: str) -> None:
        await (await self._pick(session_id)).notice(session_id, text)

    async def send_file(
        self, session_id: str, data: bytes, filename: str, *, caption: str | None
    ) -> None:
        await (await self._pick(session_id)).send_file(session_id, data, filename, caption=caption)

    async def drafts_wanted(self, session_id: str) -> bool:
        return await (await self._pick(session_id)).drafts_wanted(session_id)

    async def draft(self, session_id: str, text: str, *, more: bool = False) -> None:
        await (await self._pick(session_id)).draft(session_id, text, more=more)

    async def approval_asked(self, session_id: str, view: ApprovalView) -> None:
        await (await self._pick(session_id)).approval_asked(session_id, view)

    async def approval_closed(
        self, session_id: str, view: ApprovalView, decision: ApprovalDecision
    ) -> None:
        await (await self._pick(session_id)).approval_closed(session_id, view, decision)


class Serving(Protocol):
    """A front end built on an opened plangate, not yet serving."""

    @property
    def channel(self) -> Channel:
        """Its ``Channel``: where the engine's words for its chats go."""
        ...

    def serve(self, stop: asyncio.Event, *, owns_engine: bool) -> Coroutine[Any, Any, None]:
        """Serve until ``stop``. ``owns_engine``: start the engine first and shut it down
        last (the first front end served does; the others only serve)."""
        ...


class FrontEnd(Protocol):
    """A channel's front end as the composition sees it: one entry of
    ``bot.runner.FRONT_ENDS``; everything else about it lives in its own package."""

    name: str
    # What one message, caption and file may hold there (known before anything is built).
    limits: ChannelLimits

    def wanted(self, settings: Settings) -> bool:
        """Whether the settings ask for this front end (its token is set)."""
        ...

    def owns(self, chat_id: int) -> bool:
        """Whether a route's chat (bot.telegram.routes) is one of this front end's."""
        ...

    def owner_keys(self, settings: Settings) -> frozenset[PersonKey]:
        """The owners it names, as the engine's person keys."""
        ...

    def secrets(self, settings: Settings) -> list[str]:
        """Its secret settings' values, kept out of the log."""
        ...

    async def ready(self, settings: Settings) -> None:
        """Before plangate is opened: wait until its service answers (ConfigError when it
        refuses the token)."""
        ...

    def replicated(self, settings: Settings) -> bool:
        """Whether it reaches this process over HTTP, where any of several replicas may
        receive a request (docs/webhook.md, "Several replicas")."""
        ...

    def build(
        self,
        settings: Settings,
        opened: Plangate,
        *,
        transcriber: Transcriber | None,
        replicas: Replicas | None,
    ) -> Serving:
        """The front end on the opened plangate (its engine and its stores); ``replicas``:
        the replicas' shared inbox and leases when this process is one of several."""
        ...

    async def doctor(self, settings: Settings) -> list[tuple[bool, str]]:
        """``plangate doctor``'s lines for it (its token checked against the service)."""
        ...


__all__ = ["ChannelQueue", "ChatRouter", "FrontEnd", "Serving", "route_of", "smallest_limits"]
