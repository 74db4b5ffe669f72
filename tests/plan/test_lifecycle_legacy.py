"""OpenCrabs-shaped sidecars for each of the seven legacy statuses, in both folders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine.plan.types import decode_sidecar, map_task_status
from storage.files import legacy_session_dir
from tests.plan.lifecycle_helpers import SID, Harness, make_harness

TASK_A = "6f1c8a52-3b7e-4d2a-9a51-0c2b9e7d1a01"
TASK_B = "6f1c8a52-3b7e-4d2a-9a51-0c2b9e7d1a02"


def opencrabs_plan(status: str) -> dict[str, Any]:
    """Every sidecar field (docs/plan-json-spec.md) as OpenCrabs writes it, plus unknown fields."""
    return {
        "id": "0b7e6f2c-1d3a-4c5b-8e9f-a1b2c3d4e5f6",
        "session_id": SID,
        "title": "Legacy plan",
        "description": "Older plan text",
        "status": status,
        "tasks": [
            {
                "id": TASK_A,
                "order": 1,
                "title": "First",
                "description": "do the first thing",
                "task_type": "Code",
                "dependencies": [],
                "complexity": 2,
                "acceptance_criteria": ["first works"],
                "status": "Completed",
                "notes": "went fine",
                "retry_count": 0,
                "artifacts": ["a.txt"],
            },
            {
                "id": TASK_B,
                "order": 2,
                "title": "Second",
                "description": "do the second thing",
                "task_type": "Test",
                "dependencies": [TASK_A],
                "complexity": 3,
                "acceptance_criteria": [],
                "status": "Pending",
                "notes": None,
                "retry_count": 1,
                "artifacts": [],
            },
        ],
        "created_at": "2026-01-02T03:04:05Z",
        "updated_at": "2026-01-02T03:04:06Z",
        "approved_at": "2026-01-02T03:04:07Z" if status in ("Approved", "InProgress") else None,
        "pre_init_editing": False,
        "working_directory": "/tmp/project",
        "context_budget_hint": {"tokens": 1200},
    }


EXPECTED = {
    "Draft": "post_init",
    "PendingApproval": "post_init",
    "Rejected": "post_init",
    "Approved": "active",
    "InProgress": "active",
    "Completed": "none",
    "Cancelled": "none",
}


def place(h: Harness, status: str, where: str) -> Path:
    if where == "session":
        folder, name = h.session_folder(), f".plangate_plan_{SID}.json"
    else:
        folder, name = legacy_session_dir(h.home), f".opencrabs_plan_{SID}.json"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps(opencrabs_plan(status)))
    return path


@pytest.mark.parametrize("where", ["session", "legacy"])
@pytest.mark.parametrize("status", list(EXPECTED))
async def test_legacy_status_loads_maps_and_writes_unknown_fields_back(
    tmp_path: Path, status: str, where: str
) -> None:
    h = make_harness(tmp_path)
    source = place(h, status, where)
    original = source.read_bytes()
    state = await h.plans.state(SID)
    assert state == EXPECTED[status]
    assert h.plans.take_notices(SID) == []
    if state == "active":
        out = await h.tool(op="start")
        assert not out.is_error, out.content
        raw = h.raw()
        assert raw["status"] == "Active"
        assert raw["approved_at"] == "2026-01-02T03:04:07Z"
        assert raw["context_budget_hint"] == {"tokens": 1200}
        assert [t["artifacts"] for t in raw["tasks"]] == [["a.txt"], []]
        assert [t["status"] for t in raw["tasks"]] == ["completed", "in_progress"]
        assert raw["tasks"][1]["dependencies"] == [TASK_A]
    elif state == "post_init":
        await h.write_md("# Legacy plan\n")
        raw = h.raw()
        assert raw["status"] == "Editing" and raw["tasks"] == []
        assert raw["context_budget_hint"] == {"tokens": 1200}
        kept = raw["legacy_editing_tasks"]
        assert [t["artifacts"] for t in kept] == [["a.txt"], []]
    else:
        archived = [json.loads(p.read_text()) for p in h.archived() if p.suffix == ".json"]
        assert len(archived) == 1
        reason = "completed" if status == "Completed" else "discarded"
        assert archived[0]["archive_reason"] == reason
        assert archived[0]["context_budget_hint"] == {"tokens": 1200}
        assert archived[0]["tasks"][0]["artifacts"] == ["a.txt"]
        # Archived once: a restart does not find the plan again.
        assert await h.fresh().plans.state(SID) == "none"
        assert len([p for p in h.archived() if p.suffix == ".json"]) == 1
    if where == "legacy":
        assert source.read_bytes() == original  # the legacy folder is never written
        assert sorted(p.name for p in source.parent.iterdir()) == [source.name]
    elif state == "none":
        assert not source.exists()  # archived away
    else:
        assert source.exists()  # still the live plan


def test_task_status_map_is_case_insensitive_and_keeps_unknown() -> None:
    assert map_task_status("InProgress") == ("in_progress", None)
    assert map_task_status("in_progress") == ("in_progress", None)
    assert map_task_status("COMPLETED") == ("completed", None)
    assert map_task_status("Skipped") == ("deferred", None)
    assert map_task_status("pending") == ("pending", None)
    assert map_task_status("Blocked") == ("pending", "Blocked")
    decoded = decode_sidecar(
        {
            "id": "p",
            "session_id": "s",
            "status": "Active",
            "tasks": [{"id": 7, "title": "t", "status": "Failed"}],
        }
    )
    task = decoded.sidecar.tasks[0]
    assert task.id == "7" and task.status == "pending"
    assert (task.model_extra or {})["legacy_status"] == "Failed"
    assert decoded.sidecar.next_task_id == 8


async def test_md_next_to_pre_init_sidecar_means_post_init(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    await h.plans.enter_pre_init(SID)
    h.md_path().write_text("# Crashed between the .md and the JSON\n")
    assert h.raw()["pre_init_editing"] is True
    assert await h.fresh().plans.state(SID) == "post_init"
