"""Plan import reads only regular files inside the workspace (docs/plan-json-spec.md)."""

from __future__ import annotations

import os
from pathlib import Path

from engine.plan.extract import extract_work_items
from engine.plan.importer import read_import


def test_a_fifo_in_the_workspace_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "tasks.json"
    os.mkfifo(fifo)  # reading it would block the event loop until a writer came
    assert read_import("tasks.json", tmp_path, extract=extract_work_items) == "import-unreadable"


def test_a_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "plans").mkdir()
    assert read_import("plans", tmp_path, extract=extract_work_items) == "import-unreadable"


def test_a_symlink_out_of_the_workspace_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside.json"
    outside.write_text('[{"title": "x"}]', encoding="utf-8")
    workspace = tmp_path / "work"
    workspace.mkdir()
    (workspace / "link.json").symlink_to(outside)
    result = read_import("link.json", workspace, extract=extract_work_items)
    assert result == "import-outside-workspace"


def test_a_regular_file_inside_imports(tmp_path: Path) -> None:
    (tmp_path / "tasks.json").write_text('[{"title": "one"}]', encoding="utf-8")
    result = read_import("tasks.json", tmp_path, extract=extract_work_items)
    assert not isinstance(result, str)
    assert [spec.title for spec in result] == ["one"]


def test_a_file_over_the_size_cap_is_refused(tmp_path: Path) -> None:
    from engine.plan.importer import MAX_IMPORT_BYTES

    (tmp_path / "big.md").write_bytes(b"# x\n" + b"a" * MAX_IMPORT_BYTES)
    assert read_import("big.md", tmp_path, extract=extract_work_items) == "import-unreadable"
