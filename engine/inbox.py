"""The session inbox: where files the owner sends are kept, and how they are named.

Each session has one folder, ``<home>/inbox/<session id>/``, inside plangate's home and never
inside the project: an upload is material for the agent, not a change to the workspace. The
file tools read it read-only (an extra read root in ``ToolContext.read_roots``); nothing the
agent runs can write there. Names are cleaned (:func:`clean_name`): no folder parts, no
control characters, no leading dots; a name already taken gets `` (2)``, `` (3)`` ....

The front end saves the bytes (:func:`save_upload`) and hands the engine an
:class:`engine.events.Attachment` naming the file; the event log keeps that reference, never
the bytes, so a replayed context reads the same file again (docs/inputs.md).
"""

from __future__ import annotations

import os
import re
import unicodedata
from pathlib import Path

from engine.events import Attachment

INBOX_FOLDER = "inbox"
# Longest cleaned name, in characters and in UTF-8 bytes: file systems allow 255 bytes, and a
# numbered name (" (9999)") must still fit. 120 characters of Chinese are 360 bytes.
MAX_NAME_CHARS = 120
MAX_NAME_BYTES = 240
FALLBACK_NAME = "upload"
# A text file up to this size is also shown to the agent inline (the path is given anyway).
INLINE_TEXT_BYTES = 8_000
_TEXTUAL = frozenset(
    {
        "application/json",
        "application/xml",
        "application/x-yaml",
        "application/yaml",
        "application/toml",
        "application/x-sh",
        "application/javascript",
        "application/sql",
    }
)

_UNSAFE = re.compile(r'[\\/:*?"<>|]')
_SPACES = re.compile(r"\s+")


def session_inbox(root: Path, session_id: str) -> Path:
    """The inbox folder of one session under the inbox ``root`` (``<home>/inbox``)."""
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", session_id):
        raise ValueError(f"not a session id: {session_id!r}")
    return root / session_id


def clean_name(raw: str | None, *, default: str = FALLBACK_NAME) -> str:
    """A file name that is safe to create in the inbox, made from what the sender called it.

    Only the last path part is kept (``../../etc/passwd`` -> ``passwd``); control and format
    characters go, characters Windows or shells trip on become ``_``, leading dots and
    spaces go (no hidden files, no ``..``); an empty result is ``default``. The extension is
    kept when the name is cut to :data:`MAX_NAME_CHARS` characters and :data:`MAX_NAME_BYTES`
    bytes of UTF-8 (a file system counts bytes).
    """
    text = unicodedata.normalize("NFC", raw or "")
    text = text.replace("\\", "/").rsplit("/", 1)[-1]
    text = "".join(ch for ch in text if unicodedata.category(ch)[0] != "C")
    text = _UNSAFE.sub("_", text)
    text = _SPACES.sub(" ", text).strip().lstrip(". ").rstrip(". ")
    if not text:
        return default
    if len(text) > MAX_NAME_CHARS or len(text.encode()) > MAX_NAME_BYTES:
        stem, dot, ext = text.rpartition(".")
        if dot and 0 < len(ext) <= 10 and stem:
            room = MAX_NAME_BYTES - len(ext.encode()) - 1
            text = _cut(stem, MAX_NAME_CHARS - len(ext) - 1, room).rstrip() + "." + ext
        else:
            text = _cut(text, MAX_NAME_CHARS, MAX_NAME_BYTES)
    return text


def _cut(text: str, chars: int, size: int) -> str:
    """``text`` cut to ``chars`` characters, then to ``size`` UTF-8 bytes on a whole character."""
    return text[:chars].encode()[:size].decode("utf-8", "ignore")


def _numbered(name: str, n: int) -> str:
    stem, dot, ext = name.rpartition(".")
    if not dot or not stem:
        return f"{name} ({n})"
    return f"{stem} ({n}).{ext}"


def save_upload(folder: Path, name: str, data: bytes) -> Path:
    """Write ``data`` as a new file named ``name`` (already clean) in ``folder``; a name taken
    is numbered. Created exclusively, so two uploads at once never overwrite each other."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    for n in range(1, 10_000):
        candidate = folder / (name if n == 1 else _numbered(name, n))
        try:
            fd = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            continue
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
        except BaseException:
            candidate.unlink(missing_ok=True)
            raise
        return candidate
    raise FileExistsError(f"no free name for {name!r} in {folder}")


def inline_text(data: bytes, mime: str) -> str | None:
    """The text of a small text file, to show the agent beside its path; None otherwise.

    Small means at most :data:`INLINE_TEXT_BYTES`; text means valid UTF-8 without NUL bytes
    (the declared type is only a hint: phones send logs as ``application/octet-stream``).
    """
    if len(data) > INLINE_TEXT_BYTES or b"\x00" in data:
        return None
    textual = (
        not mime
        or mime.startswith("text/")
        or mime in _TEXTUAL
        or mime.endswith(("+json", "+xml"))
        or mime == "application/octet-stream"
    )
    if not textual:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def human_size(size: int) -> str:
    """``2.0 MB``, ``312 KB``, ``12 bytes``: sizes as the chat shows them (1 KB = 1,024 bytes)."""
    if size < 1024:
        return f"{size} bytes"
    if size < 1024 * 1024:
        return f"{size / 1024:.0f} KB"
    return f"{size / (1024 * 1024):.1f} MB"


def attachment_line(attachment: Attachment) -> str:
    """How the agent is told about one saved file (its caption goes above the lines): one
    path, the absolute one the read tools take (a second, relative name was read as a path
    in the workspace, "not a file")."""
    return (
        f'file saved: "{attachment.path}" '
        f"({human_size(attachment.size)}, {attachment.mime or 'unknown type'}); "
        "read-only, read it with read_file at that path"
    )


__all__ = [
    "FALLBACK_NAME",
    "INBOX_FOLDER",
    "INLINE_TEXT_BYTES",
    "MAX_NAME_BYTES",
    "MAX_NAME_CHARS",
    "attachment_line",
    "clean_name",
    "human_size",
    "inline_text",
    "save_upload",
    "session_inbox",
]
