"""Slack's mrkdwn from the Markdown the engine writes (docs/slack.md).

The Markdown is parsed by mistune (the parser Telegram's renderer uses too) and written here
straight into mrkdwn: ``*bold*``, ``_italic_``, ``~struck~``, `` `code` ``, fenced blocks,
``<url|text>`` links, ``>`` quotes and bullets. Text is escaped as Slack wants it (``&amp;
&lt; &gt;``), so a person's ``<!channel>`` can never become a mention. The cards are written
from the card view (bot.cardview, bot.slack.cards); a plan's own Markdown on the review card
comes through here, as the replies do.
"""

from __future__ import annotations

from typing import Any

import mistune

from bot.markup import ChatMarkupRenderer
from engine.limits import ChannelLimits

# A section block's text (Slack refuses more); a message's text is far longer, but Slack folds
# anything past about 4,000 characters behind "Show more", so replies are cut near that.
SECTION_CHARS = 3000
MESSAGE_CHARS = 3900
# What Slack carries in one piece: the text a message shows whole (MESSAGE_CHARS), a file's
# comment, and the files the bot sends (Slack takes far larger; a phone wants less).
SLACK_LIMITS = ChannelLimits(
    message_chars=MESSAGE_CHARS, caption_chars=1000, file_bytes=20 * 1024 * 1024
)
_SAFE_SCHEMES = ("http://", "https://", "mailto:")


def slack_escape(text: str) -> str:
    """Plain text made safe for mrkdwn (no mention, link or markup can be smuggled in)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def fence(text: str) -> str:
    """``text`` as a fenced block (escaped; a fence inside it cannot close the block)."""
    return "```\n" + slack_escape(text).replace("```", "`\u200b``") + "\n```"


def _plain(token: dict[str, Any]) -> str:
    """A token's text without any marks (a table cell's)."""
    if "children" in token:
        return "".join(_plain(child) for child in token["children"])
    return str(token.get("raw", ""))


class MrkdwnRenderer(ChatMarkupRenderer):
    """A mistune 3 renderer that writes Slack's mrkdwn; top-level blocks are joined by a
    blank line, which is where ``split_mrkdwn`` prefers to cut."""

    NAME = "slack_mrkdwn"
    EMPHASIS = ("_", "_")
    STRONG = ("*", "*")
    STRIKETHROUGH = ("~", "~")
    HEADING = ("*", "*")
    escape = staticmethod(slack_escape)

    # ---- inline ----
    def _codespan(self, token: dict[str, Any], state: Any) -> str:
        return "`" + slack_escape(token["raw"]).replace("`", "'") + "`"

    def _link(self, token: dict[str, Any], state: Any) -> str:
        url = str(token.get("attrs", {}).get("url", ""))
        text = self._children(token, state)
        if not url.lower().startswith(_SAFE_SCHEMES):
            return text  # a relative or unsafe link is shown as its text
        target = slack_escape(url).replace("|", "%7C")
        return f"<{target}|{text}>" if text else f"<{target}>"

    def _image(self, token: dict[str, Any], state: Any) -> str:
        alt = self._children(token, state)
        url = str(token.get("attrs", {}).get("url", ""))
        if url.lower().startswith(_SAFE_SCHEMES):
            target = slack_escape(url).replace("|", "%7C")
            return f"<{target}|{alt}>" if alt else f"<{target}>"
        return alt

    # ---- blocks ----
    def _block_code(self, token: dict[str, Any], state: Any) -> str:
        return fence(token["raw"].rstrip("\n") or " ")

    def _block_quote(self, token: dict[str, Any], state: Any) -> str:
        parts = [self.render_token(c, state) for c in token.get("children", [])]
        inner = "\n".join(p.strip("\n") for p in parts if p.strip())
        return "\n".join("> " + line for line in inner.split("\n"))

    # ---- tables (plugin): a fenced block of aligned columns ----
    def _table(self, token: dict[str, Any], state: Any) -> str:
        rows: list[list[str]] = []
        for part in token.get("children", []):
            if part["type"] == "table_head":
                rows.append([_plain(c) for c in part.get("children", [])])
            else:
                rows.extend(
                    [_plain(c) for c in row.get("children", [])] for row in part["children"]
                )
        if not rows:
            return ""
        widths = [max(len(r[i]) for r in rows if i < len(r)) for i in range(max(map(len, rows)))]
        out = [" | ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip() for r in rows]
        return fence("\n".join(out))


_markdown = mistune.create_markdown(
    renderer=MrkdwnRenderer(), plugins=["strikethrough", "table", "url"]
)


def markdown_to_mrkdwn(markdown: str) -> str:
    """The engine's Markdown as mrkdwn (blocks separated by blank lines)."""
    result = _markdown(markdown)
    return result if isinstance(result, str) else slack_escape(markdown)


def split_mrkdwn(text: str, limit: int = MESSAGE_CHARS) -> list[str]:
    """``text`` in pieces of at most ``limit`` characters, cut at blank lines, then lines,
    then anywhere (a fenced block cut in two is closed and reopened)."""
    pieces: list[str] = []
    rest = text
    while len(rest) > limit:
        cut = rest.rfind("\n\n", 0, limit)
        if cut <= 0:
            cut = rest.rfind("\n", 0, limit)
        if cut <= 0:
            cut = limit
        head, rest = rest[:cut], rest[cut:].lstrip("\n")
        if head.count("```") % 2:
            head, rest = head + "\n```", "```\n" + rest
        pieces.append(head)
    if rest.strip():
        pieces.append(rest)
    return pieces or [""]


__all__ = [
    "MESSAGE_CHARS",
    "SECTION_CHARS",
    "SLACK_LIMITS",
    "fence",
    "markdown_to_mrkdwn",
    "slack_escape",
    "split_mrkdwn",
]
