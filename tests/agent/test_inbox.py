"""The session inbox: clean names, exclusive saves, the read-only root of the file tools, and
attachments in the context (image parts with vision, a note without; replay reads the file)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.agent.context import NO_VISION_TEXT, split_turns
from engine.events import Attachment, HumanSource, TurnStart, UserMessage
from engine.inbox import clean_name, human_size, inline_text, save_upload, session_inbox
from engine.tools.base import ToolContext
from engine.tools.files import EditFileTool, GrepTool, ListFilesTool, ReadFileTool, WriteFileTool


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("../../etc/passwd", "passwd"),
        ("..\\..\\windows\\win.ini", "win.ini"),
        ("/abs/path/report.pdf", "report.pdf"),
        ("..", "upload"),
        ("", "upload"),
        (None, "upload"),
        (".bashrc", "bashrc"),
        ("bad\x00na\x1bme\u202e.txt", "badname.txt"),
        ('a<b>c:d*e?f"g|h.log', "a_b_c_d_e_f_g_h.log"),
        ("  spaced   out  .md ", "spaced out .md"),
    ],
)
def test_clean_name(raw: str | None, clean: str) -> None:
    assert clean_name(raw) == clean


def test_a_long_name_keeps_its_extension() -> None:
    name = clean_name("x" * 300 + ".tar.gz")
    assert len(name) <= 120 and name.endswith(".gz")


def test_save_numbers_a_taken_name_and_never_overwrites(tmp_path: Path) -> None:
    folder = tmp_path / "inbox" / "s1"
    first = save_upload(folder, "notes.txt", b"1")
    second = save_upload(folder, "notes.txt", b"2")
    third = save_upload(folder, "notes.txt", b"3")
    bare = [save_upload(folder, "Makefile", b"m"), save_upload(folder, "Makefile", b"n")]
    assert [p.name for p in (first, second, third)] == [
        "notes.txt",
        "notes (2).txt",
        "notes (3).txt",
    ]
    assert [p.name for p in bare] == ["Makefile", "Makefile (2)"]
    assert first.read_bytes() == b"1" and third.read_bytes() == b"3"
    assert oct(folder.stat().st_mode & 0o777) == "0o700"


def test_save_does_not_follow_a_planted_link(tmp_path: Path) -> None:
    folder = tmp_path / "inbox" / "s1"
    folder.mkdir(parents=True)
    target = tmp_path / "victim.txt"
    target.write_text("safe")
    os.symlink(target, folder / "notes.txt")
    saved = save_upload(folder, "notes.txt", b"evil")
    assert saved.name == "notes (2).txt"
    assert target.read_text() == "safe"


def test_session_inbox_refuses_a_path_as_session_id(tmp_path: Path) -> None:
    assert session_inbox(tmp_path, "abc123") == tmp_path / "abc123"
    with pytest.raises(ValueError):
        session_inbox(tmp_path, "../x")


def test_inline_text_only_small_utf8_text() -> None:
    assert inline_text(b"hello\n", "text/plain") == "hello\n"
    assert inline_text(b"{}", "application/json") == "{}"
    assert inline_text(b"log line\n", "application/octet-stream") == "log line\n"
    assert inline_text(b"\xff\xfe", "text/plain") is None
    assert inline_text(b"a\x00b", "text/plain") is None
    assert inline_text(b"%PDF-1.7", "application/pdf") is None
    assert inline_text(b"x" * 8001, "text/plain") is None
    assert human_size(12) == "12 bytes" and human_size(2 * 1024 * 1024) == "2.0 MB"


@pytest.fixture
def roots(tmp_path: Path) -> tuple[Path, Path]:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "main.py").write_text("print('hi')\n")
    inbox = tmp_path / "home" / "inbox" / "s1"
    inbox.mkdir(parents=True)
    (inbox / "trace.log").write_text("line one\nERROR boom\n")
    secret = tmp_path / "home" / "plangate.db"
    secret.write_text("TOKEN=123")
    os.symlink(secret, inbox / "link.log")  # a link planted in the inbox points out of it
    return ws, inbox


def _ctx(ws: Path, inbox: Path | None) -> ToolContext:
    return ToolContext(
        session_id="s1",
        workspace=ws,
        turn_id="t1",
        source=HumanSource(),
        read_roots=(inbox,) if inbox is not None else (),
    )


async def test_read_tools_read_the_inbox(roots: tuple[Path, Path]) -> None:
    ws, inbox = roots
    ctx = _ctx(ws, inbox)
    read = await ReadFileTool().run({"path": str(inbox / "trace.log")}, ctx)
    assert not read.is_error and "2\tERROR boom" in read.content
    listed = await ListFilesTool().run({"path": str(inbox)}, ctx)
    assert not listed.is_error and str(inbox / "trace.log") in listed.content
    found = await GrepTool().run({"pattern": "ERROR", "path": str(inbox)}, ctx)
    assert not found.is_error and f"{inbox}/trace.log:2: ERROR boom" in found.content
    # The workspace is still what a relative path means.
    assert "print" in (await ReadFileTool().run({"path": "main.py"}, ctx)).content


async def test_the_inbox_is_not_readable_without_the_root_and_never_writable(
    roots: tuple[Path, Path],
) -> None:
    ws, inbox = roots
    path = str(inbox / "trace.log")
    outside = await ReadFileTool().run({"path": path}, _ctx(ws, None))
    assert outside.is_error and "outside the workspace" in outside.content
    ctx = _ctx(ws, inbox)
    wrote = await WriteFileTool().run({"path": path, "content": "x"}, ctx)
    edited = await EditFileTool().run({"path": path, "old_text": "one", "new_text": "x"}, ctx)
    new = await WriteFileTool().run({"path": str(inbox / "new.txt"), "content": "x"}, ctx)
    assert all(o.is_error and "read-only folder" in o.content for o in (wrote, edited, new))
    assert (inbox / "trace.log").read_text() == "line one\nERROR boom\n"
    assert not (inbox / "new.txt").exists()
    # A link in the inbox that leads out of it is judged by where it leads.
    link = await ReadFileTool().run({"path": str(inbox / "link.log")}, ctx)
    assert link.is_error and "TOKEN" not in link.content
    up = await ReadFileTool().run({"path": str(inbox / ".." / ".." / "plangate.db")}, ctx)
    assert up.is_error and "TOKEN" not in up.content


def _events(attachment: Attachment) -> list[object]:
    return [TurnStart(turn_id="t1"), UserMessage(text="what is this?", attachments=(attachment,))]


def test_an_image_goes_as_an_image_part_with_vision_and_as_a_note_without(
    tmp_path: Path,
) -> None:
    picture = tmp_path / "photo-7.jpg"
    picture.write_bytes(b"\xff\xd8\xff\xe0fake-jpeg")
    image = Attachment(
        kind="image", path=str(picture), name="photo-7.jpg", size=14, mime="image/jpeg"
    )
    seen = split_turns(_events(image), result_cap=1000, vision=True)  # type: ignore[arg-type]
    content = seen[0].messages[0]["content"]
    assert isinstance(content, list)
    assert content[0]["type"] == "text" and content[0]["text"].startswith("what is this?\n")
    assert f'file saved: "{picture}" (14 bytes, image/jpeg)' in content[0]["text"]
    assert content[1] == {
        "type": "image_url",
        "image_url": {"url": "data:image/jpeg;base64,/9j/4GZha2UtanBlZw=="},
    }
    blind = split_turns(_events(image), result_cap=1000, vision=False)  # type: ignore[arg-type]
    text = blind[0].messages[0]["content"]
    assert isinstance(text, str) and NO_VISION_TEXT in text and "base64" not in text
    # The log keeps the path, not the bytes: a replay after the file is gone still builds.
    picture.unlink()
    gone = split_turns(_events(image), result_cap=1000, vision=True)  # type: ignore[arg-type]
    assert "could not be read any more" in gone[0].messages[0]["content"]
