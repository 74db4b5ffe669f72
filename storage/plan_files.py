"""FilePlanStore: plan sidecars and session ``.md`` files on disk (docs/plan-json-spec.md).

Files of a session live in its session folder (``storage.files.session_dir``)::

    .plangate_plan_<session_id>.json       the live sidecar
    .plangate_plan_<session_id>.md         the design prose
    archive/<UTC stamp>_<session_id>.json  archived sidecar, with ``archive_reason``
    archive/<UTC stamp>_<session_id>.md

How the store learns a session's folder: it is built with a *locator*, an async callable
``session_id -> SessionLocation(workspace, profile)``; :meth:`FilePlanStore.from_sessions`
builds one over an ``engine.ports.SessionStore``. Locations are cached per session id (a
session never changes workspace).

``<home>/agents/session/`` is a read-only fallback (``.plangate_plan_<id>.*`` and OpenCrabs'
``.opencrabs_plan_<id>.*``); it is never written. Once a plan read from there is archived or
deleted, a ``.plangate_plan_<id>.legacy-done`` marker in the session folder stops the fallback
from bringing it back.

The atomic writes of a save or an archive (temp file, fsync, rename, fsync the folder) run off
the event loop in a worker thread, so a slow disk does not stall other chats; the small reads,
the deletes and a fork's copy stay inline. Every call runs
under the plan service's per-session lock, so one session's writes never race each other.

With a *fence* (several replicas on a shared folder: ``storage.postgres.leases.LeaseFence``),
every write for a session holds the session's chat lease at this replica's epoch for its whole
length: a write by a replica that lost the chat raises ``LeaseLost`` and touches nothing, and a
takeover waits for a write in flight, so a stale writer never lands over the new owner's files.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from pydantic import ValidationError

from engine.plan.store import ArchiveReason, PlanLoad
from engine.plan.types import PlanSidecar, decode_sidecar, encode_sidecar
from engine.ports import SessionStore
from storage.files import (
    atomic_write_text,
    fsync_dir,
    legacy_session_dir,
    run_durable,
    session_dir,
)

_PREFIX = ".plangate_plan_"
_LEGACY_PREFIXES = (".plangate_plan_", ".opencrabs_plan_")


@dataclass(frozen=True, slots=True)
class SessionLocation:
    """What decides a session's folder."""

    workspace: str | None = None
    profile: str | None = None


SessionLocator = Callable[[str], Awaitable[SessionLocation]]


class WriteFence(Protocol):
    """What a fenced store holds around each write for a session (raises ``LeaseLost``)."""

    def holding(self, session_id: str) -> AbstractAsyncContextManager[None]: ...


class _Unfenced:
    @contextlib.asynccontextmanager
    async def _nothing(self) -> AsyncIterator[None]:
        yield

    def holding(self, session_id: str) -> AbstractAsyncContextManager[None]:
        return self._nothing()


def utc_stamp() -> str:
    """A sortable UTC timestamp for file names, unique to the microsecond."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")


class FilePlanStore:
    """:class:`engine.plan.store.PlanStore` on real files, with atomic writes."""

    def __init__(
        self, home: Path, locate: SessionLocator, *, fence: WriteFence | None = None
    ) -> None:
        """``fence``: held around every write for a session (several replicas)."""
        self._home = home
        self._locate = locate
        self._dirs: dict[str, Path] = {}
        self._fence: WriteFence = fence if fence is not None else _Unfenced()

    @classmethod
    def from_sessions(
        cls, home: Path, sessions: SessionStore, *, fence: WriteFence | None = None
    ) -> FilePlanStore:
        """A store whose locator asks ``sessions`` (unknown sessions use ``<home>/session``)."""

        async def locate(session_id: str) -> SessionLocation:
            record = await sessions.get_session(session_id)
            if record is None:
                return SessionLocation()
            return SessionLocation(workspace=record.workspace or None, profile=record.profile)

        return cls(home, locate, fence=fence)

    # --- paths ----------------------------------------------------------------------------------

    async def session_folder(self, session_id: str) -> Path:
        """The folder the session's plan files are written to."""
        folder = self._dirs.get(session_id)
        if folder is None:
            loc = await self._locate(session_id)
            folder = session_dir(self._home, workspace=loc.workspace, profile=loc.profile)
            self._dirs[session_id] = folder.absolute()
            folder = self._dirs[session_id]
        return folder

    async def json_path(self, session_id: str) -> Path:
        """The live sidecar's path (written location)."""
        return (await self.session_folder(session_id)) / f"{_PREFIX}{session_id}.json"

    async def md_path(self, session_id: str) -> Path:
        return (await self.session_folder(session_id)) / f"{_PREFIX}{session_id}.md"

    async def archive_folder(self, session_id: str) -> Path:
        """Where archived plans of the session go."""
        return (await self.session_folder(session_id)) / "archive"

    def _legacy_paths(self, session_id: str) -> tuple[Path | None, Path | None]:
        folder = legacy_session_dir(self._home)
        for prefix in _LEGACY_PREFIXES:
            candidate = folder / f"{prefix}{session_id}.json"
            if candidate.is_file():
                md = folder / f"{prefix}{session_id}.md"
                return candidate, md if md.is_file() else None
        return None, None

    async def _marker(self, session_id: str) -> Path:
        return (await self.session_folder(session_id)) / f"{_PREFIX}{session_id}.legacy-done"

    # --- reads ----------------------------------------------------------------------------------

    async def load(self, session_id: str) -> PlanLoad:
        json_path = await self.json_path(session_id)
        md_path = await self.md_path(session_id)
        from_legacy = False
        source: Path | None = json_path if json_path.is_file() else None
        md_source: Path | None = md_path if md_path.is_file() else None
        if source is None and not (await self._marker(session_id)).exists():
            legacy_json, legacy_md = self._legacy_paths(session_id)
            if legacy_json is not None:
                source, from_legacy = legacy_json, True
                md_source = md_source or legacy_md
        if source is None:
            return PlanLoad(sidecar=None, md=None)
        try:
            decoded = decode_sidecar(json.loads(source.read_text(encoding="utf-8")))
        except (ValueError, ValidationError, UnicodeDecodeError):
            moved = self._move_aside(source, from_legacy, md=md_path)
            return PlanLoad(sidecar=None, md=None, corrupt=moved)
        md = md_source.read_text(encoding="utf-8") if md_source is not None else None
        return PlanLoad(
            sidecar=decoded.sidecar,
            md=md,
            disposition=decoded.disposition,
            original_status=decoded.original_status,
            from_legacy=from_legacy,
        )

    def _move_aside(self, source: Path, from_legacy: bool, *, md: Path) -> str:
        if from_legacy:
            # The legacy folder is never written: report the file and leave it where it is.
            return str(source)
        stamp = utc_stamp()
        target = source.with_name(f"{source.name}.corrupt-{stamp}")
        os.replace(source, target)
        # The .md goes with it: left behind, it would turn a later pre-init sidecar into a
        # post-init plan with the old text.
        with contextlib.suppress(FileNotFoundError):
            os.replace(md, md.with_name(f"{md.name}.corrupt-{stamp}"))
        fsync_dir(source.parent)
        return str(target)

    async def read_md(self, session_id: str) -> str | None:
        path = await self.md_path(session_id)
        if path.is_file():
            return path.read_text(encoding="utf-8")
        if not (await self.json_path(session_id)).is_file():
            _, legacy_md = self._legacy_paths(session_id)
            if legacy_md is not None and not (await self._marker(session_id)).exists():
                return legacy_md.read_text(encoding="utf-8")
        return None

    # --- writes ---------------------------------------------------------------------------------

    async def save(self, session_id: str, sidecar: PlanSidecar, *, md: str | None = None) -> None:
        # The .md goes first: a crash between the two leaves an .md next to the old sidecar,
        # and an .md next to a pre-init sidecar already reads as post-init.
        # fsync'd writes run off the event loop (every checklist step saves the sidecar).
        text = encode_sidecar(sidecar)
        async with self._fence.holding(session_id):
            if md is not None:
                await run_durable(atomic_write_text, await self.md_path(session_id), md)
            await run_durable(atomic_write_text, await self.json_path(session_id), text)

    async def set_aside_md(self, session_id: str) -> str | None:
        path = await self.md_path(session_id)
        target = path.with_name(f"{path.name}.stale-{utc_stamp()}")
        async with self._fence.holding(session_id):
            moved = await run_durable(_replace_durably, path, target)
        return str(target) if moved else None

    async def delete(self, session_id: str) -> None:
        async with self._fence.holding(session_id):
            await self._delete(session_id)

    async def _delete(self, session_id: str) -> None:
        for path in (await self.json_path(session_id), await self.md_path(session_id)):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        await self._shadow_legacy(session_id)
        folder = await self.session_folder(session_id)
        if folder.is_dir():
            fsync_dir(folder)

    async def _shadow_legacy(self, session_id: str) -> None:
        legacy_json, _ = self._legacy_paths(session_id)
        if legacy_json is not None:
            atomic_write_text(await self._marker(session_id), "archived or discarded\n")

    async def archive(self, session_id: str, sidecar: PlanSidecar, *, reason: ArchiveReason) -> str:
        async with self._fence.holding(session_id):
            return await self._archive(session_id, sidecar, reason=reason)

    async def _archive(
        self, session_id: str, sidecar: PlanSidecar, *, reason: ArchiveReason
    ) -> str:
        stamp = utc_stamp()
        folder = await self.archive_folder(session_id)
        stem = f"{stamp}_{session_id}"
        record = json.loads(sidecar.model_dump_json())
        record["archive_reason"] = reason
        record["archived_at"] = stamp
        md_live = await self.md_path(session_id)
        md_text = await self.read_md(session_id)
        if md_text is not None:
            await run_durable(atomic_write_text, folder / f"{stem}.md", md_text)
        body = json.dumps(record, indent=2) + "\n"
        await run_durable(atomic_write_text, folder / f"{stem}.json", body)
        for path in (await self.json_path(session_id), md_live):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        await self._shadow_legacy(session_id)
        fsync_dir(await self.session_folder(session_id))
        return stem

    async def fork(self, source_id: str, target_id: str) -> None:
        src_json = await self.json_path(source_id)
        src_md = await self.md_path(source_id)
        if not src_json.is_file():
            legacy_json, legacy_md = self._legacy_paths(source_id)
            if legacy_json is None or (await self._marker(source_id)).exists():
                return
            src_json, src_md = legacy_json, legacy_md or src_md
        data = json.loads(src_json.read_text(encoding="utf-8"))
        if isinstance(data, dict):
            data["session_id"] = target_id
        if src_md.is_file():
            atomic_write_text(await self.md_path(target_id), src_md.read_text(encoding="utf-8"))
        atomic_write_text(await self.json_path(target_id), json.dumps(data, indent=2) + "\n")


def _replace_durably(path: Path, target: Path) -> bool:
    """Rename ``path`` to ``target`` and sync the folder; False when there is no ``path``."""
    try:
        os.replace(path, target)
    except FileNotFoundError:
        return False
    fsync_dir(path.parent)
    return True
