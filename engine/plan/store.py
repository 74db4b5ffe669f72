"""The port the plan service persists through (storage/plan_files.py implements it on files).

The sidecar is the plan's authority (docs/architecture.md): the service writes it here first and
appends ``plan/mode`` / ``plan/changed`` to the event log only after the write returned.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from engine.plan.types import LegacyDisposition, PlanSidecar

ArchiveReason = Literal["completed", "discarded", "abandoned"]


@dataclass(frozen=True, slots=True)
class PlanLoad:
    """What is on disk for one session.

    ``disposition`` is the legacy map's verdict (a ``Completed``/``Cancelled`` file asks to be
    archived). ``corrupt`` is set when a sidecar did not parse: it names where the file was
    moved, and the session continues as NoPlan.
    """

    sidecar: PlanSidecar | None
    md: str | None
    disposition: LegacyDisposition = "live"
    original_status: str | None = None
    corrupt: str | None = None
    from_legacy: bool = False


class PlanStore(Protocol):
    async def load(self, session_id: str) -> PlanLoad:
        """Read the live sidecar and ``.md`` (legacy folder as a read fallback)."""
        ...

    async def save(self, session_id: str, sidecar: PlanSidecar, *, md: str | None = None) -> None:
        """Atomically write ``md`` (when given) and then the sidecar, in that order."""
        ...

    async def read_md(self, session_id: str) -> str | None:
        """The session ``.md`` text, or ``None`` when there is none."""
        ...

    async def md_path(self, session_id: str) -> Path:
        """The absolute path of the session ``.md`` (the write location, existing or not)."""
        ...

    async def set_aside_md(self, session_id: str) -> str | None:
        """Move the live ``.md`` out of the way (kept, renamed); its new path, or ``None``."""
        ...

    async def delete(self, session_id: str) -> None:
        """Remove the live sidecar and ``.md`` (a pre-init flag being cleared)."""
        ...

    async def archive(self, session_id: str, sidecar: PlanSidecar, *, reason: ArchiveReason) -> str:
        """Move the plan to ``archive/`` with ``reason`` recorded; returns the archive stem."""
        ...

    async def fork(self, source_id: str, target_id: str) -> None:
        """Copy the sidecar and ``.md`` of ``source_id`` to ``target_id``."""
        ...
