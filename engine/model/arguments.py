"""Tool-call arguments from a model server, taken apart before anything else sees them.

A model server is not trusted with the shape of what it sends: arguments nested hundreds deep
were stored, then could not be read back (the JSON reader refuses that depth), and the session
failed on every turn, after restarts too. So argument text is judged before it is parsed:
over :data:`MAX_ARGUMENT_CHARS` characters or nested deeper than :data:`MAX_ARGUMENT_DEPTH`
levels, it is refused, and the model is told so as the call's tool error (docs/providers.md).
The depth is measured on the text, in one pass (strings skipped whole), so even a million
levels costs no recursion.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

# No tool's arguments need more: write_file's content is one string, a plan's tasks a few
# levels. (What is stored must load again; the reader allows about 200 levels in all.)
MAX_ARGUMENT_DEPTH = 32
# About 250k tokens: more than any model writes in one reply.
MAX_ARGUMENT_CHARS = 1_000_000
# How much of refused or broken argument text is kept to show the model.
SHOWN_CHARS = 200

# A JSON string (escapes included) or one bracket: what the depth scan needs to see.
_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)


@dataclass(frozen=True, slots=True)
class Arguments:
    """Argument text taken apart: the object, or ``{}`` with the text kept (at most
    :data:`SHOWN_CHARS` of it when refused) and, when refused, why."""

    value: dict[str, Any]
    raw: str = ""
    refused: str = ""


def depth_over(text: str, limit: int) -> bool:
    """Whether JSON ``text`` nests arrays and objects deeper than ``limit``."""
    if text.count("[") + text.count("{") <= limit:
        return False  # cannot nest deeper than it has brackets
    depth = 0
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > limit:
                return True
        elif token in "]}":
            depth -= 1
    return False


def parse_arguments(raw: str) -> Arguments:
    """The arguments a model sent as text: a JSON object, else refused or kept as broken."""
    if not raw.strip():
        return Arguments({})  # some servers send "" for a call without arguments
    if len(raw) > MAX_ARGUMENT_CHARS:
        return Arguments(
            {},
            raw[:SHOWN_CHARS],
            f"the arguments were refused: {len(raw):,} characters, more than the "
            f"{MAX_ARGUMENT_CHARS:,} a call may send; write large content in several calls",
        )
    if depth_over(raw, MAX_ARGUMENT_DEPTH):
        return Arguments(
            {},
            raw[:SHOWN_CHARS],
            f"the arguments were refused: nested deeper than {MAX_ARGUMENT_DEPTH} levels",
        )
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return Arguments({}, raw)
    if not isinstance(value, dict):
        return Arguments({}, raw)
    return Arguments(value)


def refused_size(length: int) -> Arguments:
    """What a streamed call whose argument text passed :data:`MAX_ARGUMENT_CHARS` becomes
    (the rest of it was not kept)."""
    return Arguments(
        {},
        "",
        f"the arguments were refused: more than the {MAX_ARGUMENT_CHARS:,} characters a call "
        f"may send ({length:,} arrived); write large content in several calls",
    )


__all__ = [
    "MAX_ARGUMENT_CHARS",
    "MAX_ARGUMENT_DEPTH",
    "Arguments",
    "depth_over",
    "parse_arguments",
    "refused_size",
]
