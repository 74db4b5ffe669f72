"""Builders for the plan lifecycle tests: real files in tmp_path, the in-memory log."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.events import HumanSource, PlanChanged, PlanMode
from engine.plan.seeding import Seeding
from engine.plan.service import PlanService
from engine.plan.tool import PlanTool
from engine.testing import InMemoryEventLog
from engine.tools.base import ToolContext, ToolOutcome
from storage.plan_files import FilePlanStore, SessionLocation

SID = "s1"

VALID_MD = """# Ship the widget

## Context
- **Problem:** the widget is missing.
- **Target state:** the widget ships.
- **Intent:** users asked for it.

## Implementation steps
1. Write the parser — in widget/parse.py
   - Done when: parser tests pass
2. Wire the CLI — add a subcommand
3. Document it — README section
"""


@dataclass
class RecordingSink:
    """A TaskCriteriaSink that records calls."""

    calls: list[tuple[str, Any]] = field(default_factory=list)

    async def set_task_criteria(
        self, session_id: str, *, task_id: str, title: str, criteria: list[str]
    ) -> None:
        self.calls.append(("set", (session_id, task_id, title, list(criteria))))

    async def clear_task_criteria(self, session_id: str) -> None:
        self.calls.append(("clear", session_id))


@dataclass
class Harness:
    home: Path
    workspace: Path
    store: FilePlanStore
    log: InMemoryEventLog
    sink: RecordingSink
    plans: PlanService

    def fresh(self) -> Harness:
        """A new service and store over the same folders and log (a process restart)."""
        store = make_store(self.home, self.workspace)
        sink = RecordingSink()
        return Harness(
            self.home,
            self.workspace,
            store,
            self.log,
            sink,
            PlanService(store, self.log, criteria=sink),
        )

    def session_folder(self) -> Path:
        from storage.files import session_dir

        return session_dir(self.home, workspace=str(self.workspace))

    def json_path(self, sid: str = SID) -> Path:
        return self.session_folder() / f".plangate_plan_{sid}.json"

    def md_path(self, sid: str = SID) -> Path:
        return self.session_folder() / f".plangate_plan_{sid}.md"

    def raw(self, sid: str = SID) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.json_path(sid).read_text())
        return data

    def archived(self) -> list[Path]:
        folder = self.session_folder() / "archive"
        return sorted(folder.iterdir()) if folder.is_dir() else []

    async def plan_events(self, sid: str = SID) -> list[PlanMode | PlanChanged]:
        return [
            e.event for e in await self.log.read(sid) if isinstance(e.event, PlanMode | PlanChanged)
        ]

    async def tool(self, sid: str = SID, **args: Any) -> ToolOutcome:
        ctx = ToolContext(
            session_id=sid, workspace=self.workspace, turn_id="t", source=HumanSource()
        )
        return await PlanTool(self.plans).run(dict(args), ctx)

    async def write_md(self, text: str, sid: str = SID) -> None:
        """What write_file does for the agent, then the service hook the agent calls."""
        path = await self.plans.md_path(sid)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        await self.plans.md_written(sid)


def make_store(home: Path, workspace: Path) -> FilePlanStore:
    async def locate(session_id: str) -> SessionLocation:
        return SessionLocation(workspace=str(workspace))

    return FilePlanStore(home, locate)


def make_harness(tmp_path: Path, *, seeding: Seeding | None = None) -> Harness:
    home = tmp_path / "home"
    workspace = tmp_path / "ws"
    workspace.mkdir(parents=True)
    store = make_store(home, workspace)
    log = InMemoryEventLog()
    sink = RecordingSink()
    plans = PlanService(store, log, criteria=sink, seeding=seeding)
    return Harness(home, workspace, store, log, sink, plans)


async def design_written(h: Harness, md: str = VALID_MD, sid: str = SID) -> int:
    """Design init plus a template-B .md write; returns the revision to approve."""
    out = await h.tool(sid, op="init", title="Ship the widget")
    assert not out.is_error, out.content
    await h.write_md(md, sid)
    return await h.plans.revision(sid)


async def checklist(h: Harness, *titles: str, sid: str = SID) -> None:
    tasks = [{"title": t} for t in titles]
    out = await h.tool(sid, op="init", title="Chores", tasks=tasks)
    assert not out.is_error, out.content
