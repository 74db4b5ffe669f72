"""What every channel's Markdown renderer shares: the walk over mistune 3's tokens, the blocks
and the lists, with the channel's own escaping and marks (bot/telegram/render.py writes
Telegram's HTML, bot/slack/render.py Slack's mrkdwn)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import mistune

BLOCK_SEP = "\n\n"


class ChatMarkupRenderer(mistune.BaseRenderer):
    """A mistune 3 renderer for a chat's markup; top-level blocks are joined by a blank line,
    which is where the channel's splitter prefers to cut.

    A channel sets ``escape`` (plain text made safe in its markup) and the marks around
    emphasis, strong, struck text and headings, and writes what differs more (code, links,
    images, quotes, tables)."""

    EMPHASIS: ClassVar[tuple[str, str]]
    STRONG: ClassVar[tuple[str, str]]
    STRIKETHROUGH: ClassVar[tuple[str, str]]
    HEADING: ClassVar[tuple[str, str]]
    # Plain text made safe in the channel's markup (a staticmethod on the channel's class).
    escape: ClassVar[Callable[[str], str]]

    def render_token(self, token: dict[str, Any], state: Any) -> str:
        method = getattr(self, "_" + token["type"], None)
        if method is not None:
            return str(method(token, state))
        # Unknown token types (from plugins) fall back to their text, escaped.
        if "children" in token:
            return self.render_tokens(token["children"], state)
        return self.escape(str(token.get("raw", "")))

    def __call__(self, tokens: Any, state: Any) -> str:
        blocks = [self.render_token(t, state) for t in tokens]
        return BLOCK_SEP.join(b.strip("\n") for b in blocks if b.strip())

    def _children(self, token: dict[str, Any], state: Any) -> str:
        return self.render_tokens(token.get("children", []), state)

    def _marked(self, marks: tuple[str, str], token: dict[str, Any], state: Any) -> str:
        return marks[0] + self._children(token, state) + marks[1]

    # ---- inline ----
    def _text(self, token: dict[str, Any], state: Any) -> str:
        return self.escape(token["raw"])

    def _emphasis(self, token: dict[str, Any], state: Any) -> str:
        return self._marked(self.EMPHASIS, token, state)

    def _strong(self, token: dict[str, Any], state: Any) -> str:
        return self._marked(self.STRONG, token, state)

    def _strikethrough(self, token: dict[str, Any], state: Any) -> str:
        return self._marked(self.STRIKETHROUGH, token, state)

    def _linebreak(self, token: dict[str, Any], state: Any) -> str:
        return "\n"

    def _softbreak(self, token: dict[str, Any], state: Any) -> str:
        return "\n"

    def _inline_html(self, token: dict[str, Any], state: Any) -> str:
        return self.escape(token["raw"])

    # ---- blocks ----
    def _paragraph(self, token: dict[str, Any], state: Any) -> str:
        return self._children(token, state)

    def _block_text(self, token: dict[str, Any], state: Any) -> str:
        return self._children(token, state)

    def _heading(self, token: dict[str, Any], state: Any) -> str:
        return self._marked(self.HEADING, token, state)

    def _blank_line(self, token: dict[str, Any], state: Any) -> str:
        return ""

    def _thematic_break(self, token: dict[str, Any], state: Any) -> str:
        return "———"

    def _block_html(self, token: dict[str, Any], state: Any) -> str:
        return self.escape(token["raw"].strip("\n"))

    def _block_error(self, token: dict[str, Any], state: Any) -> str:
        return self.escape(str(token.get("raw", "")))

    def _list(self, token: dict[str, Any], state: Any) -> str:
        """Bullets or numbers as text (neither channel has list markup), nested by indent."""
        attrs = token.get("attrs", {})
        ordered = bool(attrs.get("ordered"))
        depth = int(attrs.get("depth", 0))
        number = int(attrs.get("start", 1) or 1)
        indent = "  " * depth
        lines: list[str] = []
        for item in token.get("children", []):
            marker = f"{number}." if ordered else "•"
            number += 1
            parts = [
                self.render_token(child, state)
                for child in item.get("children", [])
                if child["type"] != "blank_line"
            ]
            body = "\n".join(p.strip("\n") for p in parts if p.strip())
            first, *rest = body.split("\n") if body else [""]
            lines.append(f"{indent}{marker} {first}")
            pad = indent + " " * (len(marker) + 1)
            lines.extend(r if r.startswith(indent + "  ") else pad + r for r in rest)
        return "\n".join(lines) + "\n"
