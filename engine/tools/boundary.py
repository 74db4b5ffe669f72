"""The boundary: the one object that decides what the agent may see, write and run.

Every tool call gets a :class:`Boundary`, built by :meth:`BoundaryPolicy.for_call` from the
session's workspace, the plan phase, the hidden paths, the extra read-only roots and the
limits. ``read_file``, ``list_files``, ``grep``, ``write_file``, ``edit_file`` and ``bash`` ask
it, and so must any tool added later; none decides alone. The path checks of the file tools
and the mounts of bash's sandbox are made from the same fields (docs/security.md).

Its data:

- ``workspace``: the session's folder (a git worktree is just that), resolved. ``writable``
  says whether the phase lets it change: read-only before ``plan init`` and while the plan is
  designed, writable in NoPlan and Active.
- ``read_only``: extra roots the agent may read but never write (an upload inbox), mounted
  read-only for bash.
- ``hidden``: never visible, in any phase: plangate's home (database, plan folders, sessions),
  the settings file, files the settings name as secret, the session's plan folder. A hidden
  path that strictly contains a root (a workspace that lives under the home) does not hide
  that root; everything else in it stays hidden, and a hidden path inside a root is hidden.
- ``plan_md``: the session's plan ``.md``, the one file of the plan folder the file tools may
  read and write (the plan gate decides when); bash never sees it.
- ``network``: whether bash gets the network for this call (off unless the settings or an
  approved call say so: :meth:`Boundary.with_network`).
- ``settings``: the limits (memory, processes, the tmpfs sizes derived from memory) and the
  sandbox options (:class:`~engine.tools.sandbox.SandboxSettings`).

Its questions:

- :meth:`Boundary.readable` / :meth:`Boundary.writable_path`: resolve a tool's path argument
  (symlinks and ``..`` first) or raise a :class:`~engine.tools.workspace.OutsideWorkspace`
  (:class:`NotVisible` for hidden paths, :class:`ReadOnlyPath` for a write the phase or a
  read-only root forbids); the exception's ``result_text`` is the model's answer.
- :meth:`Boundary.visible`: for walks (``list_files``, ``grep``): a hidden entry is simply
  absent. :meth:`Boundary.search_scope` hands the same data to grep's child process.
- :meth:`Boundary.bwrap_argv`: bash's sandbox command line from the same fields.
- :meth:`BoundaryPolicy.refuse_hidden`: the tool runtime's check of any tool's path argument
  (``path``, ``file_path`` and the ones a tool declares) before the gate, and
  :meth:`BoundaryPolicy.refuse_write` of the paths a tool declares it writes, after the gate:
  a new tool that declares its path arguments is covered (engine.tools.effects).

Use from a tool::

    boundary = await policy.for_call(ctx)
    path = boundary.readable(raw)          # or writable_path(raw); raises OutsideWorkspace
    argv = boundary.with_network(True).bwrap_argv(command)  # an approved networked call
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from engine.tools.base import ToolContext
from engine.tools.plan_view import PlanGateView
from engine.tools.sandbox import SandboxSettings, bwrap_argv
from engine.tools.search import path_visible
from engine.tools.workspace import OutsideWorkspace, is_within, real_path, resolve_path

# The plan state and the session .md at the moment of a call (NoPlan when not given).
PlanViewSource = Callable[[str], Awaitable[PlanGateView]]
# The session's plan .md alone, for tools built without a plan view (tests, the demo).
MdSource = Callable[[str], Awaitable[Path | None]]
# Resolving a path follows links (file system calls): its own two threads, so a busy default
# pool never holds up the check, and a slow disk never holds up the event loop.
_PATHS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="plangate-paths")
# The argument names that carry a path in any tool (the runtime adds what a tool declares).
PATH_ARGUMENTS = ("path", "file_path")
# Extra read-only roots of a session (an upload inbox), asked at each call.
ReadOnlyRoots = Callable[[str], Awaitable[Sequence[Path]]]


class NotVisible(OutsideWorkspace):
    """A path the boundary hides: plangate's own files and the secrets."""

    def result_text(self, workspace: Path) -> str:
        return (
            f"refused: {self.raw!r} is not visible to the agent: plangate's home, its plan "
            "files, the settings file and the files named secret are kept out of every tool"
        )


class ReadOnlyPath(OutsideWorkspace):
    """A write to a path that may be read but not written now (the phase, a read-only root)."""

    def __init__(self, raw: str, resolved: Path, why: str) -> None:
        super().__init__(raw, resolved)
        self.why = why

    def result_text(self, workspace: Path) -> str:
        return f"refused: {self.raw!r} cannot be written: {self.why}"


@dataclass(frozen=True, slots=True)
class Boundary:
    """What one tool call may see, write and run; see the module docstring."""

    workspace: Path
    writable: bool
    hidden: tuple[Path, ...] = ()
    read_only: tuple[Path, ...] = ()
    plan_md: Path | None = None
    network: bool = False
    settings: SandboxSettings = dataclasses.field(default_factory=SandboxSettings)
    # (host folder, path inside) mounted writable for this run only: a setup run's package
    # caches (docs/environments.md). Never set for the agent's own calls or the checks.
    binds: tuple[tuple[Path, str], ...] = ()

    @classmethod
    def build(
        cls,
        workspace: Path,
        *,
        writable: bool,
        settings: SandboxSettings | None = None,
        hidden: Sequence[Path] = (),
        read_only: Sequence[Path] = (),
        plan_md: Path | None = None,
    ) -> Boundary:
        """A boundary with every path resolved; ``hidden`` adds to the settings' own."""
        settings = settings or SandboxSettings()
        named = [workspace / name for name in settings.hidden_names]
        every = [*settings.hidden, *named, *hidden]
        return cls(
            workspace=real_path(workspace),
            writable=writable,
            hidden=tuple(dict.fromkeys(real_path(p) for p in every)),
            read_only=tuple(dict.fromkeys(real_path(p) for p in read_only)),
            plan_md=real_path(plan_md) if plan_md is not None else None,
            network=settings.network,
            settings=settings,
        )

    def with_network(self, on: bool) -> Boundary:
        """This boundary with the network on or off for bash (an approved networked call)."""
        return dataclasses.replace(self, network=on)

    def for_check(self, hidden: Sequence[Path] = ()) -> Boundary:
        """A check's boundary (docs/checks.md): the workspace read-only, the network off,
        ``hidden`` hidden as well."""
        more = tuple(real_path(p) for p in hidden)
        return dataclasses.replace(
            self,
            writable=False,
            network=False,
            hidden=tuple(dict.fromkeys((*self.hidden, *more))),
        )

    @property
    def roots(self) -> tuple[Path, ...]:
        """Everything the agent may read: the workspace first, then the read-only roots."""
        return (self.workspace, *self.read_only)

    def visible(self, path: Path) -> bool:
        """``True`` when the resolved ``path`` may be seen (read, listed, searched)."""
        if self.plan_md is not None and path == self.plan_md:
            return True
        roots, hidden = self.search_scope()
        return path_visible(str(path), roots, hidden)

    def search_scope(self) -> tuple[list[str], list[str]]:
        """``(roots, hidden)`` as strings: the data grep's child applies the same rule with."""
        return [str(r) for r in self.roots], [str(h) for h in self.hidden]

    def readable(self, raw: str) -> Path:
        """The resolved path ``raw`` names, if the agent may read it; else raise."""
        path = resolve_path(raw, self.workspace)
        if self.plan_md is not None and path == self.plan_md:
            return path
        if not any(is_within(path, root) for root in self.roots):
            raise OutsideWorkspace(raw, path)
        if not self.visible(path):
            raise NotVisible(raw, path)
        return path

    def writable_path(self, raw: str) -> Path:
        """The resolved path ``raw`` names, if the agent may write it now; else raise.

        The plan ``.md`` passes here; the plan gate decides in which phase it may change.
        """
        path = resolve_path(raw, self.workspace)
        if self.plan_md is not None and path == self.plan_md:
            return path
        if any(is_within(path, root) for root in self.read_only):
            # Outside the workspace, or inside it but built by the project's setup (its
            # environment is read-only to the plan: docs/environments.md).
            raise ReadOnlyPath(raw, path, "it is in a read-only folder")
        if not is_within(path, self.workspace):
            raise OutsideWorkspace(raw, path)
        if not self.visible(path):
            raise NotVisible(raw, path)
        if not self.writable:
            raise ReadOnlyPath(raw, path, "the workspace is read-only in plan mode")
        return path

    def bwrap_argv(
        self,
        command: str,
        *,
        environ: Mapping[str, str] | None = None,
        info_fd: int | None = None,
        memory_cgroup: bool = False,
    ) -> list[str]:
        """The ``bwrap`` command line running ``command`` inside this boundary
        (``memory_cgroup``: see :func:`engine.tools.sandbox.bwrap_argv`).

        The session's plan folder is hidden from bash whole (the ``.md`` too: bash never
        writes the plan).
        """
        hidden = list(self.hidden)
        if self.plan_md is not None:
            hidden.append(self.plan_md.parent)
        return bwrap_argv(
            self.settings,
            workspace=self.workspace,
            writable=self.writable,
            command=command,
            hidden=hidden,
            read_only=self.read_only,
            network=self.network,
            environ=environ,
            info_fd=info_fd,
            memory_cgroup=memory_cgroup,
            binds=self.binds,
        )


def writable_in(state: str) -> bool:
    """Whether the workspace may change in a plan state (NoPlan and Active only)."""
    return state in ("none", "active")


@dataclass(frozen=True, slots=True)
class BoundaryPolicy:
    """Builds each call's :class:`Boundary`: the settings plus what the session says now."""

    settings: SandboxSettings = dataclasses.field(default_factory=SandboxSettings)
    plan_view: PlanViewSource | None = None
    md_source: MdSource | None = None
    read_only_roots: ReadOnlyRoots | None = None

    async def view(self, session_id: str) -> PlanGateView:
        """The plan state and ``.md`` the call runs under (NoPlan without a plan view)."""
        if self.plan_view is not None:
            return await self.plan_view(session_id)
        md = await self.md_source(session_id) if self.md_source is not None else None
        return PlanGateView(state="none", md_path=md)

    async def refuse_hidden(
        self,
        arguments: Mapping[str, object],
        ctx: ToolContext,
        *,
        paths: Sequence[str] = PATH_ARGUMENTS,
    ) -> str | None:
        """The refusal of a call whose path argument (``paths``: :data:`PATH_ARGUMENTS` and
        the ones the tool declares, of any tool: a file tool, ``send_file``, ``plan init
        file_path``, a tool added later) names a hidden path; ``None`` otherwise. The tool
        runtime asks it before the gate, so no approval request ever shows or previews a file
        the agent may not see."""
        raws = [arguments.get(name) for name in paths]
        paths = [raw for raw in raws if isinstance(raw, str) and raw]
        if not paths:
            return None
        boundary = await self.for_call(ctx)
        for raw in paths:
            try:
                await asyncio.get_running_loop().run_in_executor(_PATHS, boundary.readable, raw)
            except NotVisible as exc:
                return exc.result_text(ctx.workspace)
            except (OutsideWorkspace, OSError, ValueError):
                continue  # outside or unreadable: the tool's own answer says so
        return None

    async def refuse_write(
        self, arguments: Mapping[str, object], ctx: ToolContext, *, paths: Sequence[str]
    ) -> str | None:
        """The refusal of a call that would write a path (``paths``: the arguments the tool
        declares it writes) the agent may not write now: outside the workspace, hidden, in a
        read-only root, or the workspace read-only in this phase; ``None`` otherwise. Asked
        after the plan gate (whose refusals say more), before the tool runs: a writing tool
        added later is confined like ``write_file`` without checking anything itself."""
        raws = [arguments.get(name) for name in paths]
        given = [raw for raw in raws if isinstance(raw, str) and raw]
        if not given:
            return None
        boundary = await self.for_call(ctx)
        for raw in given:
            try:
                await asyncio.get_running_loop().run_in_executor(
                    _PATHS, boundary.writable_path, raw
                )
            except OutsideWorkspace as exc:
                return exc.result_text(ctx.workspace)
            except (OSError, ValueError):
                continue  # unreadable: the tool's own answer says so
        return None

    async def for_call(self, ctx: ToolContext, *, view: PlanGateView | None = None) -> Boundary:
        """The boundary of one call in ``ctx`` (``view`` when the caller already read it);
        the context's ``read_roots`` (the session's upload inbox) are read-only roots."""
        return await self.for_session(
            ctx.session_id, ctx.workspace, view=view, read_only=ctx.read_roots
        )

    async def for_session(
        self,
        session_id: str,
        workspace: Path,
        *,
        view: PlanGateView | None = None,
        read_only: Sequence[Path] = (),
    ) -> Boundary:
        """The boundary of a session's work in ``workspace`` now (a tool call, a check)."""
        view = view if view is not None else await self.view(session_id)
        extra = list(read_only)
        if self.read_only_roots is not None:
            extra += await self.read_only_roots(session_id)
        # Toolchains the settings name (PLANGATE_SANDBOX_TOOL_DIRS): seen, never written.
        extra += [folder for folder in self.settings.tool_dirs if folder.is_dir()]
        hidden = [view.md_path.parent] if view.md_path is not None else []
        return Boundary.build(
            workspace,
            writable=writable_in(view.state),
            settings=self.settings,
            hidden=hidden,
            read_only=extra,
            plan_md=view.md_path,
        )


__all__ = [
    "PATH_ARGUMENTS",
    "Boundary",
    "BoundaryPolicy",
    "MdSource",
    "NotVisible",
    "PlanViewSource",
    "ReadOnlyPath",
    "ReadOnlyRoots",
    "writable_in",
]
