"""Speech to text for voice notes: an OpenAI-compatible ``audio/transcriptions`` endpoint.

:class:`OpenAITranscriber` sends the audio bytes to ``<base_url>/audio/transcriptions``
(OpenAI's Whisper API, and every server that copies it: faster-whisper-server, LocalAI,
Groq, vLLM's audio models) and returns the text. The model defaults to ``whisper-1``; the base
URL and key default to the chat model's (docs/inputs.md). Any failure is a
:class:`~engine.model.types.ModelError` whose message says what went wrong, never the key.
"""

from __future__ import annotations

import logging
from typing import Protocol

import openai

from engine.model.openai_provider import OPENAI_BASE_URL, PLACEHOLDER_API_KEY
from engine.model.types import ModelAuthError, ModelError

log = logging.getLogger("plangate.model.transcribe")

DEFAULT_TRANSCRIBE_MODEL = "whisper-1"


class Transcriber(Protocol):
    """Something that turns recorded speech into text."""

    async def transcribe(self, data: bytes, *, filename: str, mime: str) -> str:
        """The words spoken in ``data``; ModelError when there are none to be had."""
        ...


class OpenAITranscriber:
    """A :class:`Transcriber` over the openai SDK's ``audio.transcriptions``."""

    def __init__(
        self,
        model: str = DEFAULT_TRANSCRIBE_MODEL,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 120.0,
    ) -> None:
        self.model = model
        self.base_url = (base_url or OPENAI_BASE_URL).rstrip("/")
        self._client = openai.AsyncOpenAI(
            api_key=api_key or PLACEHOLDER_API_KEY,
            base_url=self.base_url,
            timeout=timeout_s,
            max_retries=2,
        )

    def __repr__(self) -> str:
        return f"OpenAITranscriber(model={self.model!r})"

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self._client.close()

    async def transcribe(self, data: bytes, *, filename: str, mime: str) -> str:
        """Send the audio; return its text (stripped). ModelError on any failure."""
        try:
            result = await self._client.audio.transcriptions.create(
                model=self.model, file=(filename, data, mime or "application/octet-stream")
            )
        except openai.APIStatusError as exc:
            if exc.status_code in (401, 403):
                raise ModelAuthError(
                    f"the transcription server refused the API key (HTTP {exc.status_code})"
                ) from None
            raise ModelError(
                f"the transcription server answered HTTP {exc.status_code}: {exc.message}"
            ) from None
        except openai.APIConnectionError as exc:
            raise ModelError(
                f"cannot reach the transcription server ({type(exc).__name__}); check "
                "PLANGATE_TRANSCRIBE_BASE_URL"
            ) from None
        except openai.OpenAIError as exc:
            raise ModelError(f"transcription failed: {type(exc).__name__}") from None
        except ValueError:
            # A body labelled JSON that does not parse (a proxy's error page, a broken server).
            raise ModelError(
                "the transcription server answered something that is not JSON"
            ) from None
        if isinstance(result, str):
            # The SDK hands back the raw body when it was not JSON at all (text/html, ...): no
            # transcript, whatever it says; "no words heard" would be untrue.
            raise ModelError(
                "the transcription server answered something that is not JSON: "
                f"{' '.join(result.split())[:80]!r}"
            )
        text = str(getattr(result, "text", "") or "").strip()
        log.info("plangate.model.transcribe.done bytes=%d chars=%d", len(data), len(text))
        return text


__all__ = ["DEFAULT_TRANSCRIBE_MODEL", "OpenAITranscriber", "Transcriber"]
