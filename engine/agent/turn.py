"""One turn: ``turn/start`` -> steps -> ``turn/end`` (docs/agent.md).

A step is: the pre-step hook (pending plan switch or approval, goal-round re-validation) ->
context built from the log -> one model call -> ``assistant/message`` and ``tool/call`` events ->
the tool batch (plan gate first) -> ``tool/result`` events -> the post-step hook (the stuck
detector, told what the step did as a :class:`StepDone`). The turn ends when the model
answers without tool calls (``completed``), after ``max_steps`` (``max_steps``), when the
pre-step or post-step hook says so (``completed`` with a detail), on a model error
(``failed``) or when the task is cancelled (``cancelled``; every open call gets a synthetic
interrupted result). A goal round's first check runs before its ``user/message`` is logged;
a round refused there logs nothing.

With a usage meter every model call first reserves its prompt estimate and its ``max_tokens``
against the daily cap and the goal's token budget (a call that would cross a limit is not made:
the turn ends ``completed`` with the refusal as its detail and its line as the reply), sends
that ``max_tokens``, and each reply's ``model/usage`` record is appended with its
``assistant/message`` and replaces the hold. A goal round's admission hold is the hold of its
first call: a round that was counted always makes its call.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.agent.config import AgentDeps
from engine.agent.context import ELIDED_TEXT, assemble_messages
from engine.agent.ports import PlanPromptView
from engine.agent.prompt import PromptInputs, build_system_prompt
from engine.events import (
    AssistantMessage,
    Attachment,
    GoalRoundSource,
    MessageSource,
    SessionEvent,
    ToolCall,
    ToolResult,
    TurnEnd,
    TurnOutcome,
    TurnStart,
    UserMessage,
)
from engine.inbox import session_inbox
from engine.keys import MessageKey
from engine.model.types import (
    ModelError,
    ModelReply,
    ModelToolCall,
    StreamingProvider,
    StreamProgress,
)
from engine.tasks import safe_call
from engine.tools.base import ToolContext, ToolOutcome
from engine.tools.runtime import ToolCallRequest, ToolRuntime
from engine.usage.ledger import BudgetRefusal, request_chars
from engine.usage.meter import Reservation

_log = logging.getLogger("plangate.agent.turn")

CANCELLED_TOOL_TEXT = "cancelled: the user stopped the turn before this tool finished"

# Returns None to go on, or a short reason to end the turn before this step.
PreStep = Callable[[int], Awaitable[str | None]]


@dataclass(frozen=True, slots=True)
class StepDone:
    """What one step did, for the stuck detector: the calls with their results (none for a
    plain reply), whether the context had to elide this turn's own results, its tokens."""

    calls: tuple[tuple[ToolCall, ToolResult], ...]
    text: str
    compacted: bool
    tokens: int


# Told after each step; returns None to go on, or a short reason to end the turn now.
PostStep = Callable[[StepDone], Awaitable[str | None]]


@dataclass(frozen=True, slots=True)
class InboundMessage:
    """A queued message: its text, its source and the chat message to reply to."""

    text: str
    source: MessageSource
    message_id: MessageKey | None = None
    # Files the owner sent with it, already saved in the session inbox (engine.inbox).
    attachments: tuple[Attachment, ...] = ()


@dataclass(frozen=True, slots=True)
class TurnResult:
    turn_id: str
    outcome: TurnOutcome
    final_text: str = ""
    detail: str = ""
    # ask_user was answered "sent" in this turn: a question now waits for the owner.
    asked: bool = False
    # With ``quiet``: the closing words the turn did not post (the caller decides).
    held: str = ""
    # A usage limit refused the turn's next model call (the daily cap, a goal's budget).
    refusal: BudgetRefusal | None = None


def _invalid_arguments(call: ModelToolCall) -> ToolOutcome | None:
    if call.refused:  # too large or nested too deep (engine.model.arguments): never run
        return ToolOutcome(content=f"error: {call.refused}", is_error=True)
    if call.raw_arguments and not call.arguments:
        shown = call.raw_arguments[:200]
        return ToolOutcome(
            content=f"error: the arguments of {call.name} were not a valid JSON object: {shown}",
            is_error=True,
        )
    return None


async def run_turn(
    deps: AgentDeps,
    runtime: ToolRuntime,
    session_id: str,
    message: InboundMessage,
    *,
    pre_step: PreStep,
    post_step: PostStep | None = None,
    quiet: bool = False,
    runs_on: bool = False,
) -> TurnResult:
    """Run one whole turn for ``message`` and return how it ended.

    The caller must not hold any lock: model calls and tools run here for minutes. On
    cancellation the turn is closed (``turn/end {cancelled}``) before ``CancelledError``
    propagates. ``quiet``: keep the closing words in ``TurnResult.held`` instead of posting
    them; ``runs_on``: a checklist run continues after this turn (no "send a message").
    """
    log = deps.log
    turn_id = uuid.uuid4().hex
    workspace = await deps.workspace_for(session_id)
    # A goal round's user/message IS its admission (it counts toward the cap), so the round is
    # validated before anything is logged: a round refused here opens no turn at all.
    validated = False
    # The hold of the call about to be made (for a goal round: taken at its admission).
    held: Reservation | None = None
    if isinstance(message.source, GoalRoundSource):
        refused = await pre_step(0)
        if refused is not None:
            return TurnResult(turn_id, "completed", "", refused)
        if deps.usage is not None:
            # A round that could not make even its first call is not admitted (not counted);
            # one that is keeps its hold until that call, so no other chat can take its room.
            got = await deps.usage.reserve(
                session_id, message.source, chars=None, extra_chars=len(message.text)
            )
            if isinstance(got, BudgetRefusal):
                await safe_call("notice", deps.channel.notice(session_id, got.line))
                return TurnResult(turn_id, "completed", "", f"{got.kind}: refused")
            held = got
        validated = True
    try:
        await log.append(
            session_id,
            [
                TurnStart(turn_id=turn_id),
                UserMessage(
                    text=message.text, source=message.source, attachments=message.attachments
                ),
            ],
        )
    except BaseException:
        if held is not None and deps.usage is not None:
            deps.usage.release(held)
        raise
    await safe_call("turn_started", deps.channel.turn_started(session_id))
    open_calls: dict[str, ToolCall] = {}
    ctx = ToolContext(
        session_id=session_id,
        workspace=workspace,
        turn_id=turn_id,
        source=message.source,
        read_roots=_read_roots(deps, session_id),
    )
    final_text = ""
    # The last thing the model said in this turn: a turn ended by its pre-step (a goal round
    # that just completed its goal) reports that instead of nothing.
    last_said = ""
    outcome: TurnOutcome = "max_steps"
    detail = ""
    asked = False
    budget_stop: BudgetRefusal | None = None
    # The streamed call under way, with what it sent (its request characters and estimate):
    # a stream cut short is still recorded (docs/goals.md).
    progress: StreamProgress | None = None
    chars = estimate = 0
    try:
        for step in range(deps.settings.max_steps):
            # Step 0 of a goal round was checked just before its admission above.
            stop_reason = None if step == 0 and validated else await pre_step(step)
            if stop_reason is not None:
                outcome, detail = "completed", stop_reason
                break
            if step:
                # An approval committed at this step boundary moves the session into its
                # plan's worktree: the next step's tools work there (docs/projects.md).
                moved = await deps.workspace_for(session_id)
                if moved != workspace:
                    workspace = moved
                    # Only the workspace moves: the inbox stays a read-only root.
                    ctx = dataclasses.replace(ctx, workspace=workspace)
            await safe_call("typing", deps.channel.typing(session_id))
            messages = await _context(deps, session_id, workspace_text=str(workspace))
            compacted = any(m.get("content") == ELIDED_TEXT for m in messages)
            specs = runtime.specs()
            chars = estimate = 0
            max_tokens: int | None = None
            if deps.usage is not None:
                chars = request_chars(messages, specs)
                got = await deps.usage.reserve(
                    session_id, message.source, chars=chars, replacing=held
                )
                if isinstance(got, BudgetRefusal):
                    budget_stop = got
                    outcome, detail = "completed", f"{budget_stop.kind}: call not made"
                    break
                held = got
                estimate, max_tokens = held.prompt_estimate, held.max_tokens
            progress = StreamProgress()
            reply = await _call_model(
                deps, session_id, messages, specs, max_tokens=max_tokens, progress=progress
            )
            progress = None  # the reply is in: its own record follows
            final_text = reply.text
            if reply.text.strip():
                last_said = reply.text
            events: list[SessionEvent] = [AssistantMessage(text=reply.text)]
            calls = [
                ToolCall(call_id=c.id, name=c.name, arguments=dict(c.arguments))
                for c in reply.tool_calls
            ]
            events.extend(calls)
            tokens = _reply_tokens(reply)
            if deps.usage is not None:
                record = deps.usage.record_for(
                    turn_id=turn_id,
                    source=message.source,
                    reply=reply,
                    chars=chars,
                    estimate=estimate,
                    server=_server_of(deps.model),
                )
                tokens = record.prompt_tokens + record.completion_tokens
                events.append(record)
            stored = await log.append(session_id, events)
            if deps.usage is not None:
                await deps.usage.recorded(stored, held)
            held = None
            if not calls:
                outcome = "completed"
                if post_step is not None:
                    await post_step(StepDone((), reply.text, compacted, tokens))
                break
            open_calls = {c.call_id: c for c in calls}
            outcomes = await _run_batch(runtime, reply.tool_calls, ctx)
            results = [
                ToolResult(call_id=c.id, name=c.name, content=o.content, is_error=o.is_error)
                for c, o in zip(reply.tool_calls, outcomes, strict=True)
            ]
            await log.append(session_id, list(results))
            open_calls = {}
            if post_step is not None:
                pairs = tuple(zip(calls, results, strict=True))
                done = StepDone(pairs, reply.text, compacted, tokens)
                stop_reason = await post_step(done)
                if stop_reason is not None:
                    outcome, detail, final_text = "completed", stop_reason, ""
                    break
            final_text = ""
            # A question went to the person (a call whose tool declares "ask"): the run
            # waits for the answer.
            asked = asked or any(
                "ask" in runtime.registry.effects(c.name, c.arguments) and not o.is_error
                for c, o in zip(reply.tool_calls, outcomes, strict=True)
            )
        else:
            detail = f"stopped after {deps.settings.max_steps} steps"
    except ModelError as exc:
        outcome, detail = "failed", f"{type(exc).__name__}: {exc}"
        cut = _cut_record(deps, turn_id, message.source, progress, chars, estimate)
        if cut is not None:
            # The stream broke off after the server began: what was sent and what arrived
            # were paid for, so they count.
            stored = await log.append(session_id, [cut])
            assert deps.usage is not None
            await deps.usage.recorded(stored, held)
            held = None
        if held is not None and deps.usage is not None:
            deps.usage.release(held)  # no reply, no usage: the hold goes
            held = None
        await safe_call("notice", deps.channel.notice(session_id, f"The model failed: {exc}"))
    except BaseException as exc:
        cut = _cut_record(deps, turn_id, message.source, progress, chars, estimate)
        if held is not None and deps.usage is not None and cut is None:
            deps.usage.release(held)
            held = None
        is_cancel = not isinstance(exc, Exception)
        closing: list[SessionEvent] = [] if cut is None else [cut]
        closing += [
            ToolResult(
                call_id=c.call_id,
                name=c.name,
                content=CANCELLED_TOOL_TEXT if is_cancel else f"failed: {type(exc).__name__}",
                is_error=True,
                interrupted=True,
            )
            for c in open_calls.values()
        ]
        end_outcome: TurnOutcome = "cancelled" if is_cancel else "failed"
        closing.append(TurnEnd(turn_id=turn_id, outcome=end_outcome, detail=type(exc).__name__))
        # Shielded: a second cancellation (two /stop at once) must not leave the turn open.
        stored = await asyncio.shield(log.append(session_id, closing))
        if cut is not None and deps.usage is not None:
            await deps.usage.recorded(stored, held)  # a /stop mid-stream still pays
            held = None
        await safe_call("turn_ended", deps.channel.turn_ended(session_id, end_outcome))
        if is_cancel:
            raise
        # A bug in a tool runtime or a store: the turn is closed, the worker goes on.
        _log.exception("plangate.agent.turn.failed %s", type(exc).__name__)
        await safe_call(
            "notice", deps.channel.notice(session_id, f"The turn failed: {type(exc).__name__}")
        )
        return TurnResult(turn_id, "failed", "", type(exc).__name__)
    finally:
        if held is not None and deps.usage is not None:
            deps.usage.release(held)  # a hold whose call was never made
    await log.append(session_id, [TurnEnd(turn_id=turn_id, outcome=outcome, detail=detail)])
    await safe_call("turn_ended", deps.channel.turn_ended(session_id, outcome))
    text = final_text.strip()
    if not text and outcome == "completed" and detail:
        text = last_said.strip()
    if budget_stop is not None:
        text = (text + "\n\n" if text else "") + budget_stop.line
    if text and deps.usage is not None:
        usage = await deps.usage.session(session_id)
        footer = deps.usage.footer(session_id, usage, turn_id)
        if footer:
            text = f"{text}\n\n{footer}"
    if outcome == "max_steps" and not runs_on:
        text = (text + "\n\n" if text else "") + (
            f"(I stopped after {deps.settings.max_steps} steps; send a message to continue.)"
        )
    if text and quiet:
        return TurnResult(
            turn_id, outcome, final_text, detail, asked=asked, held=text, refusal=budget_stop
        )
    if text:
        await safe_call("reply", deps.channel.reply(session_id, text, reply_to=message.message_id))
    return TurnResult(turn_id, outcome, final_text, detail, asked=asked, refusal=budget_stop)


def _cut_record(
    deps: AgentDeps,
    turn_id: str,
    source: MessageSource,
    progress: StreamProgress | None,
    chars: int,
    estimate: int,
) -> SessionEvent | None:
    """The usage record of a streamed call cut short, or None when no stream was under way
    (or it never opened: a call refused or unreachable sent nothing that was paid for)."""
    if deps.usage is None or progress is None or not progress.opened:
        return None
    return deps.usage.cut_record(
        turn_id=turn_id,
        source=source,
        chars=chars,
        estimate=estimate,
        arrived_chars=progress.chars,
    )


def _server_of(model: object) -> str:
    """The model server a provider talks to, for the usage log (its base URL, if it has one)."""
    return str(getattr(model, "base_url", "") or type(model).__name__)


def _reply_tokens(reply: ModelReply) -> int:
    usage = reply.usage
    return 0 if usage is None else usage.prompt_tokens + usage.completion_tokens


async def _call_model(
    deps: AgentDeps,
    session_id: str,
    messages: list[dict[str, object]],
    specs: Sequence[dict[str, object]],
    *,
    max_tokens: int | None,
    progress: StreamProgress,
) -> ModelReply:
    """One model call: streamed into the chat's draft when the chat shows drafts and the
    provider can stream, else a plain completion (docs/inputs.md). The draft is told each
    new piece (``more``: it continues the step's text), so a long answer costs linear work."""
    model = deps.model
    if isinstance(model, StreamingProvider) and await deps.channel.drafts_wanted(session_id):
        started = False

        async def on_text(piece: str) -> None:
            nonlocal started
            more, started = started, True
            await safe_call("draft", deps.channel.draft(session_id, piece, more=more))

        return await model.stream(
            messages, specs, on_text=on_text, max_tokens=max_tokens, progress=progress
        )
    return await model.complete(messages, specs, max_tokens=max_tokens)


async def _run_batch(
    runtime: ToolRuntime, calls: Sequence[ModelToolCall], ctx: ToolContext
) -> list[ToolOutcome]:
    """Run the batch; calls whose argument text was not JSON are answered without running."""
    results: list[ToolOutcome | None] = [_invalid_arguments(c) for c in calls]
    requests = [
        ToolCallRequest(call_id=c.id, name=c.name, arguments=dict(c.arguments))
        for c, r in zip(calls, results, strict=True)
        if r is None
    ]
    ran = iter(await runtime.run_batch(requests, ctx) if requests else [])
    return [r if r is not None else next(ran) for r in results]


async def _context(
    deps: AgentDeps, session_id: str, *, workspace_text: str
) -> list[dict[str, object]]:
    # Incremental: the turns and projections of the steps before, plus the log's new tail.
    turns, projections = await deps.history.read(
        deps.log,
        session_id,
        result_cap=deps.settings.tool_result_cap_chars,
        vision=deps.settings.vision,
    )
    plan_view = (
        await deps.plan.prompt_view(session_id) if deps.plan is not None else PlanPromptView()
    )
    system = build_system_prompt(
        PromptInputs(
            workspace=workspace_text,
            plan=plan_view,
            goal=projections.goal,
            todos=projections.todos,
            tool_names=tuple(t.name for t in deps.tools),
            workspace_note=(
                await deps.workspace_note(session_id) if deps.workspace_note is not None else ""
            ),
        )
    )
    return assemble_messages(turns, system_prompt=system, settings=deps.settings)


def _read_roots(deps: AgentDeps, session_id: str) -> tuple[Path, ...]:
    """The session's inbox, when there is one: the read tools may read it, never write."""
    if deps.inbox_root is None:
        return ()
    return (session_inbox(deps.inbox_root, session_id),)


def is_goal_round(source: MessageSource) -> bool:
    """``True`` for a message the goal round driver queued."""
    return isinstance(source, GoalRoundSource)


__all__ = [
    "CANCELLED_TOOL_TEXT",
    "InboundMessage",
    "PostStep",
    "PreStep",
    "StepDone",
    "TurnResult",
    "run_turn",
]
