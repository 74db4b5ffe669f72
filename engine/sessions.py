"""Sessions: which session a chat key is bound to, and each session's first load.

A chat key (``engine.keys``) is bound to one session; :class:`Sessions` creates and binds one
on first use (recording the chat's kind and a thread's parent), ends it and binds a fresh one
on ``/new`` (in the same project) and on ``/project <name>`` (in that project:
docs/projects.md), moves a group's bindings when it gets a new key, and forks a session into
an unbound copy.

The first touch of a session in a process loads it: a turn a dead process left open is closed
(never re-run; the chat is told once), approvals and the goal are read back (a live goal comes
up disarmed), and a ``/plan`` or approval the dead process had logged but not committed is
decided now, the way it would have been (docs/architecture.md "Sessions and their first load").
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from engine.agent.checklist import stopped_reason
from engine.api import Outcome
from engine.bindings import ChatBindings
from engine.cards import Cards
from engine.environments import read_script
from engine.events import CommandRun
from engine.inbox import session_inbox
from engine.keys import Chat, ChatKey, PersonKey
from engine.plan.types import PlanFlow
from engine.ports import SessionStore
from engine.projects import PROJECT_NAME, Project
from engine.recovery import close_interrupted_turn, undecided_command
from engine.roles.policy import command_action, may, refusal_text
from engine.services import Services
from engine.tasks import BackgroundTasks, safe_call
from engine.text import clip
from engine.worktree.script import SETUP_PATH

_log = logging.getLogger("plangate.sessions")

INTERRUPTED_NOTICE = (
    "The last turn was interrupted when plangate stopped; it will not be re-run. "
    "Send a message to continue."
)
PLAN_RESUMED_NOTICE = "Planning, asked for before plangate stopped, is on now."
STALE_APPROVAL_NOTICE = (
    "An approval given before plangate stopped was for an older version of the plan; "
    "the plan is back in review."
)


class Sessions:
    """The process's sessions: chat bindings, first loads, ``/new``, fork and migration."""

    def __init__(
        self,
        store: SessionStore,
        services: Services,
        *,
        cards: Cards,
        bindings: ChatBindings,
        profile: str | None = None,
        inbox_root: Path | None = None,
    ) -> None:
        """``inbox_root``: where the sessions' uploads are kept (None: uploads are off)."""
        self.store = store
        self._log = services.log
        self._plans = services.plans
        self._goals = services.goals
        self._agents = services.agents
        self._approvals = services.approvals
        self._channel = services.channel
        self._catalog = services.catalog
        self._worktrees = services.worktrees
        self._workspace_for = services.workspace_for
        self._choices = cards.choices
        self._redraw_plan = cards.plan_changed
        self._set_goal_card = cards.set_goal_card
        self._profile = profile
        self._inbox_root = inbox_root
        self._roles = services.roles
        self._loaded: set[str] = set()
        # Bound sessions that start-up found unmarked (no open turn, nothing undecided): their
        # first load skips those reads.
        self._quiet: set[str] = set()
        # The bindings this process knows, both ways (a session's chats: the usage footer asks
        # on every reply whether its chat is private); only this object changes them.
        self._bindings = bindings
        self._finding: dict[ChatKey, asyncio.Future[str]] = {}
        # A session's work that hit LeaseLost lets its chat go from here (chat_lost).
        self._losing = BackgroundTasks(_log, event="chat_lost_failed")
        services.agents.listen_lease_lost(self._on_lease_lost)

    # --- bindings ---------------------------------------------------------------------------

    async def for_chat(self, chat: Chat) -> str:
        """The session bound to the chat's key, created and bound on first use.

        A binding this process already knows is answered from memory, without loading the
        session: its first message, command or press loads it (:meth:`ensure_loaded`).
        """
        # Bindings change only through this object (/new, migration), so a hit needs no
        # database trip.
        key = chat.key
        session_id = self._bindings.session(key)
        if session_id is not None:
            return session_id
        # Concurrent first touches of one key wait for the one lookup: two would each create
        # and bind a session, and one of them would be lost.
        finding = self._finding.get(key)
        if finding is None:
            finding = asyncio.ensure_future(self._find_or_create(chat))
            self._finding[key] = finding
            finding.add_done_callback(lambda _: self._finding.pop(key, None))
        return await asyncio.shield(finding)

    async def _find_or_create(self, chat: Chat) -> str:
        session_id = await self.store.session_for_chat(chat.key)
        if session_id is None:
            session_id = await self._create_bound(chat)
        await self.ensure_loaded(session_id)
        self._remember(chat, session_id)
        return session_id

    def chat_of(self, session_id: str) -> ChatKey | None:
        """The room of the chat a session is bound to (a thread's parent), as this process
        knows it (``None``: unbound). Roles are read there."""
        return self._bindings.chat_of(session_id)

    def room(self, chat: ChatKey) -> ChatKey:
        """The room of a chat key: a bound thread's parent, else the key itself."""
        return self._bindings.room(chat)

    def is_private(self, session_id: str) -> bool:
        """Whether the session is bound to a private chat (the kind recorded at binding)."""
        return self._bindings.is_private(session_id)

    def _remember(self, chat: Chat, session_id: str) -> None:
        self._bindings.remember(chat, session_id)

    def _forget(self, key: ChatKey) -> None:
        self._bindings.forget(key)

    async def _create_bound(self, chat: Chat, *, workspace: Path | None = None) -> str:
        if workspace is None:
            workspace = await self._starting_workspace(chat)
        record = await self.store.create_session(workspace=str(workspace), profile=self._profile)
        await self.store.bind_chat(chat, record.id)
        self._remember(chat, record.id)
        self._loaded.add(record.id)  # a new session: its log is empty, nothing to close
        return record.id

    async def _starting_workspace(self, chat: Chat) -> Path:
        """A new key's project: a thread starts in its parent's, anything else in the
        default project."""
        if chat.parent is not None:
            group = self._bindings.session(chat.parent) or await self.store.session_for_chat(
                chat.parent
            )
            if group is not None:
                return await self._workspace_for_session(group)
        return self._catalog.default.path

    async def _workspace_for_session(self, session_id: str) -> Path:
        """The session's project folder (never a worktree), if still listed; else the default."""
        record = await self.store.get_session(session_id)
        if record is not None and record.workspace and self._catalog.allows(record.workspace):
            return Path(record.workspace)
        return self._catalog.default.path

    async def project_of(self, session_id: str) -> Project:
        """The project the session works in (the default when its folder is not listed)."""
        folder = await self._workspace_for_session(session_id)
        return self._catalog.for_path(folder) or self._catalog.default

    def inbox_dir(self, session_id: str) -> Path | None:
        """The folder the session's uploads are saved in (None: uploads are off)."""
        root = self._inbox_root
        return session_inbox(root, session_id) if root is not None else None

    async def _refused(
        self, chat: ChatKey, actor: PersonKey | None, name: str, args: str
    ) -> Outcome | None:
        """The refusal when the actor's role may not run ``/name args`` in the chat's room."""
        role = await self._roles.role_of(self._bindings.room(chat), actor)
        if may(role, command_action(name, args)):
            return None
        return Outcome(reply=refusal_text(role))

    async def new_session(self, chat: Chat, *, actor: PersonKey) -> Outcome:
        """``/new``: end the key's session (cancel, disarm, archive), bind a fresh one, in the
        same project; the actor's role must allow it."""
        refused = await self._refused(chat.room, actor, "new", "")
        if refused is not None:
            return refused
        return await self._renew(chat, actor=actor)

    async def _renew(
        self, chat: Chat, *, actor: PersonKey, workspace: Path | None = None
    ) -> Outcome:
        """End the key's session and bind a fresh one, in the old one's project unless
        ``workspace`` names another."""
        old = await self.store.session_for_chat(chat.key)
        dropped: list[str] = []
        if old is not None:
            await self.ensure_loaded(old)
            if workspace is None:
                workspace = await self._workspace_for_session(old)
            await self._log.append(old, [CommandRun(name="new", args="", actor=actor)])
            self._agents.controller(old).cancel_pending()
            dropped = [m.text for m in await self._agents.stop(old)]
            await self._goals.disarm(old)  # the driver drops the goal's jobs on disarm
            await self._plans.abandon(old)  # a live plan's worktree is committed, its branch kept
            # A finished plan's branch still waiting for a decision is kept too.
            await self._worktrees.set_aside(old, reason="the session ended", actor=actor)
            self._choices.forget(old)
        await self._create_bound(chat, workspace=workspace)
        return Outcome(reply="Started a new session.", dropped=tuple(dropped))

    async def project(self, chat: Chat, args: str, *, actor: PersonKey) -> Outcome:
        """``/project``: say which project the key works in; ``/project <name>`` binds another
        (the actor's role must allow it).

        Binding starts a fresh session in that project (a session's folder never changes: its
        plan files live under it), logged as ``command/run`` ``project`` in both sessions.
        Refused while the key's session has a live plan or a plan switch pending.
        """
        refused = await self._refused(chat.room, actor, "project", args)
        if refused is not None:
            return refused
        session_id = await self.for_chat(chat)
        current = await self.project_of(session_id)
        name = args.strip()
        if not name:
            script = await asyncio.to_thread(read_script, current.path)
            setup = script.label if script is not None else f"none (no {SETUP_PATH})"
            return Outcome(reply=f"{self._project_listing(current)}\nSetup: {setup}")
        wanted = self._catalog.get(name) if PROJECT_NAME.fullmatch(name) else None
        if wanted is None:
            return Outcome(
                reply=f"No project named {clip(name, 64, one_line=True)!r}. "
                f"Projects: {self._project_names()}."
            )
        held = await asyncio.to_thread(self._catalog.refusal, wanted)
        if held is not None:
            return Outcome(reply=held)
        if wanted.path == current.path:
            return Outcome(reply=f"Already working in project {wanted.name} ({wanted.path}).")
        controller = self._agents.controller(session_id)
        if await self._plans.state(session_id) != "none" or controller.pending_plan_mode:
            return Outcome(
                reply=f"A plan is live in project {current.name}: finish it or /discard it "
                "before switching projects."
            )
        data = {"project": wanted.name, "path": str(wanted.path), "from": current.name}
        outcome = await self._renew(chat, actor=actor, workspace=wanted.path)
        fresh = await self.for_chat(chat)
        await self._log.append(
            fresh, [CommandRun(name="project", args=wanted.name, actor=actor, data=data)]
        )
        await self._log.append(
            session_id,
            [CommandRun(name="project", args=wanted.name, actor=actor, data={**data, "to": fresh})],
        )
        _log.info(
            "plangate.sessions.project_bound chat=%s project=%s session=%s",
            chat.key,
            wanted.name,
            fresh,
        )
        return Outcome(
            reply=f"Now working in project {wanted.name} ({wanted.path}): a new session "
            "started there.",
            dropped=outcome.dropped,
        )

    def _project_names(self) -> str:
        return ", ".join(p.name for p in self._catalog.projects())

    def _project_listing(self, current: Project) -> str:
        lines = [f"Project: {current.name} ({current.path})"]
        others = [p.name for p in self._catalog.projects() if p.name != current.name]
        if others:
            lines.append(f"Others: {', '.join(others)}. /project <name> switches this chat.")
        else:
            lines.append("No other projects are set (PLANGATE_PROJECTS).")
        return "\n".join(lines)

    async def migrate_chat(self, old: ChatKey, new: ChatKey) -> list[str]:
        """A group moved to a new key: bind its sessions (and its team) to the new one;
        returns them.

        The group's own binding moves to ``new``; a thread of it whose key extends ``old``
        moves to the same extension of ``new``. Each moved plan's ``flow`` names the new chat
        and no card (the old group's messages can no longer be edited), so the next drawing
        posts the card anew. Idempotent.
        """
        await self._roles.migrate(old, new)
        moved: list[str] = []
        for binding in await self.store.chat_bindings():
            chat = binding.chat
            if chat.key == old:
                fresh = Chat(new, chat.kind)
            elif chat.parent == old and chat.key.startswith(old + "/"):
                fresh = Chat.thread(new + chat.key[len(old) :], new)
            else:
                continue
            # Replaces a session a message in the new chat may have opened meanwhile: the
            # group's own session is the one with its history.
            await self.store.bind_chat(fresh, binding.session_id)
            self._forget(chat.key)
            self._remember(fresh, binding.session_id)
            sidecar = await self._plans.current(binding.session_id)
            if sidecar is not None and sidecar.flow.chat_id in (None, old):
                flow = sidecar.flow.model_copy(
                    update={
                        "chat_id": new,
                        "thread_id": fresh.key if fresh.parent is not None else None,
                        "card_id": None,
                        "review_ids": [],
                    }
                )
                await self._plans.set_flow(binding.session_id, flow)
            # Nor can its goal card: the next drawing posts one in the new chat.
            await self._set_goal_card(binding.session_id, chat_id=None, card_id=None)
            moved.append(binding.session_id)
        _log.info(
            "plangate.sessions.chat_migrated from=%s to=%s sessions=%s",
            old,
            new,
            len(moved),
        )
        return moved

    async def fork(self, session_id: str, *, upto_seq: int | None = None) -> str:
        """A new session with a copy of the log prefix and the current sidecar and ``.md``.

        The copy is bound to no chat and owns no card: its ``flow`` ids are cleared, so it
        never edits the parent's messages.
        """
        await self.ensure_loaded(session_id)
        record = await self.store.fork(session_id, upto_seq=upto_seq)
        await self._plans.fork(session_id, record.id)
        await self._worktrees.forked(record.id)
        if await self._plans.current(record.id) is not None:
            await self._plans.set_flow(record.id, PlanFlow())
        await self._set_goal_card(record.id, chat_id=None, card_id=None)
        return record.id

    # --- chats moving between replicas (docs/storage.md "Leases and fencing") ---------------

    def _on_lease_lost(self, session_id: str) -> None:
        room = self._bindings.chat_of(session_id)
        if room is not None:
            self._losing.spawn(self.chat_lost(room), name=f"chat_lost {room}")

    async def chat_lost(self, chat: ChatKey) -> list[str]:
        """This replica no longer holds the lease of ``chat``'s room: let its sessions go.

        Each session's turn is cancelled and its bash processes killed (as ``/stop`` kills
        them), its goal disarmed (the driver drops its jobs), and what this process loaded of
        it (controller, history, plan, worktree, bindings) forgotten, so taking the chat back
        later starts from the store. Nothing is logged or said (disarming asks the front end to
        redraw the goal card once): the log and the chat belong to the replica that holds the
        lease now. Idempotent; returns the sessions let go.
        """
        room = self._bindings.room(chat)
        let_go = self._bindings.sessions_in(room)
        for session_id in let_go:
            await self._let_go(session_id)
        for key, _ in self._bound_keys(room):
            self._forget(key)
        if let_go:
            _log.info("plangate.sessions.chat_lost chat=%s sessions=%s", room, len(let_go))
        return let_go

    def _bound_keys(self, room: ChatKey) -> list[tuple[ChatKey, str]]:
        return [
            (key, sid)
            for sid in self._bindings.sessions_in(room)
            for key in self._bindings.keys_of(sid)
            if self._bindings.room(key) == room
        ]

    async def _let_go(self, session_id: str) -> None:
        await self._agents.drop(session_id)
        await self._goals.disarm(session_id)
        self._plans.forget(session_id)
        self._worktrees.forget(session_id)
        self._choices.forget(session_id)
        self._loaded.discard(session_id)
        self._quiet.discard(session_id)

    async def chat_taken(self, chat: ChatKey) -> list[str]:
        """This replica took the lease of the room ``chat`` with a new epoch: recover its
        sessions as a restart does, and return those loaded.

        The room's bindings are read from the store; each bound session the log marks is
        loaded: a turn the previous owner left open is closed as interrupted (never re-run;
        the chat is told once), a live goal comes up disarmed, an undecided ``/plan`` or
        approval is decided, and an Active checklist no run carries shows paused with Resume
        (its card is redrawn). Nothing is re-armed. Sessions loaded here before are let go
        first, so nothing stale of an earlier hold survives.
        """
        room = chat
        bound: dict[str, list[Chat]] = {}
        for binding in await self.store.chat_bindings():
            if binding.chat.room == room:
                bound.setdefault(binding.session_id, []).append(binding.chat)
        for session_id in self._bindings.sessions_in(room):
            await self._let_go(session_id)
        for key, _ in self._bound_keys(room):
            self._forget(key)
        for session_id, chats in bound.items():
            for one in chats:
                self._remember(one, session_id)
        marked = [sid for sid in await self._log.needs_attention() if sid in bound]
        loaded: list[str] = []
        for session_id in marked:
            try:
                await self.ensure_loaded(session_id)
            except Exception as exc:
                _log.warning(
                    "plangate.sessions.take_failed session=%s %s: %s",
                    session_id,
                    type(exc).__name__,
                    exc,
                )
                continue
            if await self._plans.state(session_id) == "active":
                await self._redraw_plan(session_id)  # the previous owner's card said running
            loaded.append(session_id)
        _log.info("plangate.sessions.chat_taken chat=%s loaded=%s", room, len(loaded))
        return loaded

    # --- loading ----------------------------------------------------------------------------

    async def load_bound(self) -> list[str]:
        """Start-up: learn the bindings and load the bound sessions the log marks.

        Returns the sessions loaded. Every other session loads when its chat next speaks, so
        start-up does not grow with the number of sessions. One broken session must not stop
        the bot: it is logged, skipped, and tried again at its next message.
        """
        bound: set[str] = set()
        for binding in await self.store.chat_bindings():
            if self._bindings.session(binding.chat.key) is None:
                self._remember(binding.chat, binding.session_id)
            bound.add(binding.session_id)
        marked = [sid for sid in await self._log.needs_attention() if sid in bound]
        self._quiet = bound - set(marked) - self._loaded
        loaded: list[str] = []
        for session_id in marked:
            try:
                await self.ensure_loaded(session_id)
            except Exception as exc:
                _log.warning(
                    "plangate.sessions.load_failed session=%s %s: %s",
                    session_id,
                    type(exc).__name__,
                    exc,
                )
                continue
            loaded.append(session_id)
        return loaded

    def is_loaded(self, session_id: str) -> bool:
        """Whether this process has loaded the session (and not let it go since)."""
        return session_id in self._loaded

    async def ensure_loaded(self, session_id: str) -> None:
        """First touch of a session in this process: close what a dead process left open.

        An interrupted turn is never re-run; the chat is told once. A corrupt sidecar that the
        plan store moved aside is reported. A pending ``/plan`` or approval that the dead
        process had logged but not committed is decided now, the same way it would have been.
        """
        if session_id in self._loaded:
            return
        # Marked loaded before the awaits so concurrent first touches do it once; a failure
        # unmarks it, so the next touch tries again.
        self._loaded.add(session_id)
        try:
            await self._load(session_id)
        except BaseException:
            self._loaded.discard(session_id)
            raise

    async def _load(self, session_id: str) -> None:
        quiet = session_id in self._quiet
        self._quiet.discard(session_id)
        interrupted = not quiet and bool(await close_interrupted_turn(self._log, session_id))
        if interrupted:
            await self._notice(session_id, INTERRUPTED_NOTICE)
        await self._approvals.load(session_id)
        await self._goals.on_session_start(session_id)
        await self._goals.get(session_id)  # reads the log: ``goals.peek`` is current from here
        await self._plans.state(session_id)  # loads the sidecar (legacy map, corrupt move)
        # A worktree step a dead process logged but did not finish is finished now.
        await self._worktrees.on_load(session_id)
        for notice in self._plans.take_notices(session_id):
            await self._notice(session_id, notice)
        if not quiet:
            await self._decide_pending(session_id)
        await self._restore_pause(session_id)
        if interrupted:
            # The card still shows the turn as working: redraw it (a checklist left by the
            # dead process is paused now, with Resume; nothing restarts by itself).
            await self._redraw_plan(session_id)

    async def _restore_pause(self, session_id: str) -> None:
        """An Active checklist that no run carries here: its card says why the run stopped
        (the restart, /stop, or the pause the dead process logged), not just "Paused"."""
        controller = self._agents.controller(session_id)
        run = controller.checklist
        if controller.busy or run.armed or run.paused is not None:
            return
        if await self._plans.state(session_id) != "active":
            return
        stored = await self._log.read(session_id, types=("command/run", "run/paused", "turn/end"))
        reason = stopped_reason(s.event for s in stored)
        if reason is not None:
            controller.restore_pause(reason)

    async def _decide_pending(self, session_id: str) -> None:
        stored = await self._log.read(
            session_id, types=("command/run", "plan/mode", "plan/changed")
        )
        events = [s.event for s in stored]
        plans = self._plans
        switch = undecided_command(events, "plan")
        if (
            switch is not None
            and switch.data.get("target") is True
            and await plans.state(session_id) == "none"
        ):
            workspace = await self._workspace_for(session_id)
            await plans.enter_pre_init(session_id, working_directory=str(workspace))
            await self._notice(session_id, PLAN_RESUMED_NOTICE)
        approval = undecided_command(events, "approve")
        revision = approval.data.get("revision") if approval is not None else None
        current = await plans.current(session_id)
        if not isinstance(revision, int) or current is None:
            return
        if await plans.state(session_id) != "post_init":
            return
        if current.revision == revision:
            await self._agents.controller(session_id).request_approval(
                revision=revision, actor=approval.actor if approval else None
            )
        else:
            await self._notice(session_id, STALE_APPROVAL_NOTICE)

    async def _notice(self, session_id: str, text: str) -> None:
        await safe_call("notice", self._channel.notice(session_id, text))


__all__ = [
    "INTERRUPTED_NOTICE",
    "PLAN_RESUMED_NOTICE",
    "STALE_APPROVAL_NOTICE",
    "Sessions",
]
