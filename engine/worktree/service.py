"""A git worktree per approved plan, and what the owner does with it at Done (docs/projects.md).

When a plan goes Active in a project that is a git repository, the service makes a worktree
under ``<home>/worktrees/`` on a new branch ``plangate/<plan-slug>`` from the current HEAD, and
from then on the session's workspace is that worktree (:meth:`Worktrees.workspace_for`: every
tool gets it as ``ToolContext.workspace``). When the plan ends the service commits the
worktree's changes itself (the plan's title is the message) and keeps the diff for the Done
card; the owner then presses Merge (or Push branch), Keep branch or Discard changes.

Every phase change is a ``worktree/change`` event. The git steps of a phase are logged first
as an intent (``creating``, ``merging``, ``pushing``, ``keeping``, ``discarding``) and each step
is idempotent, so a session whose log ends on an intent finishes it on its next load
(:meth:`Worktrees.on_load`) and the repository is left consistent: a worktree is there and
registered, or gone and pruned, never half of either.

A discarded or abandoned plan (``/discard``, ``/new``, ``/project``) never loses work: its
changes are committed and the branch kept, the worktree removed.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Protocol

from engine.events import WorktreeChange
from engine.keys import PersonKey
from engine.plan.service import PlanChange
from engine.plan.types import PlanSidecar
from engine.ports import EventLog
from engine.tasks import safe_call
from engine.text import clip
from engine.tools.workspace import is_within
from engine.worktree.git import IGNORE_SUBMODULES, Git, GitError, GitResult, diff_args
from engine.worktree.script import SETUP_PATH, SetupScript, script_of
from engine.worktree.types import (
    CLOSED,
    DECIDING,
    INTENTS,
    FileStat,
    WorktreeRecord,
    WorktreeView,
)

_log = logging.getLogger("plangate.worktree")

ProjectResolver = Callable[[str], Awaitable[Path]]

# The whole diff is kept for the Done card up to this size; a bigger one is cut (and says so).
MAX_PATCH_BYTES = 8 * 1024 * 1024
_SLUG_CHARS = re.compile(r"[^a-z0-9]+")

_SET_ASIDE = {"discarded": "the plan was discarded", "abandoned": "the session ended"}
FAILED_NOTICE = "The plan's git worktree could not be made ({why}); it works in the project itself."


def plan_slug(title: str, plan_id: str) -> str:
    """``<words of the title>-<8 chars of the plan id>``: a branch and folder name."""
    words = _SLUG_CHARS.sub("-", title.lower()).strip("-")[:40].strip("-")
    return f"{words or 'plan'}-{plan_id[:8]}"


def parse_numstat(text: str) -> list[FileStat]:
    """``git diff --numstat -z`` output as file stats (``-`` counts: a binary file)."""
    stats = []
    for entry in text.split("\0"):
        added, _, rest = entry.partition("\t")
        removed, _, path = rest.partition("\t")
        if not path:
            continue
        stats.append(
            FileStat(
                path=path,
                added=int(added) if added.isdigit() else None,
                removed=int(removed) if removed.isdigit() else None,
            )
        )
    return stats


class NoticeChannel(Protocol):
    """The part of the chat channel the worktrees use (the engine's ``Channel`` has it)."""

    async def notice(self, session_id: str, text: str) -> None:
        """A short system line for the chat."""
        ...


class Worktrees:
    """The worktree of each session's plan: made at approval, decided at Done."""

    def __init__(
        self,
        log: EventLog,
        channel: NoticeChannel,
        *,
        project_for: ProjectResolver,
        root: Path | None,
        remote: str | None = None,
    ) -> None:
        self._log = log
        self._channel = channel
        self._project_for = project_for
        self._root = root.resolve() if root is not None else None
        self.remote = remote
        self._records: dict[str, WorktreeRecord | None] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        # One git step at a time per repository: two topics of one project share its .git and
        # its main checkout (git would refuse the second with "another git process").
        self._repo_locks: dict[str, asyncio.Lock] = {}
        self._confirm: dict[str, str] = {}
        self._patches: dict[str, str] = {}
        # Sessions whose finished plan's branch was decided by this process.
        self._decided: set[str] = set()

    def forget(self, session_id: str) -> None:
        """Drop what this process read of the session's worktree (its chat moved to another
        replica): the next read goes to the log again."""
        self._records.pop(session_id, None)
        self._confirm.pop(session_id, None)
        self._patches.pop(session_id, None)
        self._decided.discard(session_id)

    # --- reads --------------------------------------------------------------------------

    async def record(self, session_id: str) -> WorktreeRecord | None:
        """The session's last worktree record (read from its log once per process)."""
        if session_id not in self._records:
            stored = await self._log.read(session_id, types=("worktree/change",))
            last = stored[-1].event if stored else None
            self._records[session_id] = last.record if isinstance(last, WorktreeChange) else None
        return self._records[session_id]

    def peek(self, session_id: str) -> WorktreeRecord | None:
        """The session's worktree record as this process last read it (no log read)."""
        return self._records.get(session_id)

    async def workspace_for(self, session_id: str) -> Path:
        """The session's workspace now: its plan's worktree while that is live, else its
        project's folder."""
        record = await self.record(session_id)
        if record is not None and record.phase == "live":
            return Path(record.path)
        return await self._project_for(session_id)

    async def project_of(self, session_id: str) -> Path:
        """The session's project folder (the main checkout, never a worktree)."""
        return await self._project_for(session_id)

    async def read_only_roots(self, session_id: str) -> tuple[Path, ...]:
        """What bash sees read-only besides the workspace: a live worktree's repository
        (``.git``: objects, refs, the worktree's own folder), so ``git status`` and
        ``git diff`` work in the sandbox and nothing there can be changed from it."""
        record = await self.record(session_id)
        if record is None or record.phase != "live":
            return ()
        # What the project's setup built (its .venv, node_modules): the plan cannot doctor
        # the environment its checks run in (docs/environments.md).
        built = [Path(record.path) / rel for rel in record.setup_built]
        return (Path(record.project) / ".git", *built)

    async def prompt_note(self, session_id: str) -> str:
        """The prompt's line about a live worktree: what it is and who commits."""
        record = await self.record(session_id)
        if record is None or record.phase != "live":
            return ""
        base = f" (from {record.base})" if record.base else ""
        note = (
            f"This workspace is the approved plan's own git worktree on branch "
            f"{record.branch}{base}. plangate commits your changes when the plan is done and "
            "the owner decides whether to merge them; the repository history is read-only "
            "here: do not git add, commit or switch branches. git status and git diff show "
            "what you changed."
        )
        if record.setup == "ready" and record.setup_built:
            built = ", ".join(record.setup_built[:5])
            note += (
                f" The project's {SETUP_PATH} built its environment here ({built}); it is "
                "read-only to you: use it (its tools, its test runner), do not try to change "
                "it. To add a dependency, change the script or the requirement files and ask "
                "the owner to run /setup."
            )
        return note

    async def view(self, session_id: str) -> WorktreeView | None:
        """What the plan card shows about the session's worktree (``None``: nothing)."""
        record = await self.record(session_id)
        if record is None:
            return None
        patch = ""
        name = ""
        if record.phase in DECIDING:
            patch = await self._patch(session_id, record)
            name = f"plan-{Path(record.path).name or plan_slug(record.title, record.plan_id)}.patch"
        return WorktreeView(
            phase=record.phase,
            plan_id=record.plan_id,
            revision=record.revision,
            branch=record.branch,
            base=record.base,
            files=tuple(record.files),
            conflicts=tuple(record.conflicts),
            message=record.message,
            left_out=tuple(record.left_out),
            push=self.remote is not None,
            confirm_drop=self._confirm.get(session_id) == record.plan_id,
            patch=patch,
            patch_name=name,
            setup=record.setup,
            setup_sha=record.setup_sha,
            setup_note=record.setup_note,
        )

    async def ended_sidecar(self, session_id: str) -> PlanSidecar | None:
        """The finished plan a waiting worktree belongs to (its Done card after a restart),
        or whose branch was decided in this process (the card then says what happened)."""
        record = await self.record(session_id)
        if record is None or record.sidecar is None:
            return None
        if record.phase not in DECIDING and session_id not in self._decided:
            return None
        return PlanSidecar.model_validate(record.sidecar)

    async def deciding(self, session_id: str) -> bool:
        """A finished plan's branch waits for Merge, Keep branch or Discard changes."""
        record = await self.record(session_id)
        return record is not None and record.phase in DECIDING

    # --- the plan's life ------------------------------------------------------------------

    async def on_plan_change(self, change: PlanChange) -> None:
        """Plan listener: Active makes the worktree; the plan's end commits it."""
        session_id = change.session_id
        after, before = change.after, change.before
        if after is not None and after.status == "Active":
            record = await self.record(session_id)
            finished = record is not None and (record.phase in CLOSED or record.phase in DECIDING)
            if record is None or (finished and record.plan_id != after.id):
                await self._start(session_id, after)
        elif after is None and before is not None:
            record = await self.record(session_id)
            # "creating" too: a /discard may land while the worktree is still being made;
            # _finish and set_aside wait for that under the session lock, then act on it.
            if record is None or record.phase not in ("live", "creating"):
                return
            ended = change.archived_sidecar or before
            if change.archived == "completed":
                await self._finish(session_id, ended)
            else:
                reason = _SET_ASIDE.get(change.archived or "", "the plan was discarded")
                await self.set_aside(session_id, reason=reason)

    async def _start(self, session_id: str, sidecar: PlanSidecar) -> None:
        async with self._lock(session_id):
            previous = await self.record(session_id)
            if previous is not None and previous.phase in DECIDING:
                # A new plan while the last one's branch waits: that branch is kept.
                await self._keep_locked(session_id, previous, note="a new plan was approved")
            project = await self._project_for(session_id)
            base = WorktreeRecord(
                phase="in_place",
                plan_id=sidecar.id,
                title=sidecar.title,
                project=str(project),
            )
            why = await self._refusal(project)
            if why is not None:
                await self._append(session_id, base.model_copy(update={"message": why}))
                return
            assert self._root is not None
            main = self._main(project)
            try:
                head = await main.out("rev-parse", "--verify", "-q", "HEAD^{commit}")
            except GitError:
                message = "works in place: the repository has no commit yet"
                await self._append(session_id, base.model_copy(update={"message": message}))
                return
            branch_name = (await main.run("symbolic-ref", "-q", "--short", "HEAD", check=False)).out
            slug = await self._free_slug(main, plan_slug(sidecar.title, sidecar.id))
            path = self._root / project_slug(project) / slug
            record = base.model_copy(
                update={
                    "phase": "creating",
                    "path": str(path),
                    "branch": f"plangate/{slug}",
                    "base": branch_name.strip() or None,
                    "base_commit": head,
                }
            )
            await self._append(session_id, record)
            await self._create_locked(session_id, record)

    async def _create_locked(self, session_id: str, record: WorktreeRecord) -> None:
        """``creating`` -> ``live``: idempotent (a branch or a worktree already made is used)."""
        project = Path(record.project)
        main = self._main(project)
        path = Path(record.path)
        try:
            async with self._repo_lock(project):
                await self._add_worktree(main, record)
        except (GitError, OSError) as exc:
            why = clip(str(exc), 300, one_line=True)
            _log.warning("plangate.worktree.create_failed session=%s %s", session_id, why)
            failed = record.model_copy(
                update={"phase": "failed", "message": f"works in place: {why}"}
            )
            await self._append(session_id, failed)
            await safe_call(
                "notice", self._channel.notice(session_id, FAILED_NOTICE.format(why=why))
            )
            return
        sha = await self._setup_sha(main, record.base_commit)
        update: dict[str, object] = {"phase": "live"}
        if sha and not record.setup:
            update.update(setup="needed", setup_sha=sha)
        await self._append(session_id, record.model_copy(update=update))
        _log.info(
            "plangate.worktree.created session=%s branch=%s path=%s",
            session_id,
            record.branch,
            path,
        )

    async def _add_worktree(self, main: Git, record: WorktreeRecord) -> None:
        """``git worktree add`` unless it is there: a folder git does not know is removed
        first, and an existing branch is checked out rather than made again."""
        path = Path(record.path)
        if await self._registered(main, path):
            return
        if path.exists():
            self._remove_folder(path)
        await main.run("worktree", "prune")
        exists = await main.run(
            "rev-parse", "--verify", "-q", f"refs/heads/{record.branch}", check=False
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        if exists.ok:
            await main.run("worktree", "add", "--quiet", str(path), record.branch)
        else:
            await main.run(
                "worktree",
                "add",
                "--quiet",
                "-b",
                record.branch,
                str(path),
                record.base_commit,
            )

    async def _finish(self, session_id: str, sidecar: PlanSidecar) -> None:
        """The plan completed: commit the worktree, keep the diff, wait for the owner."""
        async with self._lock(session_id):
            record = await self.record(session_id)
            if record is None or record.phase != "live":
                return
            try:
                head, left_out = await self._commit(record, sidecar.title)
                files = await self._numstat(record, head)
            except (GitError, OSError) as exc:
                await self._left_alone(session_id, record, exc)
                return
            done = record.model_copy(
                update={
                    "phase": "done",
                    "plan_id": sidecar.id,
                    "title": sidecar.title,
                    "revision": sidecar.revision,
                    "head": head,
                    "files": files,
                    "left_out": left_out,
                    "sidecar": sidecar.model_dump(mode="json"),
                }
            )
            if not files and head == record.base_commit:
                # Nothing changed: there is nothing to merge, keep or discard.
                await self._remove_locked(done, delete_branch=True)
                await self._append(
                    session_id, done.model_copy(update={"phase": "empty", "message": ""})
                )
                return
            await self._append(session_id, done)

    async def set_aside(
        self, session_id: str, *, reason: str, actor: PersonKey | None = None
    ) -> None:
        """The plan was discarded or abandoned, or the session ends (``/new``): commit what
        the worktree has and keep the branch; the worktree goes. Nothing is lost."""
        async with self._lock(session_id):
            record = await self.record(session_id)
            if record is None or (record.phase != "live" and record.phase not in DECIDING):
                return
            if record.phase == "live":
                try:
                    head, _ = await self._commit(record, record.title or "plangate plan")
                except (GitError, OSError) as exc:
                    await self._left_alone(session_id, record, exc)
                    return
                record = record.model_copy(update={"head": head})
                if head == record.base_commit:
                    await self._append(
                        session_id, record.model_copy(update={"phase": "discarding"})
                    )
                    await self._remove_locked(record, delete_branch=True)
                    await self._append(
                        session_id,
                        record.model_copy(update={"phase": "empty", "message": reason}),
                    )
                    return
            await self._keep_locked(session_id, record, note=reason, actor=actor)

    async def _left_alone(self, session_id: str, record: WorktreeRecord, exc: Exception) -> None:
        """The commit failed: nothing is removed (the work is only in the worktree's files);
        the worktree is left where it is for the owner, and the session goes on without it."""
        why = clip(str(exc), 300, one_line=True)
        _log.warning("plangate.worktree.commit_failed session=%s %s", session_id, why)
        message = f"Could not commit the changes ({why}); they are left in {record.path}."
        await self._append(
            session_id, record.model_copy(update={"phase": "kept", "message": message})
        )
        await safe_call("notice", self._channel.notice(session_id, message))

    async def forked(self, child_id: str) -> None:
        """A fork copied the parent's log: the copy must not share the parent's worktree
        (two sessions in one tree), so it works in the project itself."""
        record = await self.record(child_id)
        if record is None or record.phase in CLOSED:
            return
        message = "works in place: a fork does not share its parent's worktree"
        closed = record.model_copy(update={"phase": "in_place", "message": message, "path": ""})
        await self._append(child_id, closed)

    # --- the owner's decision ---------------------------------------------------------------

    def ask_drop(self, session_id: str, plan_id: str) -> None:
        """Discard changes was pressed: the card asks to confirm (same plan, same revision)."""
        self._confirm[session_id] = plan_id

    def cancel_drop(self, session_id: str) -> None:
        """Cancel on the confirmation: the Done buttons come back."""
        self._confirm.pop(session_id, None)

    def confirming(self, session_id: str, plan_id: str) -> bool:
        """Discard changes was pressed for this plan and not cancelled."""
        return self._confirm.get(session_id) == plan_id

    async def merge(self, session_id: str, *, actor: PersonKey | None) -> str:
        """Merge the branch into the one the plan started from: a fast-forward when it can,
        else a merge commit; a conflict leaves everything as it was and names the files."""
        async with self._lock(session_id):
            record = await self.record(session_id)
            if record is None or record.phase not in DECIDING:
                return "Nothing to merge."
            self._confirm.pop(session_id, None)
            main = self._main(Path(record.project))
            if record.base is None:
                return await self._stay(
                    session_id,
                    record,
                    "The plan started from a detached HEAD: Keep branch, then merge it yourself.",
                )
            on = (await main.run("symbolic-ref", "-q", "--short", "HEAD", check=False)).out.strip()
            if on != record.base:
                return await self._stay(
                    session_id,
                    record,
                    f"The project is on {on or 'a detached HEAD'}, not {record.base}: switch it "
                    f"back, or Keep branch.",
                )
            await self._append(
                session_id, record.model_copy(update={"phase": "merging"}), actor=actor
            )
            return await self._merge_locked(session_id, record, actor=actor)

    async def _merge_locked(
        self,
        session_id: str,
        record: WorktreeRecord,
        *,
        actor: PersonKey | None,
        already: bool = False,
    ) -> str:
        main = self._main(Path(record.project))
        if already or await self._merged(main, record):
            how = "merged"
        else:
            fast = (
                await main.run("merge-base", "--is-ancestor", "HEAD", record.branch, check=False)
            ).ok
            title = clip(record.title or record.branch, 200, one_line=True)
            async with self._repo_lock(Path(record.project)):
                done, files = await self._git_merge(main, record, title)
            if not done.ok:
                if files:
                    shown = ", ".join(files[:10]) + (
                        f" and {len(files) - 10} more" if len(files) > 10 else ""
                    )
                    conflict = record.model_copy(
                        update={
                            "phase": "conflict",
                            "conflicts": files,
                            "message": f"Merge stopped: conflicts in {shown}.",
                        }
                    )
                    await self._append(session_id, conflict, actor=actor)
                    return f"Merge stopped: conflicts in {shown}. The branch is kept as it was."
                why = clip(done.last_line(), 300, one_line=True)
                return await self._stay(session_id, record, f"Merge failed: {why}")
            how = "fast-forwarded" if fast else "merged with a merge commit"
        await self._remove_locked(record, delete_branch=True)
        message = f"{record.branch} {how} into {record.base}."
        await self._append(
            session_id,
            record.model_copy(update={"phase": "merged", "message": message}),
            actor=actor,
        )
        return message

    async def _git_merge(
        self, main: Git, record: WorktreeRecord, title: str
    ) -> tuple[GitResult, list[str]]:
        """``git merge`` in the main checkout; on a failure, the conflicted files (the merge
        is aborted at once, so the checkout is as it was)."""
        done = await main.run(
            "merge",
            "--no-edit",
            "--no-verify",
            "--no-stat",
            "-m",
            f"Merge {record.branch}: {title}",
            record.branch,
            check=False,
        )
        if done.ok:
            return done, []
        listed = await main.run("diff", "--name-only", "--diff-filter=U", "-z", check=False)
        await main.run("merge", "--abort", check=False)
        return done, [f for f in listed.out.split("\0") if f]

    async def push(self, session_id: str, *, actor: PersonKey | None) -> str:
        """Push the branch to ``PLANGATE_GIT_REMOTE``; the worktree goes, the branch stays."""
        async with self._lock(session_id):
            record = await self.record(session_id)
            if record is None or record.phase not in DECIDING or self.remote is None:
                return "Nothing to push."
            self._confirm.pop(session_id, None)
            await self._append(
                session_id, record.model_copy(update={"phase": "pushing"}), actor=actor
            )
            return await self._push_locked(session_id, record, actor=actor)

    async def _push_locked(
        self, session_id: str, record: WorktreeRecord, *, actor: PersonKey | None
    ) -> str:
        assert self.remote is not None
        main = self._main(Path(record.project))
        ref = f"refs/heads/{record.branch}"
        done = await main.run(
            "push",
            "--quiet",
            "--no-verify",
            "--receive-pack=git-receive-pack",
            "--",
            self.remote,
            f"{ref}:{ref}",
            check=False,
            timeout_s=180.0,
        )
        if not done.ok:
            why = clip(done.last_line(), 300, one_line=True)
            return await self._stay(session_id, record, f"Push failed: {why}")
        await self._remove_locked(record, delete_branch=False)
        message = f"{record.branch} pushed to {self.remote}."
        await self._append(
            session_id,
            record.model_copy(update={"phase": "pushed", "message": message}),
            actor=actor,
        )
        return message

    async def keep(self, session_id: str, *, actor: PersonKey | None) -> str:
        """Keep branch: the worktree goes, the branch stays."""
        async with self._lock(session_id):
            record = await self.record(session_id)
            if record is None or record.phase not in DECIDING:
                return "Nothing to keep."
            return await self._keep_locked(session_id, record, actor=actor)

    async def _keep_locked(
        self,
        session_id: str,
        record: WorktreeRecord,
        *,
        note: str = "",
        actor: PersonKey | None = None,
    ) -> str:
        self._confirm.pop(session_id, None)
        await self._append(session_id, record.model_copy(update={"phase": "keeping"}), actor=actor)
        await self._remove_locked(record, delete_branch=False)
        message = f"Branch {record.branch} kept" + (f" ({note})" if note else "") + "."
        await self._append(
            session_id,
            record.model_copy(update={"phase": "kept", "message": message}),
            actor=actor,
        )
        return message

    async def discard(self, session_id: str, *, actor: PersonKey | None) -> str:
        """Discard changes (confirmed): the worktree and the branch go."""
        async with self._lock(session_id):
            record = await self.record(session_id)
            if record is None or record.phase not in DECIDING:
                return "Nothing to discard."
            self._confirm.pop(session_id, None)
            await self._append(
                session_id, record.model_copy(update={"phase": "discarding"}), actor=actor
            )
            await self._remove_locked(record, delete_branch=True)
            message = f"Changes discarded: {record.branch} and its worktree are removed."
            await self._append(
                session_id,
                record.model_copy(update={"phase": "discarded", "message": message}),
                actor=actor,
            )
            return message

    # --- restart ----------------------------------------------------------------------------

    async def on_load(self, session_id: str) -> None:
        """First load of a session: finish an intent a dead process logged."""
        record = await self.record(session_id)
        if record is not None and record.phase == "live" and record.setup == "running":
            # A setup the restart cut off is never run again by itself: the card offers
            # Retry (docs/environments.md).
            await self._append(
                session_id,
                record.model_copy(
                    update={"setup": "failed", "setup_note": "the setup was cut off by a restart"}
                ),
            )
            return
        if record is None or record.phase not in INTENTS:
            return
        _log.info(
            "plangate.worktree.resume session=%s phase=%s branch=%s",
            session_id,
            record.phase,
            record.branch,
        )
        async with self._lock(session_id):
            back = record.model_copy(update={"phase": "done" if record.head else "live"})
            try:
                match record.phase:
                    case "creating":
                        await self._create_locked(session_id, record)
                    case "merging":
                        main = self._main(Path(record.project))
                        branch = await main.run(
                            "rev-parse",
                            "--verify",
                            "-q",
                            f"refs/heads/{record.branch}",
                            check=False,
                        )
                        # Merged (the branch may be deleted already: the cleanup was next).
                        if not branch.ok or await self._merged(main, record):
                            await self._merge_locked(session_id, back, actor=None, already=True)
                        else:
                            # A merge the restart cut off is undone; the owner presses again.
                            await main.run("merge", "--abort", check=False)
                            await self._stay(
                                session_id,
                                back,
                                "The merge was cut off by a restart; "
                                "nothing was merged. Press Merge again.",
                            )
                    case "pushing":
                        await self._push_locked(session_id, back, actor=None)
                    case "keeping":
                        await self._keep_locked(session_id, back)
                    case "discarding":
                        await self._remove_locked(record, delete_branch=True)
                        await self._append(
                            session_id,
                            record.model_copy(
                                update={"phase": "discarded", "message": "Changes discarded."}
                            ),
                        )
            except (GitError, OSError) as exc:
                _log.warning("plangate.worktree.resume_failed session=%s %s", session_id, exc)

    # --- the project's setup (docs/environments.md) ------------------------------------------

    async def _setup_sha(self, main: Git, commit: str) -> str:
        """The SHA-256 of the setup script at ``commit`` ("" when it has none)."""
        script = await self.setup_script(main, commit)
        return script.sha if script is not None else ""

    async def setup_script(self, main: Git, commit: str) -> SetupScript | None:
        """The project's ``.plangate/setup.sh`` as committed at ``commit`` (never the file in
        a worktree, which the plan may have changed)."""
        try:
            found = await main.run("cat-file", "blob", f"{commit}:{SETUP_PATH}", check=False)
        except (GitError, OSError):
            return None
        return script_of(found.out) if found.ok and found.out.strip() else None

    async def project_script(self, project: Path) -> SetupScript | None:
        """The setup script committed at the project's HEAD (``None``: none, or no git)."""
        if not (project / ".git").is_dir():
            return None
        return await self.setup_script(self._main(project), "HEAD")

    async def base_script(self, session_id: str) -> SetupScript | None:
        """The setup script at the live worktree's base commit."""
        record = await self.record(session_id)
        if record is None or record.phase != "live" or not record.setup_sha:
            return None
        return await self.setup_script(self._main(Path(record.project)), record.base_commit)

    async def pristine(self, session_id: str) -> bool:
        """The live worktree is as git checked it out: no change, no untracked or ignored
        file (nothing the plan wrote could shape what a setup run there builds)."""
        record = await self.record(session_id)
        if record is None or record.phase != "live":
            return False
        try:
            found = await (await self._in_tree(record)).run(
                "status",
                "--porcelain",
                "-z",
                "--ignored",
                "--untracked-files=all",
                "--ignore-submodules=all",
                check=False,
            )
        except (GitError, OSError):
            return False
        return found.ok and not found.out.strip("\0")

    async def base_folders(self, session_id: str) -> frozenset[str] | None:
        """The folders (relative, ``"."`` the top) that the live worktree's base commit holds
        files in (``None``: no live worktree, or git could not say)."""
        record = await self.record(session_id)
        if record is None or record.phase != "live":
            return None
        main = self._main(Path(record.project))
        try:
            found = await main.run(
                "ls-tree", "-r", "-z", "--name-only", record.base_commit, check=False
            )
        except (GitError, OSError):
            return None
        if not found.ok:
            return None
        folders = {"."}
        for name in found.out.split("\0"):
            parts = Path(name).parts[:-1]
            folders.update(Path(*parts[: i + 1]).as_posix() for i in range(len(parts)))
        return frozenset(folders)

    async def set_setup(self, session_id: str, **fields: object) -> WorktreeRecord | None:
        """Record the setup's phase in the live worktree's record (``worktree/change``)."""
        async with self._lock(session_id):
            record = await self.record(session_id)
            if record is None or record.phase != "live":
                return None
            changed = record.model_copy(update=fields)
            await self._append(session_id, changed)
            return changed

    # --- git steps ----------------------------------------------------------------------------

    async def _refusal(self, project: Path) -> str | None:
        """Why the project works in place, ``None`` when a worktree can be made."""
        if self._root is None:
            return "works in place: worktrees are off"
        if not (project / ".git").is_dir():
            return "works in place: the project is not a git repository"
        if is_within(self._root, project):
            return "works in place: plangate's home is inside the project"
        try:
            keys = await self._main(project).unsafe()
        except OSError as exc:  # no git on this machine
            return f"works in place: git cannot run here ({type(exc).__name__})"
        if keys:
            return (
                "works in place: the repository's config names programs git would run "
                f"({', '.join(sorted(set(keys))[:3])})"
            )
        return None

    def _main(self, project: Path) -> Git:
        return Git(project / ".git", project, home=self._git_home())

    def _git_home(self) -> Path:
        # An empty folder: nothing for git to read as the user's configuration.
        return (self._root or Path("/nonexistent")) / ".git-home"

    async def _in_tree(self, record: WorktreeRecord) -> Git:
        """Git for the worktree itself, its admin folder found from the main repository (the
        worktree's own ``.git`` file is the agent's to write and is never followed)."""
        project = Path(record.project)
        admin_root = project / ".git" / "worktrees"
        wanted = str(Path(record.path) / ".git")
        for admin in sorted(admin_root.iterdir()) if admin_root.is_dir() else []:
            gitdir = admin / "gitdir"
            try:
                if gitdir.read_text(encoding="utf-8").strip() != wanted:
                    continue
                # git reads the admin folder's commondir and config.worktree too: one that
                # points elsewhere or carries its own config is not the one git made.
                common = admin / (admin / "commondir").read_text(encoding="utf-8").strip()
                if (
                    common.resolve() != (project / ".git").resolve()
                    or (admin / "config.worktree").exists()
                ):
                    raise GitError(f"the worktree {record.path}'s git folder was altered")
                return Git(admin, Path(record.path), home=self._git_home())
            except OSError:
                continue
        raise GitError(f"the worktree {record.path} is not registered in {project}")

    async def _commit(self, record: WorktreeRecord, title: str) -> tuple[str, list[str]]:
        """Commit everything in the worktree (if anything changed) but nested repositories
        and submodules (never entered: their own configuration is the agent's); the new HEAD
        and the nested repositories with something in them, which the branch leaves out."""
        tree = await self._in_tree(record)
        left = await tree.add_all()
        staged = await tree.run(
            "diff", "--cached", "--quiet", "--no-ext-diff", IGNORE_SUBMODULES, check=False
        )
        if staged.code == 1:
            message = clip(title or "plangate plan", 200, one_line=True)
            await tree.run(
                "commit",
                "--quiet",
                "--no-verify",
                "--no-gpg-sign",
                "-m",
                message,
                "-m",
                f"Made by plangate for plan {record.plan_id[:8]}.",
            )
        head = await tree.out("rev-parse", "HEAD")
        return head, [path for path in left if _has_content(Path(record.path) / path)]

    async def _numstat(self, record: WorktreeRecord, head: str) -> list[FileStat]:
        main = self._main(Path(record.project))
        out = await main.run(
            *diff_args("--numstat", "-z", "--no-renames", record.base_commit, head)
        )
        return parse_numstat(out.out)

    async def _patch(self, session_id: str, record: WorktreeRecord) -> str:
        key = f"{session_id}:{record.head}"
        cached = self._patches.get(key)
        if cached is not None:
            return cached
        main = self._main(Path(record.project))
        try:
            done = await main.run(*diff_args("--no-renames", record.base_commit, record.head))
            text = done.out
        except GitError as exc:
            text = f"(the diff could not be read: {exc})\n"
        if len(text.encode("utf-8")) > MAX_PATCH_BYTES:
            text = text.encode("utf-8")[:MAX_PATCH_BYTES].decode("utf-8", "ignore")
            text += "\n(cut: the diff is larger than 8 MB; see the branch)\n"
        # A few at a time (Done cards of several topics redraw in turn); the oldest goes.
        self._patches[key] = text
        while len(self._patches) > 4:
            self._patches.pop(next(iter(self._patches)))
        return text

    async def _registered(self, main: Git, path: Path) -> bool:
        listing = await main.run("worktree", "list", "--porcelain", check=False)
        return f"worktree {path}" in listing.out.splitlines()

    async def _merged(self, main: Git, record: WorktreeRecord) -> bool:
        """The branch's work is already in the base branch (a merge that went through)."""
        if record.base is None or record.head == record.base_commit:
            return False
        exists = await main.run(
            "rev-parse", "--verify", "-q", f"refs/heads/{record.branch}", check=False
        )
        if not exists.ok:
            return False
        base = f"refs/heads/{record.base}"
        return (await main.run("merge-base", "--is-ancestor", record.branch, base, check=False)).ok

    async def _remove_locked(self, record: WorktreeRecord, *, delete_branch: bool) -> None:
        """Remove the worktree (and the branch): each step is idempotent."""
        async with self._repo_lock(Path(record.project)):
            await self._remove_unlocked(record, delete_branch=delete_branch)

    async def _remove_unlocked(self, record: WorktreeRecord, *, delete_branch: bool) -> None:
        main = self._main(Path(record.project))
        path = Path(record.path)
        if record.path and await self._registered(main, path):
            await main.run("worktree", "remove", "--force", "--force", str(path), check=False)
        if record.path and path.exists():
            self._remove_folder(path)
        await main.run("worktree", "prune", check=False)
        if delete_branch and record.branch:
            await main.run("branch", "-D", "--", record.branch, check=False)

    def _remove_folder(self, path: Path) -> None:
        # Only ever a folder under plangate's worktree root.
        if self._root is not None and is_within(path, self._root) and path != self._root:
            shutil.rmtree(path, ignore_errors=True)

    async def _free_slug(self, main: Git, slug: str) -> str:
        candidate, n = slug, 1
        while (
            await main.run(
                "rev-parse", "--verify", "-q", f"refs/heads/plangate/{candidate}", check=False
            )
        ).ok:
            n += 1
            candidate = f"{slug}-{n}"
        return candidate

    # --- plumbing -----------------------------------------------------------------------------

    def _lock(self, session_id: str) -> asyncio.Lock:
        return self._locks.setdefault(session_id, asyncio.Lock())

    def _repo_lock(self, project: Path) -> asyncio.Lock:
        return self._repo_locks.setdefault(str(project), asyncio.Lock())

    async def _stay(self, session_id: str, record: WorktreeRecord, message: str) -> str:
        """The decision did not go through: the worktree waits as before, the card says why."""
        phase = record.phase if record.phase in DECIDING else "done"
        await self._append(
            session_id, record.model_copy(update={"phase": phase, "message": message})
        )
        return message

    async def _append(
        self, session_id: str, record: WorktreeRecord, *, actor: PersonKey | None = None
    ) -> None:
        await self._log.append(session_id, [WorktreeChange(record=record, actor=actor)])
        previous = self._records.get(session_id)
        if previous is not None and previous.phase in DECIDING and record.sidecar is not None:
            self._decided.add(session_id)
        elif record.phase in ("creating", "live", "in_place"):
            self._decided.discard(session_id)  # a new plan: the old Done card is history
        self._records[session_id] = record


def _has_content(folder: Path) -> bool:
    """A nested repository or submodule folder that holds anything (a submodule of the base
    is an empty folder in a fresh worktree: something there is the plan's)."""
    try:
        with os.scandir(folder) as entries:
            return next(entries, None) is not None
    except OSError:
        return False


def project_slug(project: Path) -> str:
    """``<folder name>-<8 hex of its path>``: the project's folder under plangate's home."""
    digest = hashlib.sha256(str(project).encode("utf-8")).hexdigest()[:8]
    return f"{project.name or 'project'}-{digest}"


__all__ = ["MAX_PATCH_BYTES", "Worktrees", "parse_numstat", "plan_slug", "project_slug"]
