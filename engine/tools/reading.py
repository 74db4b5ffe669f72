"""Reading a window of a text file in bounded memory and time, whatever the file.

``read_file`` shows lines ``start..start+limit`` of a file the agent names, and that file may be
anything: a 200 MB log with no newline, a sparse 20 GB image made with ``truncate``. So the file
is read as bytes, in chunks of ``CHUNK_BYTES``, and never more than ``scan_bytes`` of it; a
shown line keeps at most ``line_chars`` characters (the rest is counted, not kept), and the
window at most ``max_chars``. Memory is then one chunk plus the window, and time is bounded by
``scan_bytes``, for any file. Past the scan the total line count is unknown, and the result
says so. Bytes that are not UTF-8 are shown as U+FFFD.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

CHUNK_BYTES = 1 << 20
# A UTF-8 character is at most four bytes: what a line of ``line_chars`` characters may need.
_UTF8_MAX = 4


@dataclass(slots=True)
class Window:
    """The lines shown (``lines``), the file's line count when the scan reached its end
    (``total``; ``None`` when it stopped at ``scan_bytes``), how many lines before the end of
    the scan were found (``seen``), the file's size, and the 0-based indexes of lines cut at
    ``line_chars`` with the characters they had (``cut``, approximate past the kept bytes)."""

    lines: list[str] = field(default_factory=list)
    total: int | None = None
    seen: int = 0
    size: int = 0
    scanned: int = 0
    cut: dict[int, int] = field(default_factory=dict)


def read_window(
    fd: int,
    start: int,
    limit: int,
    *,
    line_chars: int,
    max_chars: int,
    scan_bytes: int,
) -> Window:
    """Lines ``start`` (0-based) to ``start + limit`` of the open regular file ``fd``.

    Reads from the current position (the start of a freshly opened file) at most
    ``scan_bytes`` bytes. Lines end at ``\\n`` (a ``\\r`` before it is dropped).
    """
    window = Window(size=os.fstat(fd).st_size)
    keep = line_chars * _UTF8_MAX
    index = 0  # the line the next byte belongs to
    current = bytearray()  # the kept bytes of the line being read, when it is shown
    current_bytes = 0  # every byte of that line, kept or not
    shown_chars = 0
    full = False  # the window is complete: only counting lines from here on
    ended = False
    while window.scanned < scan_bytes:
        chunk = os.read(fd, min(CHUNK_BYTES, scan_bytes - window.scanned))
        if not chunk:
            ended = True
            break
        window.scanned += len(chunk)
        if full or index + chunk.count(b"\n") < start:
            # Nothing of this chunk is shown: count its lines and go on.
            index += chunk.count(b"\n")
            continue
        position = 0
        while position < len(chunk):
            newline = chunk.find(b"\n", position)
            end = len(chunk) if newline < 0 else newline
            if not full and start <= index < start + limit:
                room = keep - len(current)
                if room > 0:
                    current += chunk[position : min(end, position + room)]
                current_bytes += end - position
            if newline < 0:
                break
            if not full and start <= index < start + limit:
                shown_chars += _close_line(window, index, current, current_bytes, line_chars)
                current, current_bytes = bytearray(), 0
                full = len(window.lines) >= limit or shown_chars >= max_chars
            index += 1
            position = newline + 1
            if full:  # the rest of the chunk is only counted
                index += chunk.count(b"\n", position)
                break
    else:
        ended = os.read(fd, 1) == b""
    # A last line without a newline (or the one the scan stopped in) still shows.
    if (current or current_bytes) and not full and start <= index < start + limit:
        _close_line(window, index, current, current_bytes, line_chars)
    last_open = window.scanned > 0 and not _ends_with_newline(fd, window)
    window.seen = index + (1 if last_open else 0)
    window.total = window.seen if ended else None
    return window


def _close_line(
    window: Window, index: int, kept: bytearray, all_bytes: int, line_chars: int
) -> int:
    text = bytes(kept).decode("utf-8", "replace")
    if text.endswith("\r"):
        text = text[:-1]
    if len(text) > line_chars or all_bytes > len(kept):
        window.cut[index] = max(len(text), all_bytes)
        text = text[:line_chars]
    window.lines.append(text)
    return len(text)


def _ends_with_newline(fd: int, window: Window) -> bool:
    """Whether the last byte scanned is a newline (so no line is left open)."""
    try:
        return os.pread(fd, 1, window.scanned - 1) == b"\n"
    except OSError:
        return True


__all__ = ["CHUNK_BYTES", "Window", "read_window"]
