"""Tool approvals: the owner allows or denies a tool call from the chat.

:class:`ToolApprovals` is the second gate of a call (after the plan gate). When the policy
says ask, the call waits: ``approval/requested`` is logged, the chat gets one message with
Allow once / Allow for this session / Deny, and the first of these ends the wait:

- a press (``answer``): ``once`` runs the call, ``session`` also adds a rule, ``deny`` refuses;
- ``PLANGATE_APPROVAL_TIMEOUT`` without an answer: denied;
- ``/stop`` (the turn is cancelled): denied at once, the turn closes as cancelled.

Every end is one ``approval/decided``; a rule is one ``approval/rule``. Who may be asked is
:func:`engine.events.is_attended`: every turn a person started, and the checklist run they
armed, waits; only a goal round is unattended. There a call is denied as ``unattended`` at
once and the ``on_unattended`` hook runs (it blocks the goal ``needs-approval``); the round
posts one notice, listing every call it could not run, with one Allow button that adds the
first one's rule.

One message per request, never a pile: a request that repeats one denied in the same run (the
same tool, command and escalation; :meth:`ToolApprovals.new_run` starts a run afresh when a
person acts) is denied again without asking. A timeout is remembered for the agent
(:meth:`ToolApprovals.take_timeout`): a checklist run pauses on it.

On load the session's rules replay, and a request a dead process left waiting is closed as
``interrupted`` (denied): a restart never turns a pending request into an allow.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from engine.api import APPROVAL_ONCE
from engine.approval.policy import (
    ApprovalView,
    BashPolicy,
    Escalation,
    Rule,
    RuleFamily,
    bash_command,
    command_words,
    decide,
    escalation,
    may_ask,
    offered_rule,
)
from engine.approval.preview import write_diff, write_target
from engine.events import (
    ApprovalDecided,
    ApprovalDecision,
    ApprovalRequested,
    ApprovalRule,
    MessageSource,
    is_attended,
)
from engine.keys import ChatKey, PersonKey
from engine.ports import EventLog
from engine.roles.policy import may, press_action
from engine.roles.types import Role
from engine.tasks import safe_call
from engine.tools.base import ToolContext
from engine.tools.effects import BUILTIN, Declaration, Effect, effects_of
from engine.tools.runtime import ToolCallRequest

_log = logging.getLogger("plangate.approval.service")

DEFAULT_TIMEOUT_S = 600.0
APPROVAL_EVENT_TYPES = frozenset({"approval/requested", "approval/decided", "approval/rule"})

DENIED_TEXT = "denied: the owner denied this call; it was not run. Do not retry it as it is."
TIMEOUT_TEXT = (
    "denied: nobody answered the approval request within {timeout}; the call was not run."
)
UNATTENDED_TEXT = (
    "denied: this call needs the owner's approval and nobody is there to answer in a goal "
    "round; it was not run. The owner was told; the goal waits for them."
)
REPEAT_TEXT = (
    "denied: the same call was already denied in this run; it was not run and the owner was "
    "not asked again. Do it another way, or end your turn and say what you need."
)
NEVER_TEXT = (
    "denied: this call would leave the sandbox ({why}) and PLANGATE_BASH_APPROVAL=never "
    "allows no escalation; it was not run."
)
_WHY_TEXT: dict[Escalation, str] = {
    "network": "it asks for the network",
    "ask-rule": "it runs a command the owner wants to be asked about",
    "command": "it needs the owner's approval",
    "write": "it writes a file",
}


def describe_timeout(seconds: float) -> str:
    """``600`` -> ``10m``; the way the owner set it."""
    whole = int(seconds)
    if whole != seconds or whole < 60:
        return f"{seconds:g}s"
    for unit, size in (("h", 3600), ("m", 60)):
        if whole % size == 0:
            return f"{whole // size}{unit}"
    return f"{whole}s"


@dataclass(frozen=True, slots=True)
class AnswerResult:
    """What a press did; ``stale`` when it matched no open request (out of date)."""

    text: str
    stale: bool = False
    rule: Rule | None = None


class ApprovalNotifier(Protocol):
    """The chat side of approvals (the agent's Channel has these two methods)."""

    async def approval_asked(self, session_id: str, view: ApprovalView) -> None:
        """Post the request with its buttons (one Allow button when ``view.unattended``)."""
        ...

    async def approval_closed(
        self, session_id: str, view: ApprovalView, decision: ApprovalDecision
    ) -> None:
        """The request ended: take its buttons away and say how it ended."""
        ...


# Runs when an unattended turn's call was denied for want of an approval.
UnattendedHook = Callable[[str, MessageSource, ApprovalView], Awaitable[None]]
# (session id, actor) -> whether the actor may answer the session's requests (engine.roles).
AnswerCheck = Callable[[str, PersonKey | None], Awaitable[bool]]


class Roles(Protocol):
    """The chats' teams as the approvals read them (``engine.roles.RoleService``)."""

    async def role_of(self, chat_id: ChatKey | None, user_id: PersonKey | None) -> Role:
        """The role of ``user_id`` in ``chat_id``."""
        ...


class SessionChats(Protocol):
    """Which chat a session lives in (``engine.bindings.ChatBindings``)."""

    def chat_of(self, session_id: str) -> ChatKey | None:
        """The chat the session is bound to, as this process knows it."""
        ...


@dataclass
class _Pending:
    view: ApprovalView
    answer: asyncio.Future[ApprovalDecision]
    actor: PersonKey | None = None
    # A press is being granted ("Allow for this session" logs its rule first): no other
    # press or the timeout may close the request meanwhile.
    claimed: bool = False


# What makes two requests "the same" within a run.
_RequestKey = tuple[str, str, str]


@dataclass
class _Notice:
    """An unattended turn's one notice: the turn it belongs to and what it lists."""

    turn: object
    view: ApprovalView


@dataclass
class _Session:
    rules: list[Rule] = field(default_factory=list)
    # Whole commands allowed for the session (interpreters and wrappers: never a prefix).
    exact: list[Rule] = field(default_factory=list)
    # Whole commands allowed the network for the session.
    network: list[Rule] = field(default_factory=list)
    # Workspace-relative files the session allowed writes to (when writes ask).
    write_rules: list[str] = field(default_factory=list)
    pending: _Pending | None = None
    # Unattended denials whose Allow button still counts: request id -> view.
    offers: dict[str, ApprovalView] = field(default_factory=dict)
    # Requests denied in this run (a press, the timeout): not asked about again.
    denied: set[_RequestKey] = field(default_factory=set)
    notice: _Notice | None = None
    # A request that timed out and the agent has not yet paused on.
    timed_out: ApprovalView | None = None


def _key(view: ApprovalView) -> _RequestKey:
    return (view.tool, view.command, view.why)


class ToolApprovals:
    """The approval gate, its pending requests and the session rules of this process."""

    def __init__(
        self,
        log: EventLog,
        notifier: ApprovalNotifier,
        *,
        rules: Iterable[Sequence[str]] = (),
        timeout_s: float = DEFAULT_TIMEOUT_S,
        on_unattended: UnattendedHook | None = None,
        ask_writes: bool = False,
        policy: BashPolicy | None = None,
        roles: Roles | None = None,
        chats: SessionChats | None = None,
    ) -> None:
        """``on_unattended`` hears of a call denied in an unattended turn (the goal service
        blocks the round's goal). ``roles`` and ``chats`` tell who may answer a session's
        requests (without them no people are known, as in this service's own tests: anyone
        may)."""
        if timeout_s <= 0:
            raise ValueError("the approval timeout must be positive")
        self._log = log
        self._notifier = notifier
        self._rules: tuple[Rule, ...] = tuple(tuple(r) for r in rules if r)
        self.policy = policy or BashPolicy()
        self.timeout_s = timeout_s
        self.on_unattended = on_unattended
        self.ask_writes = ask_writes
        self._roles = roles
        self._chats = chats
        self._sessions: dict[str, _Session] = {}

    def _session(self, session_id: str) -> _Session:
        return self._sessions.setdefault(session_id, _Session())

    # --- queries ----------------------------------------------------------------------------

    def rules(self, session_id: str) -> tuple[Rule, ...]:
        """The settings' rules, then the ones granted in this session."""
        return self._rules + tuple(self._session(session_id).rules)

    def may_ask(self, effects: Iterable[Effect]) -> bool:
        """Whether a call with ``effects`` (what its tool declares) can ever wait here (else
        the gate need not look)."""
        return may_ask(effects, ask_writes=self.ask_writes)

    def _granted(self, state: _Session, view: ApprovalView) -> bool:
        return bool(view.rule) and not self._is_new(state, view.family, view.rule or (), view.exact)

    def pending(self, session_id: str) -> ApprovalView | None:
        """The request the session waits on ("waiting for you"), if any."""
        found = self._sessions.get(session_id)
        return found.pending.view if found is not None and found.pending is not None else None

    async def may_answer(self, session_id: str, actor: PersonKey | None) -> bool:
        """Who may answer a request: whoever may press a tool approval's buttons (the role
        rule of engine.roles; the front end's gate asks the same rule first)."""
        if self._roles is None:
            return True
        chat = self._chats.chat_of(session_id) if self._chats is not None else None
        role = await self._roles.role_of(chat, actor)
        return may(role, press_action("a", APPROVAL_ONCE))

    def new_run(self, session_id: str) -> None:
        """A person acted (a message, Approve, ``/execute``, Resume): what was denied before
        may be asked about again, and no timeout is left to pause on."""
        state = self._session(session_id)
        state.denied.clear()
        state.timed_out = None

    def take_timeout(self, session_id: str) -> ApprovalView | None:
        """The request that timed out since the last call, once (the agent pauses on it)."""
        state = self._session(session_id)
        found, state.timed_out = state.timed_out, None
        return found

    # --- replay -----------------------------------------------------------------------------

    async def load(self, session_id: str) -> None:
        """Replay the session's rules; close a request a dead process left open as denied."""
        state = self._sessions[session_id] = _Session()
        stored = await self._log.read(session_id, types=APPROVAL_EVENT_TYPES)
        open_requests: dict[str, ApprovalRequested] = {}
        for item in stored:
            event = item.event
            if isinstance(event, ApprovalRule):
                self._remember(state, event.tool, tuple(event.words), event.exact)
            elif isinstance(event, ApprovalRequested):
                if event.unattended:
                    if event.rule:
                        state.offers[event.request_id] = _view(event)
                else:
                    open_requests[event.request_id] = event
            elif isinstance(event, ApprovalDecided):
                open_requests.pop(event.request_id, None)
        # Offers whose rule is already granted are spent.
        state.offers = {k: v for k, v in state.offers.items() if not self._granted(state, v)}
        closures = [
            ApprovalDecided(request_id=r.request_id, call_id=r.call_id, decision="interrupted")
            for r in open_requests.values()
        ]
        if closures:
            await self._log.append(session_id, closures)

    # --- the gate ---------------------------------------------------------------------------

    async def check(
        self,
        request: ToolCallRequest,
        ctx: ToolContext,
        *,
        phase: str,
        declared: Declaration | None = None,
    ) -> str | None:
        """``None`` runs the call; a string denies it (the model reads it as the result).

        ``declared``: what the call's tool declares it does (engine.tools.effects; plangate's
        own tool of that name when not given). May wait for the owner up to the timeout.
        Cancelled (``/stop``), the request is closed as ``stopped`` and the cancellation goes
        on.
        """
        session_id = ctx.session_id
        state = self._session(session_id)
        declared = declared if declared is not None else BUILTIN.get(request.name)
        effects = effects_of(declared, request.arguments)
        target: str | None = None
        if self.ask_writes and "write" in effects:
            written = declared.path_args("write") if declared is not None else ()
            target = await asyncio.to_thread(
                write_target, ctx.workspace, request.arguments, written
            )
        decision = decide(
            request.name,
            request.arguments,
            phase=phase,
            rules=self.rules(session_id),
            policy=self.policy,
            exact_rules=state.exact,
            network_rules=state.network,
            ask_writes=self.ask_writes,
            write_target=target,
            write_rules=state.write_rules,
            effects=effects,
        )
        if decision == "allow":
            return None
        diff: str | None = None
        rule: Rule | None = None
        exact = False
        why: Escalation = "command"
        reason = ""
        if "shell" in effects:
            command = bash_command(request.arguments)
            why = escalation(request.arguments, policy=self.policy) or "command"
            if decision == "deny":
                return NEVER_TEXT.format(why=_WHY_TEXT[why])
            if why == "network":
                words = command_words(command)
                rule, exact = (tuple(words), True) if words else (None, False)
                raw = request.arguments.get("reason")
                reason = raw.strip() if isinstance(raw, str) else ""
            elif why != "ask-rule" or self.policy.mode == "always":
                # An ask-listed command is asked about every time in escalation mode: the
                # owner listed it to be asked.
                offered = offered_rule(command)
                if offered is not None:
                    rule, exact = offered.words, offered.exact
        elif target is not None:
            command, rule, why = f"{request.name} {target}", (target,), "write"
            diff = await asyncio.to_thread(
                write_diff, ctx.workspace, declared, request.arguments, target
            )
        else:
            command = request.name
        view = ApprovalView(
            request_id=uuid.uuid4().hex,
            call_id=request.call_id,
            tool=request.name,
            command=command,
            rule=rule,
            exact=exact,
            unattended=not is_attended(ctx.source),
            diff=diff,
            why=why,
            reason=reason,
        )
        return await self._request(ctx, view)

    async def ask_plan_skip(self, ctx: ToolContext, what: str) -> str | None:
        """``plan skip`` of a task with checks asks the owner first (:meth:`ask`)."""
        return await self.ask(ctx, tool="plan skip", command=what)

    async def ask(self, ctx: ToolContext, *, tool: str, command: str) -> str | None:
        """Ask the owner about an action no rule covers (a skip of a task with checks,
        docs/checks.md): the same request, message and buttons as a tool call, without
        "Allow for this session". An attended turn waits; an unattended one is denied at once.
        ``None`` when allowed, else the denial the model reads."""
        request_id = uuid.uuid4().hex
        view = ApprovalView(
            request_id=request_id,
            call_id=f"{tool}:{request_id[:12]}",
            tool=tool,
            command=command,
            rule=None,
            unattended=not is_attended(ctx.source),
        )
        return await self._request(ctx, view)

    async def _request(self, ctx: ToolContext, view: ApprovalView) -> str | None:
        """One request in its turn: unattended, denied at once (the turn's one notice); a
        repeat of one denied in this run, denied again unasked; else the owner is asked."""
        if view.unattended:
            return await self._unattended(ctx.session_id, view, ctx.source)
        if _key(view) in self._session(ctx.session_id).denied:
            return REPEAT_TEXT
        decided = await self.request(ctx.session_id, view)
        if decided in ("once", "session"):
            return None
        if decided == "timeout":
            return TIMEOUT_TEXT.format(timeout=describe_timeout(self.timeout_s))
        return DENIED_TEXT

    async def request(self, session_id: str, view: ApprovalView) -> ApprovalDecision:
        """Ask the owner about ``view`` and wait for the answer (a press, the timeout, /stop).

        The engine-level request under :meth:`check` and :meth:`ask`, for attended turns (an
        unattended caller denies by itself). A denial or a timeout is remembered for the run;
        a timeout also for :meth:`take_timeout`.
        """
        decided = await self._wait(session_id, view, _requested(view))
        state = self._session(session_id)
        if decided not in ("once", "session", "stopped"):
            state.denied.add(_key(view))
        if decided == "timeout":
            state.timed_out = view
        return decided

    async def _unattended(self, session_id: str, view: ApprovalView, source: MessageSource) -> str:
        """Deny at once; the turn's one notice lists the call (posted once, then edited).

        Logged first (the log is the authority), then the chat: the turn's first denial runs
        the hook (the goal blocks) and posts the notice; a later one adds its command to that
        notice, whose Allow button stays the first call's.
        """
        state = self._session(session_id)
        await self._log.append(
            session_id,
            [
                _requested(view),
                ApprovalDecided(
                    request_id=view.request_id, call_id=view.call_id, decision="unattended"
                ),
            ],
        )
        notice = state.notice
        if notice is not None and notice.turn == source:
            listed = notice.view
            if view.command not in (listed.command, *listed.also):
                notice.view = dataclasses.replace(listed, also=(*listed.also, view.command))
                await safe_call(
                    "approval_asked", self._notifier.approval_asked(session_id, notice.view)
                )
            return UNATTENDED_TEXT
        state.notice = _Notice(turn=source, view=view)
        if view.rule:
            state.offers[view.request_id] = view
        if self.on_unattended is not None:
            await self.on_unattended(session_id, source, view)
        await safe_call("approval_asked", self._notifier.approval_asked(session_id, view))
        return UNATTENDED_TEXT

    async def _wait(
        self, session_id: str, view: ApprovalView, requested: ApprovalRequested
    ) -> ApprovalDecision:
        state = self._session(session_id)
        if state.pending is not None:  # calls asking run one at a time; never two prompts
            await self._finish(session_id, state.pending, "deny")
        pending = _Pending(view, asyncio.get_running_loop().create_future())
        state.pending = pending
        logged = asyncio.ensure_future(self._log.append(session_id, [requested]))
        try:
            # A /stop from here on (while the request is logged or its message posted, too)
            # closes it as stopped: else it would stay "waiting for you" with live buttons.
            await asyncio.shield(logged)
            await safe_call("approval_asked", self._notifier.approval_asked(session_id, view))
            decision = await asyncio.wait_for(asyncio.shield(pending.answer), self.timeout_s)
        except TimeoutError:
            if pending.claimed:  # answered just in time: its grant is being logged
                decision = await asyncio.shield(pending.answer)
            else:
                decision = await self._finish(session_id, pending, "timeout")
        except asyncio.CancelledError:

            async def stopped() -> None:
                with contextlib.suppress(Exception):
                    await logged  # the request is in the log before its end
                await self._finish(session_id, pending, "stopped")

            await asyncio.shield(stopped())
            raise
        except Exception:
            # The request could not be logged (a full disk): nothing may wait on it, and the
            # call fails with the error (it is not run).
            if not pending.answer.done():
                pending.answer.set_result("deny")
            if state.pending is pending:
                state.pending = None
            raise
        return decision

    async def _finish(
        self,
        session_id: str,
        pending: _Pending,
        decision: ApprovalDecision,
        *,
        actor: PersonKey | None = None,
        actor_name: str = "",
    ) -> ApprovalDecision:
        """Close ``pending`` once with ``decision``; the first close wins."""
        state = self._session(session_id)
        if pending.answer.done():
            return pending.answer.result()
        pending.answer.set_result(decision)
        if state.pending is pending:
            state.pending = None
        view = pending.view
        await self._log.append(
            session_id,
            [
                ApprovalDecided(
                    request_id=view.request_id,
                    call_id=view.call_id,
                    decision=decision,
                    actor=actor,
                    actor_name=actor_name,
                )
            ],
        )
        _log.info(
            "plangate.approval.service.decided session=%s tool=%s decision=%s",
            session_id,
            view.tool,
            decision,
        )
        await safe_call(
            "approval_closed", self._notifier.approval_closed(session_id, view, decision)
        )
        return decision

    # --- presses ----------------------------------------------------------------------------

    async def answer(
        self,
        session_id: str,
        action: str,
        short_id: str,
        *,
        actor: PersonKey | None,
        actor_name: str = "",
    ) -> AnswerResult:
        """A press on a request's button; anything that matches no open request is stale.

        Who answered (``actor``, ``actor_name``) is logged with the decision."""
        state = self._session(session_id)
        if not await self.may_answer(session_id, actor):
            return AnswerResult("", stale=True)
        if action == "rule":
            return await self._grant_offer(
                session_id, state, short_id, actor=actor, actor_name=actor_name
            )
        pending = state.pending
        if (
            pending is None
            or pending.view.short_id != short_id
            or pending.answer.done()
            or pending.claimed
        ):
            return AnswerResult("", stale=True)
        view = pending.view
        if action == "once":
            await self._finish(session_id, pending, "once", actor=actor, actor_name=actor_name)
            return AnswerResult("Allowed once.")
        if action == "session" and view.rule:
            # Claimed before the rule's log write, so a second press (a Deny by someone else)
            # or the timeout cannot close the request while the rule is being granted.
            pending.claimed = True
            try:
                await self.add_rule(
                    session_id,
                    view.rule,
                    actor=actor,
                    actor_name=actor_name,
                    family=view.family,
                    exact=view.exact,
                )
            except BaseException:
                pending.claimed = False
                raise
            await self._finish(session_id, pending, "session", actor=actor, actor_name=actor_name)
            return AnswerResult(_allowed_text(view), rule=view.rule)
        if action == "deny":
            await self._finish(session_id, pending, "deny", actor=actor, actor_name=actor_name)
            return AnswerResult("Denied.")
        return AnswerResult("", stale=True)

    async def _grant_offer(
        self,
        session_id: str,
        state: _Session,
        short_id: str,
        *,
        actor: PersonKey | None,
        actor_name: str = "",
    ) -> AnswerResult:
        found = next((v for k, v in state.offers.items() if k[:8] == short_id), None)
        if found is None or not found.rule:
            return AnswerResult("", stale=True)
        state.offers.pop(found.request_id, None)
        await self.add_rule(
            session_id,
            found.rule,
            actor=actor,
            actor_name=actor_name,
            family=found.family,
            exact=found.exact,
        )
        return AnswerResult(_allowed_text(found), rule=found.rule)

    async def add_rule(
        self,
        session_id: str,
        rule: Rule,
        *,
        actor: PersonKey | None,
        family: RuleFamily = "bash",
        actor_name: str = "",
        exact: bool = False,
    ) -> None:
        """Grant ``rule`` for the rest of the session (logged, so it replays).

        ``family`` ``files``: ``rule`` is one workspace-relative path whose writes are allowed;
        ``network``: one exact command that may have the network. ``exact``: a bash rule that
        allows that whole command only, never a longer one.
        """
        state = self._session(session_id)
        if not self._is_new(state, family, rule, exact):
            return
        event = ApprovalRule(
            tool=family, words=list(rule), actor=actor, actor_name=actor_name, exact=exact
        )
        await self._log.append(session_id, [event])  # logged first: what is granted replays
        self._remember(state, family, rule, exact)
        state.offers = {k: v for k, v in state.offers.items() if not self._granted(state, v)}

    @staticmethod
    def _held(state: _Session, family: str, exact: bool) -> list[Rule]:
        if family == "network":
            return state.network
        return state.exact if exact else state.rules

    @classmethod
    def _is_new(cls, state: _Session, family: str, rule: Rule, exact: bool = False) -> bool:
        """Whether ``rule`` would grant something: not empty and not already held."""
        if not rule:
            return False
        if family == "files":
            return rule[0] not in state.write_rules
        return rule not in cls._held(state, family, exact)

    @classmethod
    def _remember(cls, state: _Session, family: str, rule: Rule, exact: bool = False) -> None:
        """Add a rule to this process's state, unless :meth:`_is_new` says it is held."""
        # Checked again here: add_rule's append is awaited, and a replay may repeat a rule.
        if not cls._is_new(state, family, rule, exact):
            return
        if family == "files":
            state.write_rules.append(rule[0])
        else:
            cls._held(state, family, exact).append(rule)


def _requested(view: ApprovalView) -> ApprovalRequested:
    """The ``approval/requested`` event of a request."""
    return ApprovalRequested(
        request_id=view.request_id,
        call_id=view.call_id,
        tool=view.tool,
        command=view.command,
        rule=list(view.rule or ()),
        unattended=view.unattended,
        exact=view.exact,
        network=view.why == "network",
    )


def _view(event: ApprovalRequested) -> ApprovalView:
    return ApprovalView(
        request_id=event.request_id,
        call_id=event.call_id,
        tool=event.tool,
        command=event.command,
        rule=tuple(event.rule) or None,
        unattended=event.unattended,
        exact=event.exact,
        why="network" if event.network else "command",
    )


def _allowed_text(view: ApprovalView) -> str:
    """The press's answer: what the session now allows."""
    if view.family == "network":
        return f"Allowed the network for this session: {view.rule_text}"
    if view.exact:
        return f"Allowed for this session, this exact command: {view.rule_text}"
    return f"Allowed for this session: {view.rule_text}"


__all__ = [
    "APPROVAL_EVENT_TYPES",
    "DEFAULT_TIMEOUT_S",
    "DENIED_TEXT",
    "NEVER_TEXT",
    "REPEAT_TEXT",
    "TIMEOUT_TEXT",
    "UNATTENDED_TEXT",
    "AnswerResult",
    "ApprovalNotifier",
    "ToolApprovals",
    "UnattendedHook",
    "describe_timeout",
]
