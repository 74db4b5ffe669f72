"""FilePlanStore on real files: corrupt sidecars, archive names, fork, legacy fallback."""

from __future__ import annotations

import json
import re
from pathlib import Path

from engine.plan.types import PlanSidecar
from engine.testing import InMemoryEventLog, InMemorySessionStore
from storage.files import legacy_session_dir, session_dir, workspace_slug
from storage.plan_files import FilePlanStore
from tests.plan.lifecycle_helpers import SID, checklist, design_written, make_harness


async def test_corrupt_sidecar_is_moved_aside_reported_and_session_is_noplan(
    tmp_path: Path,
) -> None:
    h = make_harness(tmp_path)
    h.session_folder().mkdir(parents=True)
    h.json_path().write_text("{not json")
    assert await h.plans.state(SID) == "none"
    notices = h.plans.take_notices(SID)
    assert len(notices) == 1 and ".corrupt-" in notices[0]
    assert h.plans.take_notices(SID) == []
    moved = [p for p in h.session_folder().iterdir() if ".corrupt-" in p.name]
    assert len(moved) == 1 and moved[0].read_text() == "{not json"
    assert re.fullmatch(rf"\.plangate_plan_{SID}\.json\.corrupt-\d{{8}}T\d{{12}}Z", moved[0].name)
    assert not h.json_path().exists()
    # The session goes on: a new plan is written beside the moved-aside file.
    await checklist(h, "a")
    assert await h.plans.state(SID) == "active"
    assert moved[0].exists()


async def test_sidecar_that_is_json_but_not_a_plan_is_corrupt(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    h.session_folder().mkdir(parents=True)
    h.json_path().write_text(json.dumps({"id": "p", "session_id": SID, "tasks": "nope"}))
    assert await h.plans.state(SID) == "none"
    assert h.plans.take_notices(SID)


async def test_corrupt_legacy_sidecar_is_reported_but_never_moved(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    legacy = legacy_session_dir(h.home)
    legacy.mkdir(parents=True)
    (legacy / f".opencrabs_plan_{SID}.json").write_text("[1,")
    assert await h.plans.state(SID) == "none"
    assert h.plans.take_notices(SID)
    assert sorted(p.name for p in legacy.iterdir()) == [f".opencrabs_plan_{SID}.json"]


async def test_archive_names_and_reason(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    await design_written(h)
    assert (await h.plans.discard(SID)).ok
    names = [p.name for p in h.archived()]
    assert len(names) == 2
    assert all(re.fullmatch(rf"\d{{8}}T\d{{12}}Z_{SID}\.(json|md)", n) for n in names)
    record = json.loads((h.session_folder() / "archive" / names[0]).read_text())
    assert record["archive_reason"] == "discarded" and record["title"] == "Ship the widget"
    assert not h.json_path().exists() and not h.md_path().exists()


async def test_abandon_archives_as_abandoned(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    await checklist(h, "a")
    assert (await h.plans.abandon(SID)).state == "none"
    record = json.loads(next(p for p in h.archived() if p.suffix == ".json").read_text())
    assert record["archive_reason"] == "abandoned"
    assert (await h.plans.abandon(SID)).ok  # nothing live: a no-op


async def test_fork_copies_sidecar_and_md(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    await design_written(h)
    await h.plans.fork(SID, "child")
    assert await h.plans.state("child") == "post_init"
    assert h.raw("child")["session_id"] == "child"
    assert h.md_path("child").read_text() == h.md_path().read_text()
    # The copies are independent.
    await h.write_md("# Child only\n", sid="child")
    assert "Child only" not in h.md_path().read_text()


async def test_from_sessions_locates_the_workspace_folder(tmp_path: Path) -> None:
    log = InMemoryEventLog()
    sessions = InMemorySessionStore(log)
    ws = tmp_path / "proj"
    ws.mkdir()
    record = await sessions.create_session(workspace=str(ws))
    store = FilePlanStore.from_sessions(tmp_path / "home", sessions)
    sidecar = PlanSidecar(id="p", session_id=record.id)
    await store.save(record.id, sidecar, md="# x\n")
    folder = tmp_path / "home" / "projects" / workspace_slug(ws) / "session"
    assert (folder / f".plangate_plan_{record.id}.json").is_file()
    assert await store.md_path(record.id) == folder / f".plangate_plan_{record.id}.md"
    assert session_dir(tmp_path / "home", workspace=str(ws)) == folder
    assert (await store.load("unknown")).sidecar is None
    await store.save("unknown", PlanSidecar(id="q", session_id="unknown"))
    assert (tmp_path / "home" / "session" / ".plangate_plan_unknown.json").is_file()


async def test_save_leaves_no_temp_files(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    await checklist(h, "a", "b")
    await h.tool(op="start")
    await h.tool(op="complete")
    names = sorted(p.name for p in h.session_folder().iterdir())
    assert names == [f".plangate_plan_{SID}.json"]
