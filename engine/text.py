"""Text from outside (the model, Telegram) made safe to log, store and send, and cut short.

A lone UTF-16 surrogate (``"\\ud800"``, which JSON can carry as an escape) is a valid Python
``str`` but cannot be encoded as UTF-8: the event log's JSON, SQLite and Telegram all refuse
it, and the turn that carried it is lost. Text is cleaned once, where it enters the engine.
"""

from __future__ import annotations

import re
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD (a split pair is joined back)."""
    if not _SURROGATE.search(text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def clean_value(value: Any) -> Any:
    """:func:`clean_text` through a JSON-like value (dict keys, lists and strings)."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_value(k): clean_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clean_value(v) for v in value]
    return value


ELLIPSIS = "…"


def clip(text: str, limit: int, *, one_line: bool = False) -> str:
    """``text`` cut to at most ``limit`` characters, ending in "…" when something was cut.

    ``one_line`` first folds every run of whitespace (newlines included) into one space.
    Plain text only: Telegram HTML is cut by ``bot.render.clip_html`` (tags and entities)."""
    if limit < 1:
        raise ValueError(f"clip limit must be at least 1, got {limit}")
    if one_line:
        text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + ELLIPSIS


__all__ = ["ELLIPSIS", "clean_text", "clean_value", "clip"]
