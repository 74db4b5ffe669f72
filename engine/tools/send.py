"""The ``send_file`` tool: attach a file the agent names to the chat (docs/agent.md).

The path is the boundary's answer, exactly as for the read tools (``engine.tools.boundary``:
resolved first, then inside the workspace or a read-only root such as the session inbox, and
never a hidden path: the home, the plan files, ``.env``, the secret files), so the agent can
send what it could read and nothing more; what the descriptor opened is judged again.
Regular files only, at most what the channel takes (``Channel.limits``: file size and caption
length are the channel's, never constants here); the file is read in a thread, never on the
event loop.
"""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path
from typing import Any, Protocol

from engine.inbox import human_size
from engine.limits import ChannelLimits
from engine.tools.base import ToolContext, ToolOutcome
from engine.tools.boundary import Boundary, BoundaryPolicy, NotVisible
from engine.tools.effects import BUILTIN
from engine.tools.workspace import OutsideWorkspace


class FileChannel(Protocol):
    """The part of the chat channel this tool uses (the engine's ``Channel`` has it)."""

    @property
    def limits(self) -> ChannelLimits:
        """What one file and caption may hold on this channel."""
        ...

    async def send_file(
        self, session_id: str, data: bytes, filename: str, *, caption: str | None
    ) -> None:
        """Attach a file to the chat; raises when it was not sent."""
        ...


class TooBig(Exception):
    """The file is over the limit (its size is the argument)."""


def _read_regular(path: Path, limit: int, boundary: Boundary) -> bytes | None:
    """The bytes of a regular file (None for a FIFO, socket or device); TooBig past ``limit``.

    Opened non-blocking and checked on the descriptor, like the read tools' reads; a link
    swapped in after the check is judged by the file it opened."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        opened = Path(os.readlink(f"/proc/self/fd/{fd}"))
        if opened != path and not boundary.visible(opened):
            raise NotVisible(str(path), opened)
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        if info.st_size > limit:
            raise TooBig(info.st_size)
        with open(fd, "rb", closefd=False) as handle:
            data = handle.read(limit + 1)
        if len(data) > limit:
            raise TooBig(len(data))
        return data
    finally:
        os.close(fd)


class SendFileTool:
    """``send_file {path, caption?}``; exclusive (attachments arrive in the order sent)."""

    name = "send_file"
    declaration = BUILTIN["send_file"]

    def __init__(
        self,
        channel: FileChannel,
        *,
        max_bytes: int | None = None,
        boundary: BoundaryPolicy | None = None,
    ) -> None:
        """``max_bytes`` lowers the channel's file limit; ``boundary`` decides what may be
        sent (without one: the workspace and the read roots, nothing hidden)."""
        self._channel = channel
        self._max_bytes = max_bytes
        self._policy = boundary or BoundaryPolicy()
        self.description = (
            "Attach a file from the workspace (or one the owner sent) to the chat, e.g. a "
            "report, a patch or a generated image, with an optional short caption. At most "
            f"{human_size(self.max_bytes)}."
        )

    @property
    def max_bytes(self) -> int:
        """What one file may weigh: the channel's limit, or less when set lower."""
        limit = self._channel.limits.file_bytes
        return limit if self._max_bytes is None else min(limit, self._max_bytes)

    @property
    def parameters(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "file path, relative to the workspace"},
                "caption": {"type": "string"},
            },
            "required": ["path"],
            "additionalProperties": False,
        }

    def is_concurrency_safe(self, args: dict[str, Any]) -> object:
        return False

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        raw = args.get("path")
        caption = args.get("caption")
        if not isinstance(raw, str) or not raw.strip():
            return ToolOutcome("error: path must be a non-empty string", is_error=True)
        if caption is not None and not isinstance(caption, str):
            return ToolOutcome("error: caption must be a string", is_error=True)
        try:
            boundary = await self._policy.for_call(ctx)
            path = await asyncio.to_thread(boundary.readable, raw)
            data = await asyncio.to_thread(_read_regular, path, self.max_bytes, boundary)
        except OutsideWorkspace as exc:
            return ToolOutcome(exc.result_text(ctx.workspace), is_error=True)
        except TooBig as exc:
            size = int(exc.args[0])
            return ToolOutcome(
                f"error: {raw!r} is {human_size(size)}; send_file sends at most "
                f"{human_size(self.max_bytes)} (compress it or send a part)",
                is_error=True,
            )
        except FileNotFoundError:
            return ToolOutcome(f"error: {raw!r} does not exist", is_error=True)
        except IsADirectoryError:
            return ToolOutcome(f"error: {raw!r} is a folder, not a file", is_error=True)
        except OSError as exc:
            return ToolOutcome(f"error: {type(exc).__name__}: {exc.strerror or exc}", True)
        if data is None:
            return ToolOutcome(
                f"error: {raw!r} is not a regular file (a FIFO, socket or device)", True
            )
        most = self._channel.limits.caption_chars
        shown = caption.strip()[:most] if caption and caption.strip() else None
        try:
            await self._channel.send_file(ctx.session_id, data, path.name, caption=shown)
        except Exception as exc:  # the chat's failure is the tool's result, not a crash
            return ToolOutcome(
                f"error: the file could not be sent ({type(exc).__name__}: {exc})", True
            )
        return ToolOutcome(f"sent {path.name} ({human_size(len(data))}) to the chat")


__all__ = ["SendFileTool"]
