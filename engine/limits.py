"""What a channel carries in one piece (``engine.ports.Channel.limits``).

A leaf module, so a tool can read the limits without importing the ports."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ChannelLimits:
    """What a channel carries in one piece; the engine's tools size what they send by it."""

    # Characters of one text message.
    message_chars: int = 4096
    # Characters of a file's caption.
    caption_chars: int = 1000
    # Bytes of one file the bot sends.
    file_bytes: int = 20 * 1024 * 1024


__all__ = ["ChannelLimits"]
