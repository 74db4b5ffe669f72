"""The project's own environment in a plan's worktree: its setup script (docs/environments.md).

A project declares its environment in a committed ``.plangate/setup.sh``. When a plan goes
Active in a git worktree, the worktree service reads the script from the plan's base commit
(``WorktreeRecord.setup_sha``); before the first step of the approved run, :class:`EnvSetup`
runs that exact text in the worktree, in the sandbox, with the network on, the worktree
writable, the project's package caches mounted (and nothing else of plangate's home), and its
own timeout. What the run built (the new paths: ``.venv``, ``node_modules``, an egg-info) is
then a read-only root of every later bash call and check of the plan, so the plan cannot make
its checks pass by editing the installed test runner.

Consent is to the script's exact text, remembered per project by its SHA-256
(:class:`SetupConsent`): approving a plan whose review card named the script (and its hash)
consents to it; a script the owner never saw asks once, with the whole text, in an attended
run; a goal round is never asked for it (the goal blocks ``needs-approval``, naming it).
Outside a plan (a project that is no git repository, the main checkout), setup runs only on
the owner's ``/setup``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import shutil
import stat
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from engine.approval.policy import ApprovalView
from engine.approval.service import ToolApprovals
from engine.events import GoalRoundSource, MessageSource, is_attended
from engine.plan.service import PlanChange
from engine.ports import Channel
from engine.tasks import safe_call
from engine.text import clip
from engine.tools.bash import BashTool, CommandRun
from engine.tools.workspace import open_regular, read_regular
from engine.worktree.script import MAX_SCRIPT_CHARS, SETUP_PATH, SetupScript, script_of
from engine.worktree.service import Worktrees, project_slug

_log = logging.getLogger("plangate.environments")

DEFAULT_SETUP_TIMEOUT_S = 15 * 60.0
# What a failed run's note keeps of its output (the card's lines).
NOTE_LINES = 15
NOTE_CHARS = 1500
# At most this many built paths are made read-only (a setup making more is unusual).
MAX_BUILT = 200
# Folders never counted as built: git's own, and caches any tool run leaves behind.
_NOT_BUILT = frozenset({".git", "__pycache__", ".pytest_cache"})

# The goal's blocked code when a goal round holds: consent is the owner's to give; a failed
# run needs the owner to look (Resume runs it again).
HoldCode = Literal["needs-approval", "no-progress"]


@dataclass(frozen=True, slots=True)
class SetupHold:
    """Why the run cannot start its work: the card's line, the failure's tail, the goal's
    blocked code, and the failure in a few words."""

    code: HoldCode
    text: str
    evidence: str = ""
    why: str = ""


def _hold_of(ran: CommandRun) -> SetupHold | None:
    """How a setup run ended, as a hold (``None``: it succeeded)."""
    if ran.problem is not None:
        why, tail = ran.problem, ""
    elif ran.timed_out:
        why, tail = f"timed out after {ran.timeout_s:g}s", note_of(ran.output)
    elif ran.exit_code != 0:
        why, tail = f"exit code {ran.exit_code}", note_of(ran.output)
    else:
        return None
    short = clip(why, 120, one_line=True)
    return SetupHold(
        "no-progress", f"Setup failed ({short}): Retry runs it again", evidence=tail, why=why
    )


def read_script(folder: Path) -> SetupScript | None:
    """The setup script on disk in ``folder`` (``None``: none, or not a regular file).
    Blocking: a thread."""
    path = folder / SETUP_PATH
    try:
        if path.is_symlink() or not path.is_file():
            return None
        # The agent writes this file in NoPlan (a sparse file of any size costs it nothing):
        # read no more than a script plangate would run can hold (4 bytes a character at
        # most), so a longer one reads as longer than MAX_SCRIPT_CHARS and is refused; and
        # non-blocking (a FIFO swapped in since the check is not waited on).
        data = read_regular(path, max_bytes=MAX_SCRIPT_CHARS * 4 + 1)
    except OSError:
        return None
    if data is None:
        return None
    text = data.decode("utf-8", errors="replace")
    return script_of(text) if text.strip() else None


# A file whose inode changed this long ago is read again only when its inode changes: a write
# in the same clock tick as the read could leave the inode's times as they were.
_SETTLED_NS = 2_000_000_000
_MAX_CACHED = 256


class ScriptCache:
    """:func:`read_script` for ``/status``, which asks at every call: one ``lstat`` on the
    loop says "no script" (no thread hop) or, when the file's inode is the one read before,
    gives the script read then; anything else is read in a thread, as before."""

    def __init__(self) -> None:
        self._known: dict[Path, tuple[tuple[int, ...], SetupScript | None]] = {}

    async def read(self, folder: Path) -> SetupScript | None:
        """The setup script on disk in ``folder`` now (what :func:`read_script` returns)."""
        path = folder / SETUP_PATH
        try:
            st = os.lstat(path)
        except OSError:
            return None  # read_script: no file (or none it can see) is no script
        if not stat.S_ISREG(st.st_mode):
            return None  # a symlink, a folder or a FIFO is never run
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        known = self._known.get(path)
        if known is not None and known[0] == key:
            return known[1]
        script = await asyncio.to_thread(read_script, folder)
        if time.time_ns() - st.st_ctime_ns > _SETTLED_NS:
            if len(self._known) >= _MAX_CACHED:
                self._known.clear()
            self._known[path] = (key, script)
        return script


class SetupConsent:
    """Which setup scripts each project's owner consented to, by SHA-256 (a JSON file in
    plangate's home; in memory without one)."""

    def __init__(self, path: Path | None) -> None:
        self._path = path
        self._memory: dict[str, list[str]] = {}

    def _read(self) -> dict[str, list[str]]:
        if self._path is None:
            return self._memory
        try:
            data = json.loads(self._path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def allowed(self, project: Path, sha: str) -> bool:
        """The owner consented to the script with this hash for ``project``."""
        return sha in self._read().get(str(project), [])

    def allow(self, project: Path, sha: str) -> None:
        """Remember consent to the script with this hash for ``project``."""
        data = self._read()
        known = data.setdefault(str(project), [])
        if sha in known:
            return
        known.append(sha)
        if self._path is None:
            return
        self._path.parent.mkdir(parents=True, exist_ok=True)
        temp = self._path.with_name(f".{self._path.name}.{uuid.uuid4().hex[:8]}")
        temp.write_text(json.dumps(data, indent=1), encoding="utf-8")
        os.replace(temp, self._path)


def note_of(text: str) -> str:
    """The last lines of a run's output, for the card."""
    kept = "\n".join(text.rstrip().split("\n")[-NOTE_LINES:])
    return kept if len(kept) <= NOTE_CHARS else "…" + kept[-(NOTE_CHARS - 1) :]


# Files whose text decides what a setup installs, besides the script: a copy of what a setup
# built is reused only while all of them (at the worktree's top) are byte for byte the same.
DEPENDENCY_FILES = (
    "pyproject.toml",
    "setup.cfg",
    "setup.py",
    "package.json",
    "package-lock.json",
    "npm-shrinkwrap.json",
    "yarn.lock",
    "pnpm-lock.yaml",
    "uv.lock",
    "poetry.lock",
    "Pipfile.lock",
    "go.mod",
    "go.sum",
    "Cargo.toml",
    "Cargo.lock",
)
# Copies of built environments kept per project (the newest ones), and the free space a copy
# must leave behind it.
KEEP_COPIES = 2
# A built file larger than this is not searched for the old worktree's path.
MAX_REWRITE_BYTES = 16 * 1024 * 1024
# A dependency file larger than this is no real one: no copy is keyed on it.
MAX_DEPENDENCY_BYTES = 64 * 1024 * 1024
COPY_ROOM = 1024 * 1024 * 1024


def environment_key(workspace: Path, script: SetupScript) -> str:
    """What a built environment depends on: the script and the dependency files (their
    names and bytes, ``requirements*.txt`` too); "" (no copy kept or reused) when one is
    larger than any real one. Blocking: a thread."""
    digest = hashlib.sha256(script.sha.encode())
    names = [*DEPENDENCY_FILES, *sorted(p.name for p in workspace.glob("requirements*.txt"))]
    for name in names:
        path = workspace / name
        # The plan writes these files in its worktree before the owner's /setup: only a
        # regular file, opened non-blocking (a FIFO is never waited on), read in pieces and
        # never more than MAX_DEPENDENCY_BYTES (a sparse file is free).
        handle = open_regular(path)
        if handle is None:
            continue
        digest.update(f"\0{name}\0".encode())
        read = 0
        with handle:
            while chunk := handle.read(1024 * 1024):
                read += len(chunk)
                if read > MAX_DEPENDENCY_BYTES:
                    return ""
                digest.update(chunk)
    return digest.hexdigest()[:32]


def save_copy(folder: Path, workspace: Path, built: list[str]) -> None:
    """Keep a copy of what a setup built in ``workspace`` (plangate's home, never seen by a
    plan), for the next worktree with the same key. Blocking: a thread."""
    if folder.exists() or not built:
        return
    # A copy is an optimisation: it is never kept where it would eat into the room the disk
    # has left (the reserve for plangate's own writes among it: engine/tools/disk.py).
    size = sum(_size(workspace / rel) for rel in built)
    folder.parent.mkdir(parents=True, exist_ok=True)
    if shutil.disk_usage(folder.parent).free < 2 * size + COPY_ROOM:
        _log.info("plangate.environments.copy_not_kept low disk, %d bytes built", size)
        return
    temp = folder.with_name(f".{folder.name}.{uuid.uuid4().hex[:8]}")
    try:
        for rel in built:
            source, target = workspace / rel, temp / "tree" / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir() and not source.is_symlink():
                shutil.copytree(source, target, symlinks=True)
            else:
                shutil.copy2(source, target, follow_symlinks=False)
        (temp / "built.json").write_text(json.dumps({"path": str(workspace), "built": built}))
        os.replace(temp, folder)
    except OSError as exc:
        _log.info("plangate.environments.copy_not_kept %s", exc)
        shutil.rmtree(temp, ignore_errors=True)
        return
    copies = sorted(
        (p for p in folder.parent.iterdir() if not p.name.startswith(".")),
        key=lambda p: p.stat().st_mtime,
    )
    for old in copies[:-KEEP_COPIES]:
        shutil.rmtree(old, ignore_errors=True)


def _size(path: Path) -> int:
    """Bytes under ``path`` (links not followed)."""
    if path.is_symlink() or not path.is_dir():
        return path.lstat().st_size if path.exists() or path.is_symlink() else 0
    total = 0
    for current, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += (Path(current) / name).lstat().st_size
    return total


def restore_copy(folder: Path, workspace: Path) -> list[str] | None:
    """Put a kept copy into ``workspace``, its old worktree's path rewritten to this one in
    the text files that name it (scripts' first lines, ``.pth`` files, records); the built
    paths, or ``None`` when there is no usable copy. Blocking: a thread."""
    try:
        meta = json.loads((folder / "built.json").read_text())
        old, built = str(meta["path"]), [str(rel) for rel in meta["built"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if any(Path(rel).is_absolute() or ".." in Path(rel).parts for rel in built):
        return None
    new = str(workspace)
    root = Path(os.path.realpath(workspace))
    for rel in built:
        target = workspace / rel
        if target.exists() or target.is_symlink():
            return None  # the worktree has it already: run the script instead
        # The key is blind to a folder the worktree's commit made a symlink (the agent can
        # commit in NoPlan): plangate would write through it on the host. Checked for every
        # path before anything is copied, so a refusal leaves nothing half-restored.
        if Path(os.path.realpath(target.parent)) != root / Path(rel).parent:
            return None
    for rel in built:
        source, target = folder / "tree" / rel, workspace / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir() and not source.is_symlink():
            shutil.copytree(source, target, symlinks=True)
        else:
            shutil.copy2(source, target, follow_symlinks=False)
        for path in [target] if target.is_file() else target.rglob("*"):
            _rewrite(path, old.encode(), new.encode())
    return built


def _rewrite(path: Path, old: bytes, new: bytes) -> None:
    if path.is_symlink() or not path.is_file() or path.suffix == ".pyc":
        return
    try:
        # The files that name a worktree (scripts, .pth files, records) are small; a large
        # one (a sparse file the project's install code left) is never read whole.
        if path.stat().st_size > MAX_REWRITE_BYTES:
            return
        data = path.read_bytes()
    except OSError:
        return
    if old in data and b"\0" not in data[:8192]:
        path.write_bytes(data.replace(old, new))


def _entries(root: Path) -> set[str]:
    """Every path under ``root`` (relative), git's folder left out. Blocking: a thread."""
    found: set[str] = set()
    for current, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".git"]
        base = Path(current).relative_to(root)
        for name in [*dirs, *files]:
            found.add((base / name).as_posix())
    return found


def _owned(built: list[str], tracked: frozenset[str] | None) -> list[str]:
    """``built`` with each path replaced by its topmost ancestor that the base commit holds
    no files in: a folder the plan made before setup ran (``.venv/site``, made in the owner's
    turn while a failed setup waited for Retry) and that setup then filled is what setup
    built, whole, or the plan could add a ``.pth`` or ``sitecustomize.py`` beside the
    installed test runner afterwards."""
    if tracked is None:
        return built
    owned = set()
    for rel in built:
        parts = Path(rel).parts
        top = next(
            (
                Path(*parts[: i + 1]).as_posix()
                for i in range(len(parts) - 1)
                if Path(*parts[: i + 1]).as_posix() not in tracked
            ),
            rel,
        )
        owned.add(top)
    return sorted(owned)


def _built(root: Path, before: set[str]) -> list[str]:
    """The topmost paths under ``root`` that were not there ``before`` (what setup made).
    Blocking: a thread."""
    built: list[str] = []
    for current, dirs, files in os.walk(root):
        base = Path(current).relative_to(root)
        keep = []
        for name in sorted(dirs):
            rel = (base / name).as_posix()
            if name in _NOT_BUILT:
                continue
            if rel not in before:
                built.append(rel)  # new: all of it was built, no need to look inside
            else:
                keep.append(name)
        dirs[:] = keep
        built.extend(
            (base / name).as_posix()
            for name in sorted(files)
            if (base / name).as_posix() not in before
        )
        if len(built) > MAX_BUILT:
            break
    return sorted(built)[:MAX_BUILT]


class EnvSetup:
    """Runs each live worktree's setup once, before its plan's first step; asks consent."""

    def __init__(
        self,
        worktrees: Worktrees,
        bash: BashTool,
        channel: Channel,
        *,
        root: Path | None,
        approvals: ToolApprovals | None = None,
        timeout_s: float = DEFAULT_SETUP_TIMEOUT_S,
    ) -> None:
        self._worktrees = worktrees
        self._bash = bash
        self._channel = channel
        self._root = root
        self._approvals = approvals
        self.timeout_s = timeout_s
        self.consent = SetupConsent(root / "consent.json" if root is not None else None)
        # The script each session's review card named last (its hash): approving that plan
        # consents to exactly that text.
        self._shown: dict[str, str] = {}
        self._running: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._scripts = ScriptCache()

    # --- what the cards show --------------------------------------------------------------

    async def review_script(self, session_id: str, project: Path) -> SetupScript | None:
        """The script a plan of ``project`` would run (its HEAD's), remembered as shown to
        the approver of this session's plan."""
        script = await self._worktrees.project_script(project)
        if script is None:
            self._shown.pop(session_id, None)
        else:
            self._shown[session_id] = script.sha
        return script

    def caches(self, project: Path) -> Path | None:
        """The project's package caches in plangate's home (``None``: no home)."""
        if self._root is None:
            return None
        return self._root / "caches" / project_slug(project)

    # --- consent at approval ----------------------------------------------------------------

    async def on_plan_change(self, change: PlanChange) -> None:
        """Plan listener (after the worktree service's): an approval of a plan whose review
        card named the script its worktree was made with is consent to that script."""
        after, before = change.after, change.before
        if after is None or after.status != "Active" or not after.approved_at:
            return
        if before is not None and before.approved_at == after.approved_at:
            return  # not an approval: a task moved
        record = await self._worktrees.record(change.session_id)
        if record is None or record.phase != "live" or not record.setup_sha:
            return
        if self._shown.get(change.session_id) == record.setup_sha:
            self.consent.allow(Path(record.project), record.setup_sha)

    # --- before the run's first step --------------------------------------------------------

    async def prepare(self, session_id: str, source: MessageSource) -> SetupHold | None:
        """Run the live worktree's setup if it has not run; ``None`` when the work may go on.

        A script without consent is asked about (the whole text, one approval message) in a
        run a person started; a goal round holds with ``needs-approval`` instead."""
        record = await self._worktrees.record(session_id)
        if record is None or record.phase != "live" or record.setup in ("", "ready"):
            return None
        if session_id in self._running:
            # The owner's /setup is running in this worktree: the work waits for it.
            return SetupHold("no-progress", "The setup is running (/setup): Resume when it ends")
        script = await self._worktrees.base_script(session_id)
        if script is None or script.sha != record.setup_sha:
            # The base commit no longer has the script git had (history rewritten): nothing
            # the owner consented to can be run.
            await self._worktrees.set_setup(session_id, setup="")
            return None
        project = Path(record.project)
        if not self.consent.allowed(project, script.sha):
            hold = await self._ask(session_id, source, script, project)
            if hold is not None:
                return hold
        return await self._run(session_id, Path(record.path), project, script)

    async def _ask(
        self, session_id: str, source: MessageSource, script: SetupScript, project: Path
    ) -> SetupHold | None:
        """Ask the owner to consent to ``script`` (``None``: they did)."""
        unasked = SetupHold(
            "needs-approval",
            f"{script.label} needs your approval before it runs: /setup shows it",
        )
        if isinstance(source, GoalRoundSource) or not is_attended(source):
            return unasked
        if self._approvals is None:
            return unasked
        decided = await self._approvals.request(session_id, self._view(script))
        if decided not in ("once", "session"):
            return SetupHold(
                "needs-approval",
                f"{script.label} was not approved; Retry asks again",
            )
        self.consent.allow(project, script.sha)
        return None

    # --- /setup: the owner asks ------------------------------------------------------------

    async def describe(self, session_id: str, workspace: Path) -> str:
        """One line for ``/status`` and ``/project``: the project's script and its state."""
        record = await self._worktrees.record(session_id)
        live = record is not None and record.phase == "live"
        script = await self._scripts.read(workspace)
        if script is None:
            return f"Setup: no {SETUP_PATH}"
        project = Path(record.project) if live and record is not None else workspace
        consent = "approved" if self.consent.allowed(project, script.sha) else "not approved yet"
        state = ""
        if live and record is not None and record.setup:
            state = {
                "needed": ", not run yet",
                "running": ", running now",
                "ready": ", ran in the plan's worktree",
                "failed": ", failed: Retry on the plan card runs it again",
            }.get(record.setup, "")
        return f"Setup: {script.label} ({consent}{state})"

    async def owner_setup(self, session_id: str, workspace: Path) -> str:
        """``/setup``: run the script on disk in ``workspace`` (the project itself, or the
        live plan's worktree, whose script the plan may have changed) after one approval
        message showing the whole text (unless that text was approved before). Runs in the
        background; the reply says what happens, a notice says how it ended."""
        await self._worktrees.record(session_id)  # loaded, so peek() below knows it
        script = await asyncio.to_thread(read_script, workspace)
        if script is None:
            return f"This project has no {SETUP_PATH} (docs/environments.md says what it holds)."
        if session_id in self._running:
            return "The setup is running already."
        if len(script.text) > MAX_SCRIPT_CHARS:
            return f"{SETUP_PATH} is longer than {MAX_SCRIPT_CHARS} characters: it is not run."
        task = asyncio.create_task(self._owner_run(session_id, workspace, script))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if self._consented(session_id, workspace, script):
            return f"Running {script.label} in {workspace.name}."
        return f"{script.label}: approve it below to run it."

    def _consented(self, session_id: str, workspace: Path, script: SetupScript) -> bool:
        return self.consent.allowed(self._project_path(session_id, workspace), script.sha)

    def _project_path(self, session_id: str, workspace: Path) -> Path:
        record = self._worktrees.peek(session_id)
        if record is not None and record.phase == "live" and Path(record.path) == workspace:
            return Path(record.project)
        return workspace

    async def _owner_run(self, session_id: str, workspace: Path, script: SetupScript) -> None:
        project = self._project_path(session_id, workspace)
        try:
            if not self.consent.allowed(project, script.sha) and self._approvals is not None:
                decided = await self._approvals.request(session_id, self._view(script))
                if decided not in ("once", "session"):
                    await safe_call(
                        "notice",
                        self._channel.notice(session_id, f"{script.label} was not run."),
                    )
                    return
                self.consent.allow(project, script.sha)
            live = project != workspace
            record = self._worktrees.peek(session_id)
            if live and record is not None:
                # The plan's worktree: what the last setup built is writable while the new
                # one runs, then read-only again with whatever this run adds. (The record
                # keeps the base commit's script: Retry runs that one.)
                earlier = list(record.setup_built)
                await self._worktrees.set_setup(session_id, setup="needed", setup_built=[])
                hold = await self._run(session_id, workspace, project, script, keep=earlier)
            else:
                hold = await self._run_in_place(session_id, workspace, project, script)
            text = hold.text if hold is not None else f"{script.label} ran: exit code 0."
            if hold is not None and hold.evidence:
                text += "\n" + hold.evidence
            await safe_call("notice", self._channel.notice(session_id, text))
        except Exception as exc:  # a background run: say it, never raise into nothing
            _log.warning("plangate.environments.owner_failed %s: %s", type(exc).__name__, exc)

    async def _run_in_place(
        self, session_id: str, workspace: Path, project: Path, script: SetupScript
    ) -> SetupHold | None:
        """The owner's own folder: the script runs there; nothing is made read-only (the
        folder is the owner's, and NoPlan writes it anyway). No shared package cache is
        mounted: NoPlan bash writes this folder, so code the agent left here runs with the
        network, and it must not reach what the next plan's setup installs from."""
        self._running.add(session_id)
        try:
            ran = await self._bash.run_setup(
                script.text,
                session_id=session_id,
                workspace=workspace,
                timeout_s=self.timeout_s,
                caches=None,
            )
        finally:
            self._running.discard(session_id)
        return _hold_of(ran)

    def _view(self, script: SetupScript) -> ApprovalView:
        return ApprovalView(
            request_id=uuid.uuid4().hex,
            call_id=f"setup:{script.short}",
            tool="setup",
            command=f"{script.label}, with the network:\n{script.text}",
            rule=None,
            why="network",
        )

    def running(self, session_id: str) -> bool:
        """A setup of this session is running now."""
        return session_id in self._running

    async def _run(
        self,
        session_id: str,
        workspace: Path,
        project: Path,
        script: SetupScript,
        *,
        keep: Sequence[str] = (),
    ) -> SetupHold | None:
        """Run ``script`` in the worktree (or put in a kept copy of its build); ``keep``: what
        an earlier setup built there, read-only again afterwards whatever this run does."""
        if len(script.text) > MAX_SCRIPT_CHARS:
            note = f"{SETUP_PATH} is longer than {MAX_SCRIPT_CHARS} characters"
            await self._worktrees.set_setup(session_id, setup="failed", setup_note=note)
            return SetupHold("no-progress", f"Setup failed: {note}")
        await self._worktrees.set_setup(session_id, setup="running", setup_note="")
        self._running.add(session_id)
        await safe_call("plan_changed", self._channel.plan_changed(session_id))
        copy = await self._copy_folder(project, workspace, script)
        if copy is not None:
            reused = await asyncio.to_thread(restore_copy, copy, workspace)
            if reused is not None:
                self._running.discard(session_id)
                _log.info(
                    "plangate.environments.reused session=%s built=%d", session_id, len(reused)
                )
                await self._worktrees.set_setup(
                    session_id, setup="ready", setup_note="", setup_built=reused
                )
                return None
        # A copy is kept only of a build in a worktree nothing has touched yet: after the
        # plan's own turns (Retry after a failed setup, /setup later) its edits to files the
        # key does not cover (an npm postinstall script, a build backend) shape what is built,
        # and the next plan with the same key would get that.
        # The package caches are shared the same way (the next plan's setup installs from
        # them), so such a run gets none: it downloads what it needs.
        fresh = not keep and await self._worktrees.pristine(session_id)
        if not fresh:
            copy = None
        ran: CommandRun | None = None
        try:
            before = await asyncio.to_thread(_entries, workspace)
            ran = await self._bash.run_setup(
                script.text,
                session_id=session_id,
                workspace=workspace,
                timeout_s=self.timeout_s,
                caches=self._cache_folder(project) if fresh else None,
            )
            made = await asyncio.to_thread(_built, workspace, before)
            tracked = await self._worktrees.base_folders(session_id)
            built = sorted({*keep, *_owned(made, tracked)})
        finally:
            self._running.discard(session_id)
            if ran is None:  # stopped or failed to start: never left "running"
                await self._worktrees.set_setup(
                    session_id, setup="failed", setup_note="the setup was stopped"
                )
        ok = _hold_of(ran) is None
        _log.info(
            "plangate.environments.setup session=%s exit=%s timed_out=%s built=%d",
            session_id,
            ran.exit_code,
            ran.timed_out,
            len(built),
        )
        if ok:
            if copy is not None:
                # Kept before the plan's first step: nothing the plan does reaches it.
                try:
                    await asyncio.to_thread(save_copy, copy, workspace, built)
                except OSError as exc:  # only an optimisation: the plan goes on without it
                    _log.info("plangate.environments.copy_not_kept %s", exc)
            await self._worktrees.set_setup(
                session_id, setup="ready", setup_note="", setup_built=built
            )
            return None
        hold = _hold_of(ran)
        assert hold is not None
        note = f"{hold.why}\n{hold.evidence}".strip()
        await self._worktrees.set_setup(session_id, setup="failed", setup_note=note)
        return hold

    async def _copy_folder(
        self, project: Path, workspace: Path, script: SetupScript
    ) -> Path | None:
        """Where a copy of what this script builds in this worktree is kept (``None``: no
        home to keep it in)."""
        if self._root is None:
            return None
        key = await asyncio.to_thread(environment_key, workspace, script)
        if not key:
            return None
        return self._root / "built" / project_slug(project) / key

    def _cache_folder(self, project: Path) -> Path | None:
        folder = self.caches(project)
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
        return folder


__all__ = [
    "DEFAULT_SETUP_TIMEOUT_S",
    "EnvSetup",
    "SetupConsent",
    "SetupHold",
    "note_of",
    "read_script",
    "script_of",
]
