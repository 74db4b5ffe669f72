"""The diff an approval message shows for a write, from real files."""

from __future__ import annotations

from pathlib import Path

from engine.approval.preview import write_diff, write_target


def test_targets_are_workspace_relative_and_outside_is_none(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (tmp_path / "outside.txt").write_text("x")
    (ws / "link").symlink_to(tmp_path / "outside.txt")
    assert write_target(ws, {"path": "src/a.py"}) == "src/a.py"
    assert write_target(ws, {"path": str(ws / "src" / "../b.py")}) == "b.py"
    assert write_target(ws, {"path": "../outside.txt"}) is None
    assert write_target(ws, {"path": "link"}) is None  # the symlink leads outside
    assert write_target(ws, {"path": ""}) is None


def test_diffs_of_writes_and_edits(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("one\ntwo\ntwo\n", encoding="utf-8")
    diff = write_diff(tmp_path, "write_file", {"content": "one\n"}, "a.py")
    assert diff is not None and diff.startswith("--- a/a.py\n+++ b/a.py\n")
    assert "-two\n" in diff and " one\n" in diff
    new = write_diff(tmp_path, "write_file", {"content": "hi"}, "new.py")
    assert new is not None and new.startswith("--- /dev/null\n") and "+hi\n" in new
    edit = {"old_text": "one", "new_text": "ONE"}
    assert "+ONE\n" in (write_diff(tmp_path, "edit_file", edit, "a.py") or "")
    # An edit that would not apply (not unique, missing) shows no diff; the tool says why.
    assert write_diff(tmp_path, "edit_file", {"old_text": "two", "new_text": "2"}, "a.py") is None
    assert write_diff(tmp_path, "edit_file", {"old_text": "zz", "new_text": "2"}, "a.py") is None
    both = {"old_text": "two", "new_text": "2", "replace_all": True}
    assert (write_diff(tmp_path, "edit_file", both, "a.py") or "").count("+2\n") == 2
    (tmp_path / "bin.dat").write_bytes(b"\xff\xfe\x00")
    assert write_diff(tmp_path, "write_file", {"content": "x"}, "bin.dat") is None
    assert write_diff(tmp_path, "edit_file", edit, "missing.py") is None
