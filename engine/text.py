"""Text from outside (the model, the chat) made safe to log, store and send, and cut short.

A lone UTF-16 surrogate (``"\\ud800"``, which JSON can carry as an escape) is a valid Python
``str`` but cannot be encoded as UTF-8: the event log's JSON, the database and the chat all refuse
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
    Plain text only: a channel's markup is cut by its own renderer (tags and entities)."""
    if limit < 1:
        raise ValueError(f"clip limit must be at least 1, got {limit}")
    if one_line:
        text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + ELLIPSIS


_AMOUNT = re.compile(r"^(\d+(?:\.\d+)?)\s*([km]?)$", re.IGNORECASE)
_SCALE = {"": 1, "k": 1_000, "m": 1_000_000}


def parse_tokens(text: str) -> int | None:
    """``200k`` -> 200000, ``1.5m`` -> 1500000, ``5000`` -> 5000; ``None`` unless >= 1.

    A token amount as people type it (a goal's budget, the daily cap); here, the lowest layer,
    because the goal commands and the usage ledger both read it."""
    match = _AMOUNT.match(text.strip().replace(",", "").replace("_", ""))
    if match is None:
        return None
    value = int(float(match.group(1)) * _SCALE[match.group(2).lower()])
    return value if value >= 1 else None


def fmt_tokens(value: int) -> str:
    """A token amount as shown: ``12,345``."""
    return f"{value:,}"


__all__ = ["ELLIPSIS", "clean_text", "clean_value", "clip", "fmt_tokens", "parse_tokens"]
