"""The command plane: every slash command and button press, decided (docs/commands.md).

Commands run without opening a model turn and are logged as ``command/run``. Each returns an
:class:`engine.api.Outcome` that the front end renders; nothing here knows the chat service.

The plan command matrix (docs/commands.md):

    command     NoPlan          pre-init             post-init             Active
    /plan       enter pre-init  "already planning"   "already planning"    offer Revise
    /show-plan  "no plan"       "nothing written"    restick the card      restick the card
    /execute    refused         refused              approve if valid      seed retry / continue
    /discard    "nothing"       clear the flag       cancel turn, archive  cancel turn, archive
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

from engine import api
from engine.api import STALE_TEXT, CommandName, Outcome
from engine.cards import Cards
from engine.events import Attachment, CommandRun, FeedbackSource, HumanSource
from engine.goal.commands import describe_goal, parse_goal_command, run_goal_command
from engine.goal.fold import GoalRefusal
from engine.keys import Chat, ChatKey, ChatKind, MessageKey, PersonKey
from engine.plan.digest import too_big_detail
from engine.plan.extract import validate_template_b
from engine.plan.types import is_editing
from engine.ports import Clock
from engine.roles.audit import AuditTrail, plan_line, tool_line
from engine.roles.commands import describe_team, parse_team_args, run_team
from engine.roles.policy import command_action, may, press_action, refusal_text, words_action
from engine.roles.types import Action, Person, Role
from engine.roles.votes import Vote
from engine.services import Services
from engine.tasks import BackgroundTasks, safe_call
from engine.text import clean_text, clip
from engine.usage.ledger import fmt_tokens, parse_tokens, raised_cap
from engine.usage.meter import CAP_COMMAND

_log = logging.getLogger("plangate.commands")
# A read-only command's record waits this long for others and is written with them: one commit
# per burst of /status or /help instead of one each (its durable commit was most of a read-only
# command's cost over a bare handler; docs/bench.md).
READ_ONLY_LOG_WINDOW_S = 0.25


# Every command, as /help lists it: (name, arguments, what it does). A command's name is the
# one a chat can tap (``show_plan``; ``/show-plan`` is typed the same); README.md lists the same.
HELP_COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("plan", "[request]", "plan first: the agent explores and writes a plan for you to approve"),
    ("show_plan", "", "show the plan card again at the bottom of the chat"),
    (
        "execute",
        "[text]",
        "approve the written plan, or continue the checklist (text goes to the agent)",
    ),
    ("discard", "", "discard the plan (it is archived, not deleted)"),
    (
        "goal",
        "[objective [--tokens 200k] | pause | resume | clear | done | rounds N | budget 500k "
        "| every 30m | every off]",
        "a goal the agent works on round after round",
    ),
    ("stop", "", "stop the running turn and pause the goal"),
    ("new", "", "start a fresh session in this chat"),
    ("project", "[name]", "show this chat's project, or switch this chat (or topic) to another"),
    ("status", "", "what the agent is doing"),
    ("setup", "", "run the project's .plangate/setup.sh here (asks first, showing the script)"),
    ("usage", "", "tokens and cost: today, this session, the goal (/usage cap 2m: raise the cap)"),
    ("team", "[add <user> approver | remove <user>]", "who may do what here"),
    ("whoami", "", "your id and your role here"),
    ("help", "", "this list"),
)
HELP_TEXT = "plangate commands:\n" + "\n".join(
    f"/{name}{' ' + args if args else ''} - {what}" for name, args, what in HELP_COMMANDS
)

SEED_RETRY_PROMPT = (
    "The plan is approved but its checklist is empty. Read the plan at {md_path} and call "
    "plan add_tasks with one task per implementation step (title, description, acceptance "
    "criteria from its Done when lines), then start the first task."
)
FEEDBACK_QUESTION = "What should change? Reply with your feedback for the planner."
# What a press that only changes its card answers (the presser sees it at once).
PRESS_ANSWERS: dict[tuple[str, str], str] = {
    ("p", api.PLAN_DISCARD): "Discard this plan? Confirm on the card.",
    ("p", api.PLAN_CANCEL): "Cancelled: nothing changed.",
    ("p", api.PLAN_DROP): "Discard the changes? Confirm on the card.",
    ("p", api.PLAN_DROP_NO): "Cancelled: the branch waits for your decision.",
    ("g", api.GOAL_PAUSE): "Goal paused.",
    ("g", api.GOAL_RESUME): "Goal resumed.",
    ("g", api.GOAL_START): "Goal started.",
    ("g", api.GOAL_CLEAR): "Clear this goal? Confirm on the card.",
    ("g", api.GOAL_CLEAR_YES): "Goal cleared.",
    ("g", api.GOAL_CANCEL): "Cancelled: nothing changed.",
}
TEXT_NOT_SENT = "The text after /execute was not sent to the agent."


class CommandPlane:
    """Decides every command, button press and owner's message, from the services it needs.

    The caller loads the session first (:meth:`engine.sessions.Sessions.ensure_loaded`).
    """

    def __init__(
        self,
        services: Services,
        *,
        cards: Cards,
        ensure_loaded: Callable[[str], Awaitable[None]] | None = None,
        chat_of: Callable[[str], ChatKey | None] = lambda _session_id: None,
        plan_approvals: int = 1,
        owner_overrides: bool = False,
        clock: Clock = time.time,
    ) -> None:
        if plan_approvals < 1:
            raise ValueError("a plan needs at least one approval")
        self._roles = services.roles
        # A session is loaded in this process before anything is decided for it (Sessions).
        self._ensure_loaded = ensure_loaded
        self._channel = services.channel
        self._clock = clock
        self._votes = services.votes
        self._audit = AuditTrail(services.log)
        self._chat_of = chat_of
        self.plan_approvals = plan_approvals
        self.owner_overrides = owner_overrides
        self._log = services.log
        self._plans = services.plans
        self._goals = services.goals
        self._agents = services.agents
        self._approvals = services.approvals
        self._usage = services.usage
        self._workspace_for = services.workspace_for
        self._worktrees = services.worktrees
        self._setup = services.setup
        self._choices = cards.choices
        self._redraw_plan = cards.plan_changed
        self._background_logs = BackgroundTasks(_log, event="log_failed")
        # Read-only commands' records not written yet, by session, in the order made.
        self._read_only_waiting: dict[str, list[CommandRun]] = {}

    # --- plumbing ---------------------------------------------------------------------------

    async def role(self, session_id: str, actor: PersonKey | None) -> Role:
        """The actor's role in the session's chat (engine.roles; the one rule is ``may``)."""
        return await self._roles.role_of(self._chat_of(session_id), actor)

    async def log_command(
        self,
        session_id: str,
        name: str,
        args: str,
        *,
        actor: PersonKey | None,
        data: dict[str, Any] | None = None,
    ) -> None:
        """Append the ``command/run`` that records a command-plane action."""
        event = CommandRun(name=name, args=args, actor=actor, data=data or {})
        await self._log.append(session_id, [event])

    def log_read_only(
        self, session_id: str, name: str, args: str, *, actor: PersonKey | None
    ) -> None:
        """Log a read-only command's ``command/run`` in the background: the reply does not wait
        for it, and it is written with the other read-only records of the next
        ``READ_ONLY_LOG_WINDOW_S`` (so a crash in that window loses it, and it may follow a
        later event of its session); a failure is logged, never raised. :meth:`flush_logs`
        writes what waits and awaits it."""
        first = not self._read_only_waiting
        event = CommandRun(name=name, args=args, actor=actor, data={})
        self._read_only_waiting.setdefault(session_id, []).append(event)
        if first:
            self._background_logs.spawn(
                self._write_read_only(READ_ONLY_LOG_WINDOW_S), name="read-only command records"
            )

    async def _write_read_only(self, after_s: float) -> None:
        if after_s:
            await asyncio.sleep(after_s)
        waiting, self._read_only_waiting = self._read_only_waiting, {}
        for session_id, events in waiting.items():
            # One task a session: one session's failed write loses none of the others'. Each
            # runs in a context of its own: the records are many commands', no caller's (among
            # replicas a context names the update being processed, which an append marks done).
            self._background_logs.spawn(
                self._log.append(session_id, events),
                name=f"session={session_id} commands={','.join(e.name for e in events)}",
                context=contextvars.Context(),
            )

    async def flush_logs(self) -> None:
        """Write the read-only records still waiting and wait for every background
        ``command/run`` append in flight."""
        await self._write_read_only(0)
        await self._background_logs.drain()

    async def _load(self, session_id: str) -> None:
        if self._ensure_loaded is not None:
            await self._ensure_loaded(session_id)

    async def user_message(
        self,
        session_id: str,
        text: str,
        *,
        actor: PersonKey | None,
        message_id: MessageKey | None,
        feedback: bool = False,
        answer: bool = False,
        attachments: Sequence[Attachment] = (),
    ) -> None:
        """The session loaded, then :meth:`message` (``EngineApi.user_message``)."""
        await self._load(session_id)
        await self.message(
            session_id,
            text,
            actor=actor,
            message_id=message_id,
            feedback=feedback,
            answer=answer,
            attachments=attachments,
        )

    async def command(
        self,
        session_id: str,
        name: CommandName,
        args: str,
        *,
        actor: PersonKey | None,
        actor_name: str = "",
    ) -> Outcome:
        """The session loaded, then :meth:`run` (``EngineApi.command``)."""
        await self._load(session_id)
        return await self.run(session_id, name, args, actor=actor, actor_name=actor_name)

    async def team(
        self,
        chat: Chat,
        args: str,
        *,
        actor: PersonKey | None,
        actor_name: str = "",
        target: Person | None = None,
    ) -> Outcome:
        """``/team [add <user> approver | remove <user>]`` in a chat (docs/roles.md): anyone
        may list; only an owner may change the team, and only in a group (a thread's team is
        its parent's)."""
        chat_id = chat.room
        role = await self._roles.role_of(chat_id, actor)
        if not may(role, command_action("team", args)):
            return Outcome(reply=refusal_text(role))
        spec = parse_team_args(args)
        if isinstance(spec, str):
            return Outcome(reply=spec)
        if spec.op == "list":
            return Outcome(reply=await describe_team(self._roles, chat_id, viewer_role=role))
        if chat.kind is ChatKind.PRIVATE:
            return Outcome(reply="Roles are kept per group: use /team in the group.")
        assert actor is not None  # only an owner may change the team
        text = await run_team(
            self._roles, chat_id, spec, target=target, actor=Person(actor, actor_name)
        )
        _log.info("plangate.commands.team chat=%s op=%s by=%s", chat_id, spec.op, actor)
        return Outcome(reply=text)

    async def message(
        self,
        session_id: str,
        text: str,
        *,
        actor: PersonKey | None,
        message_id: MessageKey | None,
        feedback: bool = False,
        answer: bool = False,
        attachments: Sequence[Attachment] = (),
    ) -> None:
        """A message for the agent: queued, never waited for.

        The actor's role must allow it: an owner's words, or (approvers too) ``feedback`` and
        an ``answer`` to a question the agent asked (the front end says which it is).

        ``feedback`` marks the answer to Keep planning or Revise; ``attachments`` are files
        already saved in the session inbox (engine.inbox). A message answers a
        question the agent asked, so the card stops saying it waits for one.
        """
        controller = self._agents.controller(session_id)
        answered = controller.awaiting_answer
        role = await self.role(session_id, actor)
        if not may(role, await self.words_action(session_id, feedback=feedback, answer=answer)):
            # The front end's gate refuses these before they get here; this is the backstop.
            _log.info("plangate.commands.message_refused session=%s role=%s", session_id, role)
            # Said, never dropped without a word (two answers to one question at once, say).
            self._background_logs.spawn(
                safe_call("notice", self._channel.notice(session_id, refusal_text(role))),
                name=f"session={session_id} refusal",
            )
            return
        source: FeedbackSource | HumanSource = (
            FeedbackSource(user_id=actor, message_id=message_id)
            if feedback
            else HumanSource(user_id=actor, message_id=message_id)
        )
        controller.submit(
            clean_text(text), source=source, message_id=message_id, attachments=tuple(attachments)
        )
        if answered:
            await self._redraw_plan(session_id)

    async def words_action(self, session_id: str, *, feedback: bool, answer: bool) -> Action:
        """What words for the agent count as now (engine.roles.policy.words_action): feedback
        only while the plan under review awaits it, an answer only while the agent's question
        is open (the first answer closes it); anything else is one's own words."""
        if feedback:
            sidecar = await self._plans.current(session_id)
            feedback = sidecar is not None and self._choices.awaits_feedback(session_id, sidecar.id)
        controller = self._agents.controller(session_id)
        # While a turn runs, its question may be on screen before the turn notes it: the front
        # end knows which question is open then (it closes the older ones when a turn starts).
        answer = answer and (controller.awaiting_answer or controller.working)
        return words_action(feedback=feedback, answer=answer)

    def _pass_on(self, session_id: str, text: str, *, actor: PersonKey | None) -> None:
        """Queue a command's text (``/plan text``, ``/execute text``) as the owner's message."""
        source = HumanSource(user_id=actor, message_id=None)
        self._agents.controller(session_id).submit(text, source=source, message_id=None)

    # --- commands ---------------------------------------------------------------------------

    async def run(
        self,
        session_id: str,
        name: CommandName,
        args: str,
        *,
        actor: PersonKey | None,
        actor_name: str = "",
    ) -> Outcome:
        """Run one command; refusals are outcomes with a reply, never exceptions.

        The actor's role must allow it (engine.roles.policy): a refusal says what it allows.
        """
        args = clean_text(args).strip()
        role = await self.role(session_id, actor)
        if not may(role, command_action(name, args)):
            return Outcome(reply=refusal_text(role))
        if name in ("plan", "execute", "discard", "goal", "stop"):
            self._choices.clear(session_id)
        # Read-only commands (api.READ_ONLY_COMMANDS, the one set) change nothing: their
        # command/run is logged without the reply waiting for the commit (docs/storage.md).
        if name in api.READ_ONLY_COMMANDS:
            self.log_read_only(session_id, name, args, actor=actor)
        match name:
            case "plan":
                return await self._plan(session_id, args, actor=actor)
            case "show_plan":
                return await self._show_plan(session_id)
            case "execute":
                await self.log_command(session_id, "execute", args, actor=actor)
                return await self._execute(session_id, args, actor=actor, actor_name=actor_name)
            case "discard":
                await self.log_command(session_id, "discard", args, actor=actor)
                return await self.discard(session_id)
            case "goal":
                await self.log_command(session_id, "goal", args, actor=actor)
                return await self._goal(session_id, args)
            case "stop":
                await self.log_command(session_id, "stop", args, actor=actor)
                return await self._stop(session_id)
            case "status":
                # The workspace path tells a group's members about the owner's machine.
                owner = may(role, "settings")  # the path is the owner's machine's
                return Outcome(reply=await self.status_text(session_id, owner=owner))
            case "help":
                return Outcome(reply=HELP_TEXT)
            case "usage":
                return await self._usage_command(session_id, args, actor=actor)
            case "setup":
                await self.log_command(session_id, "setup", args, actor=actor)
                return await self._setup_command(session_id)
        return Outcome(reply=HELP_TEXT)

    async def _setup_command(self, session_id: str) -> Outcome:
        """``/setup``: the project's setup script in the session's workspace now (the
        project itself, or the live plan's worktree), after the owner's approval of its text
        (docs/environments.md)."""
        if self._setup is None:
            return Outcome(reply="Setup scripts are off here.")
        if self._agents.controller(session_id).busy:
            return Outcome(reply="The agent is working: /stop it first, then /setup.")
        workspace = await self._workspace_for(session_id)
        return Outcome(reply=await self._setup.owner_setup(session_id, workspace))

    async def _plan(self, session_id: str, text: str, *, actor: PersonKey | None) -> Outcome:
        plans = self._plans
        state = await plans.state(session_id)
        controller = self._agents.controller(session_id)
        if state == "none":
            await self.log_command(session_id, "plan", text, actor=actor, data={"target": True})
            if controller.busy:
                # The switch commits at the next step boundary (docs/commands.md).
                controller.request_plan_mode(True)
                reply = "Planning starts when the current step ends."
            else:
                workspace = await self._workspace_for(session_id)
                result = await plans.enter_pre_init(session_id, working_directory=str(workspace))
                if not result.ok:
                    return Outcome(reply=result.text)
                reply = ""  # the card says it: one message, not two
            if text:
                self._pass_on(session_id, text, actor=actor)
            else:
                reply = (reply + " What should it plan? Send your request.").strip()
            return Outcome(reply=reply or None, plan_card="restick")
        await self.log_command(session_id, "plan", text, actor=actor)
        if is_editing(state):
            if text:
                self._pass_on(session_id, text, actor=actor)
            return Outcome(reply="Already planning.", plan_card="restick")
        sidecar = await plans.current(session_id)
        if sidecar is None or not await self._revisable(session_id):
            return Outcome(
                reply="This checklist has no plan text to revise. /discard it to plan anew.",
                plan_card="restick",
            )
        self._choices.choose_plan(session_id, "revise_offer", sidecar.id, sidecar.revision)
        return Outcome(reply="A plan is being carried out. Revise it?", plan_card="restick")

    async def _revisable(self, session_id: str) -> bool:
        sidecar = await self._plans.current(session_id)
        if sidecar is None or sidecar.status != "Active":
            return False
        return sidecar.mode in (None, "design") and bool(await self._plans.md_text(session_id))

    async def _show_plan(self, session_id: str) -> Outcome:
        state = await self._plans.state(session_id)
        if state == "none":
            return Outcome(reply="No plan. Start one with /plan.")
        if state == "pre_init":
            return Outcome(reply="Planning; nothing written yet.", plan_card="restick")
        return Outcome(plan_card="restick")

    async def _execute(
        self, session_id: str, text: str, *, actor: PersonKey | None, actor_name: str = ""
    ) -> Outcome:
        """``/execute [text]``: the text goes to the agent as the owner's message once the
        approval stands (or with the checklist's continuation); a refusal says it was not sent."""
        plans = self._plans
        state = await plans.state(session_id)
        if state == "none":
            return Outcome(reply=_unsent("No plan to execute. Start one with /plan.", text))
        if state == "pre_init":
            return Outcome(
                reply=_unsent(
                    "No plan written yet: the agent is still exploring. "
                    "Approve once the plan is written.",
                    text,
                )
            )
        if state == "post_init":
            revision = await plans.revision(session_id)
            return await self.approve(
                session_id, revision, actor=actor, actor_name=actor_name, text=text
            )
        outcome = await self.run_checklist(session_id)
        if text:
            # Queued behind the checklist's next turn: the owner's turn goes first after it.
            self._pass_on(session_id, text, actor=actor)
        return outcome

    async def run_checklist(self, session_id: str) -> Outcome:
        """``/execute`` or Resume on an Active plan: run the checklist on to its end."""
        plans = self._plans
        sidecar = await plans.current(session_id)
        controller = self._agents.controller(session_id)
        if controller.busy:
            await controller.run_checklist()
            return Outcome(
                reply="The agent is working; it goes on with the checklist.", plan_card="refresh"
            )
        if sidecar is not None and not sidecar.tasks:
            md_path = await plans.md_path(session_id)
            await controller.run_checklist(SEED_RETRY_PROMPT.format(md_path=md_path))
            return Outcome(reply="Building the checklist again.", plan_card="refresh")
        await controller.run_checklist()
        return Outcome(reply="Continuing with the checklist.", plan_card="refresh")

    async def approve(
        self,
        session_id: str,
        revision: int,
        *,
        actor: PersonKey | None,
        actor_name: str = "",
        text: str = "",
    ) -> Outcome:
        """Approve the plan at ``revision``: now when idle, at the next step when busy.

        With ``plan_approvals`` above one, each different approver's press is a vote for this
        revision (engine.roles.votes); the one that completes the count approves, and an owner
        alone does when ``owner_overrides``. ``text`` (from ``/execute text``) is queued as the
        owner's message once the approval is committed or pending; it runs after the turn that
        is running or queued, under Active.
        """
        digest = await self._plans.digest(session_id)
        if digest is not None and digest.too_big:
            too_big = too_big_detail(digest.size_bytes, self._plans.max_plan_bytes)
            return Outcome(reply=_unsent(f"The plan cannot be approved: {too_big}.", text))
        missing = list(digest.problems) if digest is not None else validate_template_b("")
        if missing:
            lines = "\n".join(f"- {item}" for item in missing)
            return Outcome(
                reply=_unsent(f"The plan cannot be approved yet. Missing:\n{lines}", text)
            )
        sidecar = await self._plans.current(session_id)
        if sidecar is None or sidecar.revision != revision:
            return Outcome(reply=_unsent("The approval did not go through.", text))
        votes = await self._votes.votes(session_id, sidecar.id, revision)
        needed = self.plan_approvals
        if self.owner_overrides and await self.role(session_id, actor) == "owner":
            needed = 1
        data = {"revision": revision, "plan_id": sidecar.id, "name": actor_name}
        if actor is not None and any(v.user_id == actor for v in votes):
            # The same person twice counts once.
            return Outcome(
                reply=_unsent(
                    f"You approved this version already: {len(votes)} of {needed} approvals. "
                    "It needs someone else's.",
                    text,
                )
            )
        final = len(votes) + 1 >= needed
        # Logged first: a vote counts once it is in the log (a restart reads it back).
        name = "approve" if final else "approval_vote"
        [logged] = await self._log.append(
            session_id, [CommandRun(name=name, args=str(revision), actor=actor, data=data)]
        )
        self._audit.add(session_id, plan_line(actor, actor_name, logged.at, final=final))
        if actor is not None:
            self._votes.add(session_id, sidecar.id, revision, Vote(actor, actor_name, logged.at))
        if not final:
            return Outcome(
                reply=_unsent(
                    f"Approval {len(votes) + 1} of {needed}: it needs another approver.", text
                ),
                plan_card="refresh",
            )
        controller = self._agents.controller(session_id)
        answer = await controller.request_approval(revision=revision, actor=actor)
        self._choices.feedback_done(session_id)
        if answer == "stale":
            return Outcome(
                reply=_unsent("The approval did not go through.", text), plan_card="refresh"
            )
        if text:
            self._pass_on(session_id, text, actor=actor)
        if answer == "pending":
            return Outcome(
                reply="Approved. The checklist starts when the current step ends.",
                plan_card="refresh",
            )
        return Outcome(reply="Approved. Working through the checklist.", plan_card="refresh")

    async def discard(self, session_id: str) -> Outcome:
        """``/discard`` and the confirmed Discard button: cancel the turn first, then archive.

        A pending approval or ``/plan`` is taken back, never committed later; the goal is
        disarmed (docs/goals.md).
        """
        plans = self._plans
        controller = self._agents.controller(session_id)
        pending_plan = controller.pending_plan_mode is True
        controller.cancel_pending()
        self._choices.clear(session_id)
        dropped = [m.text for m in await self._agents.stop(session_id)]
        state = await plans.state(session_id)
        if state == "none":
            reply = "Planning cancelled." if pending_plan else "Nothing to discard."
            return Outcome(reply=reply, plan_card="refresh", dropped=tuple(dropped))
        sidecar = await plans.current(session_id)
        revising = sidecar is not None and sidecar.revising is not None
        result = await plans.discard(session_id)
        if not result.ok:
            return Outcome(reply=result.text, plan_card="refresh", dropped=tuple(dropped))
        self._choices.feedback_done(session_id)
        if state == "pre_init":
            reply = "Planning cancelled."
        elif revising:
            reply = "The revision is discarded; the approved plan stands."
        else:
            reply = "Plan discarded. It is archived, not deleted."
        return Outcome(reply=reply, plan_card="refresh", dropped=tuple(dropped))

    async def _goal(self, session_id: str, args: str) -> Outcome:
        spec = parse_goal_command(args)
        result = await run_goal_command(self._goals, session_id, spec)
        card: Literal["refresh", "restick"] = "restick" if spec.action == "show" else "refresh"
        return Outcome(reply=result.text, goal_card=card)

    async def _usage_command(
        self, session_id: str, args: str, *, actor: PersonKey | None
    ) -> Outcome:
        meter = self._usage
        if not args:
            return Outcome(reply=await meter.report(session_id))
        word, _, rest = args.partition(" ")
        cap = parse_tokens(rest) if word.lower() == "cap" else None
        if cap is None:
            return Outcome(reply="usage: /usage, or /usage cap <tokens> (like 500k or 2m)")
        # Logged, so the raised cap holds after a restart too (the last one logged stands).
        await self.log_command(session_id, CAP_COMMAND, args, actor=actor, data={"cap": cap})
        meter.set_daily_cap(cap)
        return Outcome(
            reply=f"Daily token cap set to {fmt_tokens(cap)} (today: "
            f"{fmt_tokens(meter.today().tokens)} used). A blocked goal goes on after Resume.",
            goal_card="refresh",
        )

    async def _stop(self, session_id: str) -> Outcome:
        # The dropped messages travel as data; the front end lists them under the reply.
        dropped = [m.text for m in await self._agents.stop(session_id)]
        # Nothing waits for the owner any more (the stop answered any question): no feedback.
        self._choices.feedback_done(session_id)
        return Outcome(
            reply="Stopped.", dropped=tuple(dropped), plan_card="refresh", goal_card="refresh"
        )

    async def status_text(self, session_id: str, *, owner: bool = True) -> str:
        """``/status``: the plan, the goal, the agent and the todos in a few lines.

        The workspace's absolute path is shown to an owner only (``owner``).
        """
        workspace = await self._workspace_for(session_id)
        where = f" in {workspace}" if owner else ""
        lines = [f"Session {session_id[:8]}{where}"]
        state = await self._plans.state(session_id)
        sidecar = await self._plans.current(session_id)
        if sidecar is None:
            lines.append("Plan: none")
        else:
            label = {"pre_init": "planning", "post_init": "written", "active": "active"}[state]
            done = sum(t.status in ("completed", "deferred") for t in sidecar.tasks)
            progress = f", {done}/{len(sidecar.tasks)} done" if sidecar.tasks else ""
            # A title is one line wherever it is drawn.
            title = clip(sidecar.title or "(untitled)", 120, one_line=True)
            lines.append(f"Plan: {title} ({label}{progress})")
        worktree = await self._worktrees.record(session_id)
        if worktree is not None and worktree.phase in ("live", "done", "conflict"):
            waits = "" if worktree.phase == "live" else ", waiting for Merge or Keep branch"
            lines.append(f"Branch: {worktree.branch} (its own worktree{waits})")
        # The goal as this process last read it: every goal change made here goes through the
        # goal service, which re-reads after it, and the engine read the log when it loaded the
        # session. A fresh read would wait behind the update_id commit (docs/bench.md).
        goal = self._goals.peek(session_id)
        lines.append(describe_goal(goal, armed=self._goals.is_armed(session_id)))
        if self._setup is not None:
            lines.append(await self._setup.describe(session_id, workspace))
        controller = self._agents.controller(session_id)
        queued = len(controller.queued)
        agent = "working" if controller.busy else "idle"
        lines.append(f"Agent: {agent}" + (f", {queued} queued" if queued else ""))
        paused = controller.checklist.paused
        if sidecar is not None and paused is not None and not controller.checklist.armed:
            lines.append(f"Run: {clip(paused.text, 300, one_line=True)}")
        waiting = self._approvals.pending(session_id)
        if waiting is not None:
            command = clip(waiting.command, 200, one_line=True)
            lines.append(f"Waiting for you: allow {waiting.tool} {command}?")
        decisions = await self._audit.last(session_id)
        if decisions:
            lines.append("Last decisions:")
            lines.extend(decisions)
        return "\n".join(lines)

    # --- presses ----------------------------------------------------------------------------

    async def press(
        self,
        session_id: str,
        press: api.Press,
        *,
        actor: PersonKey | None,
        message_id: MessageKey | None = None,
        actor_name: str = "",
    ) -> Outcome:
        """A button press; counts only if id, revision and the action match the state now.

        A plan press counts only on the card ``flow`` names: an older copy of the card
        (reposted since) is out of date even at the same revision. The presser's role must
        allow the action (a removed approver's old buttons do nothing).
        """
        await self._load(session_id)
        action, short_id, revision = press.action, press.short_id, press.revision
        role = await self.role(session_id, actor)
        if not may(role, press_action(press.kind, action)):
            return Outcome(reply=refusal_text(role), alert=True)
        if press.kind == "a":
            outcome = await self._approval_press(
                session_id, action, short_id, actor=actor, actor_name=actor_name
            )
        elif press.kind == "p":
            outcome = await self._plan_press(
                session_id,
                action,
                short_id,
                revision,
                actor=actor,
                message_id=message_id,
                actor_name=actor_name,
            )
        else:
            outcome = await self._goal_press(session_id, action, short_id, revision, actor=actor)
        if not outcome.reply:
            # Every press is answered in words (done, refused with why, or out of date): a
            # card change alone may wait behind the group's pacing.
            said = PRESS_ANSWERS.get((press.kind, action), "Done.")
            outcome = dataclasses.replace(outcome, reply=said)
        return outcome

    async def _plan_press(
        self,
        session_id: str,
        action: str,
        short_id: str,
        revision: int,
        *,
        actor: PersonKey | None,
        message_id: MessageKey | None,
        actor_name: str = "",
    ) -> Outcome:
        plans = self._plans
        if action in api.BRANCH_ACTIONS:
            return await self._branch_press(session_id, action, short_id, revision, actor=actor)
        sidecar = await plans.current(session_id)
        if sidecar is None or sidecar.id[:8] != short_id or sidecar.revision != revision:
            return _stale()
        card_id = sidecar.flow.card_id
        if message_id is not None and card_id is not None and message_id != card_id:
            return _stale()
        # The one table (engine.api.plan_actions): the action must be one the card can show at
        # this revision; the match below only acts.
        offered = api.plan_actions_at(
            await plans.state(session_id), raise_cap=self._usage.daily_cap
        )
        if action not in offered:
            return _stale()
        self._choices.clear(session_id)
        match action:
            case api.PLAN_APPROVE:
                return await self.approve(session_id, revision, actor=actor, actor_name=actor_name)
            case api.PLAN_KEEP:
                await self.log_command(session_id, "keep_planning", "", actor=actor)
                self._agents.controller(session_id).cancel_pending()
                self._choices.await_feedback(session_id, sidecar.id)
                return Outcome(reply=FEEDBACK_QUESTION, await_feedback=True, plan_card="refresh")
            case api.PLAN_RESUME:
                await self.log_command(session_id, "resume", "", actor=actor)
                return await self.run_checklist(session_id)
            case api.PLAN_RAISE_CAP if self._usage.daily_cap is not None:
                meter = self._usage
                cap = raised_cap(meter.daily_cap or 0, meter.today().tokens)
                # Logged like /usage cap, so the raised cap holds after a restart too.
                args = f"cap {cap}"
                await self.log_command(
                    session_id, CAP_COMMAND, args, actor=actor, data={"cap": cap}
                )
                meter.set_daily_cap(cap)
                await self.log_command(session_id, "resume", "", actor=actor)
                resumed = await self.run_checklist(session_id)
                reply = f"Daily token cap raised to {fmt_tokens(cap)}. {resumed.reply or ''}"
                return dataclasses.replace(resumed, reply=reply.strip())
            case api.PLAN_DISCARD:
                self._choices.choose_plan(session_id, "confirm_discard", sidecar.id, revision)
                return Outcome(plan_card="refresh")
            case api.PLAN_DISCARD_YES:
                await self.log_command(session_id, "discard", "", actor=actor)
                return await self.discard(session_id)
            case api.PLAN_CANCEL:
                return Outcome(plan_card="refresh")
            case api.PLAN_REVISE if await self._revisable(session_id):
                await self.log_command(session_id, "revise", "", actor=actor)
                # Editing must hold from the first moment: a turn still executing the
                # checklist is stopped before the plan reopens (its bash could write on).
                controller = self._agents.controller(session_id)
                controller.cancel_pending()
                dropped = [m.text for m in await self._agents.stop(session_id)]
                result = await plans.revise(session_id)
                if not result.ok:
                    return Outcome(reply=result.text, alert=True, plan_card="refresh")
                # Approve stays hidden until the planner has heard what should change.
                self._choices.await_feedback(session_id, sidecar.id)
                return Outcome(
                    reply=FEEDBACK_QUESTION,
                    await_feedback=True,
                    plan_card="refresh",
                    dropped=tuple(dropped),
                )
        return _stale()

    async def _branch_press(
        self, session_id: str, action: str, short_id: str, revision: int, *, actor: PersonKey | None
    ) -> Outcome:
        """Merge / Push branch / Keep branch / Discard changes on a finished plan's Done card:
        bound to that plan's id and revision, and only while its branch waits for a decision."""
        worktrees = self._worktrees
        record = await worktrees.record(session_id)
        if (
            record is None
            or not await worktrees.deciding(session_id)
            or record.plan_id[:8] != short_id
            or record.revision != revision
            # The Done card's branch actions now (engine.api.branch_actions).
            or not api.offers(api.branch_actions(await worktrees.view(session_id)), action)
        ):
            return _stale()
        data = {"plan_id": record.plan_id, "revision": revision, "branch": record.branch}
        match action:
            case api.PLAN_DROP:
                worktrees.ask_drop(session_id, record.plan_id)
                return Outcome(plan_card="refresh")
            case api.PLAN_DROP_NO:
                worktrees.cancel_drop(session_id)
                return Outcome(plan_card="refresh")
            case api.PLAN_MERGE if worktrees.remote is None:
                await self.log_command(session_id, "branch_merge", "", actor=actor, data=data)
                text = await worktrees.merge(session_id, actor=actor)
            case api.PLAN_PUSH if worktrees.remote is not None:
                await self.log_command(session_id, "branch_push", "", actor=actor, data=data)
                text = await worktrees.push(session_id, actor=actor)
            case api.PLAN_KEEP_BRANCH:
                await self.log_command(session_id, "branch_keep", "", actor=actor, data=data)
                text = await worktrees.keep(session_id, actor=actor)
            case api.PLAN_DROP_YES if worktrees.confirming(session_id, record.plan_id):
                await self.log_command(session_id, "branch_discard", "", actor=actor, data=data)
                text = await worktrees.discard(session_id, actor=actor)
            case _:
                return _stale()
        return Outcome(reply=text, plan_card="refresh")

    async def _goal_press(
        self, session_id: str, action: str, short_id: str, revision: int, *, actor: PersonKey | None
    ) -> Outcome:
        goals = self._goals
        goal = await goals.get(session_id)
        if goal is None or goal.id[:8] != short_id or goal.revision != revision:
            return _stale()
        # The one table (engine.api.goal_actions): the action must be one the card can show
        # at this revision.
        if action not in api.goal_actions_at(goal):
            return _stale()
        self._choices.clear(session_id)
        ref = goal.ref
        await self.log_command(session_id, f"goal_{action}", "", actor=actor)
        result: object
        match action:
            case api.GOAL_PAUSE:
                result = await goals.pause(session_id, ref)
            case api.GOAL_RESUME:
                result = await goals.resume(session_id, ref)
            case api.GOAL_START:
                result = await goals.arm(session_id, ref)
            case api.GOAL_CLEAR:
                self._choices.choose_goal(session_id, "confirm_clear", goal.id, revision)
                return Outcome(goal_card="refresh")
            case api.GOAL_CLEAR_YES:
                result = await goals.clear(session_id, ref)
            case api.GOAL_CANCEL:
                return Outcome(goal_card="refresh")
            case _:
                return _stale()
        if isinstance(result, GoalRefusal):
            return Outcome(reply=result.message, alert=True, goal_card="refresh")
        return Outcome(goal_card="refresh")

    async def _approval_press(
        self,
        session_id: str,
        action: str,
        short_id: str,
        *,
        actor: PersonKey | None,
        actor_name: str,
    ) -> Outcome:
        """Allow once / Allow for this session / Deny on a waiting call, or Allow on a denied
        unattended one (adds the rule; a blocked goal then needs Resume)."""
        asked = self._approvals.pending(session_id)
        result = await self._approvals.answer(
            session_id, action, short_id, actor=actor, actor_name=actor_name
        )
        if result.stale:
            return _stale()
        if asked is not None and action != api.APPROVAL_RULE:
            line = tool_line(asked.command, action, actor, actor_name, self._clock())
            self._audit.add(session_id, line)
        if action != api.APPROVAL_RULE:
            return Outcome(reply=result.text, plan_card="refresh")
        goal = self._goals.peek(session_id)
        if goal is not None and goal.phase == "blocked":
            return Outcome(
                reply=f"{result.text}. Press ▶️ Resume on the goal card to go on.",
                goal_card="refresh",
            )
        return Outcome(reply=f"{result.text}. Send a message or /execute to go on.")


def _stale() -> Outcome:
    return Outcome(reply=STALE_TEXT, alert=True, stale=True)


def _unsent(reply: str, text: str) -> str:
    """``reply``, plus the line that says the owner's ``/execute`` text went nowhere."""
    return f"{reply}\n{TEXT_NOT_SENT}" if text else reply
