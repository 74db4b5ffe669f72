"""Files, photos and voice notes from the chat: what arrived, whether it may be fetched, and
fetching it (docs/inputs.md).

``incoming_of`` reads one message's attachment from Telegram's metadata alone (no download):
a document, the largest photo size within ``max_image_px``, a voice note or an audio file.
``refusal`` decides from the declared size whether it may be fetched at all: a bot can
download at most 20 MB (``getFile``), and ``PLANGATE_MAX_UPLOAD_MB`` may lower that. ``fetch``
downloads the bytes through PTB, from the server ``PLANGATE_TELEGRAM_API_URL`` names (the
application's ``base_file_url``), and checks the size again (a size may be undeclared).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from telegram import Bot, Message, PhotoSize
from telegram.error import BadRequest, TelegramError

from engine.api import human_size

_log = logging.getLogger("plangate.uploads")

TELEGRAM_DOWNLOAD_BYTES = 20 * 1024 * 1024
IncomingKind = Literal["file", "image", "voice"]
# Documents with these types are pictures sent "as a file" (no compression): images too.
_IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/webp", "image/gif"})


@dataclass(frozen=True, slots=True)
class InputSettings:
    """The front end's limits for what the owner sends (``bot.settings``)."""

    max_upload_mb: float = 20.0
    max_image_px: int = 2048

    @property
    def limit_bytes(self) -> int:
        """The largest file fetched: the setting, never above Telegram's 20 MB."""
        return upload_limit_bytes(self.max_upload_mb)


@dataclass(frozen=True, slots=True)
class Incoming:
    """One attachment of a message, as Telegram describes it (nothing fetched yet)."""

    kind: IncomingKind
    file_id: str
    name: str | None
    size: int | None  # as declared; None when Telegram did not say
    mime: str
    default_name: str  # the name to use when the sender's is empty or unusable


class UploadRefused(Exception):
    """The file may not be fetched; the message is the one line the owner gets."""


def incoming_of(msg: Message, *, max_image_px: int) -> Incoming | None:
    """The message's attachment, or None when it has none this bot takes."""
    if msg.document is not None:
        doc = msg.document
        mime = doc.mime_type or ""
        kind: IncomingKind = "image" if mime in _IMAGE_TYPES else "file"
        return Incoming(kind, doc.file_id, doc.file_name, doc.file_size, mime, "upload")
    if msg.photo:
        size = pick_photo(msg.photo, max_image_px=max_image_px)
        name = f"photo-{msg.message_id}.jpg"
        return Incoming("image", size.file_id, name, size.file_size, "image/jpeg", name)
    if msg.voice is not None:
        voice = msg.voice
        name = f"voice-{msg.message_id}.ogg"
        return Incoming(
            "voice", voice.file_id, name, voice.file_size, voice.mime_type or "audio/ogg", name
        )
    if msg.audio is not None:
        audio = msg.audio
        name = f"audio-{msg.message_id}"
        return Incoming(
            "voice", audio.file_id, audio.file_name, audio.file_size, audio.mime_type or "", name
        )
    return None


def pick_photo(sizes: tuple[PhotoSize, ...], *, max_image_px: int) -> PhotoSize:
    """The largest size whose longer side is within ``max_image_px`` (else the smallest):
    Telegram sends several sizes of one photo, and their dimensions say which fits."""
    fitting = [s for s in sizes if max(s.width, s.height) <= max_image_px]
    if fitting:
        return max(fitting, key=lambda s: s.width * s.height)
    return min(sizes, key=lambda s: s.width * s.height)


def upload_limit_bytes(max_upload_mb: float) -> int:
    """The largest file fetched: the setting, never above what Telegram lets a bot fetch."""
    return min(int(max_upload_mb * 1024 * 1024), TELEGRAM_DOWNLOAD_BYTES)


def too_big_text(size: int | None, limit: int) -> str:
    """The one reply a file over the limit gets."""
    shown = f"{human_size(size)}, " if size is not None else ""
    return (
        f"⚠️ That file is too big ({shown}the limit is {human_size(limit)}); nothing was saved. "
        "Send a smaller file, or split or compress it."
    )


def refusal(incoming: Incoming, limit: int) -> str | None:
    """Why the file may not be fetched, from its declared size; None when it may."""
    if incoming.size is not None and incoming.size > limit:
        return too_big_text(incoming.size, limit)
    return None


async def fetch(bot: Bot, incoming: Incoming, limit: int) -> bytes:
    """Download the file's bytes; :class:`UploadRefused` with the reply when that fails."""
    try:
        file = await bot.get_file(incoming.file_id)
        if file.file_size is not None and file.file_size > limit:
            raise UploadRefused(too_big_text(file.file_size, limit))
        data = bytes(await file.download_as_bytearray())
    except BadRequest as err:
        if "too big" in err.message.lower():
            raise UploadRefused(too_big_text(incoming.size, limit)) from None
        _log.warning("plangate.uploads.fetch_refused %s", err.message)
        raise UploadRefused(
            f"⚠️ Telegram would not hand over that file ({err.message}); nothing was saved."
        ) from None
    except TelegramError as err:
        _log.warning("plangate.uploads.fetch_failed %s", type(err).__name__)
        raise UploadRefused(
            "⚠️ I could not fetch that file from Telegram "
            f"({type(err).__name__}); nothing was saved. Try sending it again."
        ) from None
    if len(data) > limit:
        raise UploadRefused(too_big_text(len(data), limit))
    return data


__all__ = [
    "TELEGRAM_DOWNLOAD_BYTES",
    "Incoming",
    "InputSettings",
    "UploadRefused",
    "fetch",
    "incoming_of",
    "pick_photo",
    "refusal",
    "too_big_text",
    "upload_limit_bytes",
]
