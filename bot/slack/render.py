"""Slack's mrkdwn from the Markdown the engine writes (docs/slack.md).

The Markdown is rendered once, by the Telegram renderer (``bot.telegram.render``), into its small
HTML subset (``b i u s code pre a blockquote``), and that subset is rewritten here into mrkdwn:
``*bold*``, ``_italic_``, ``~struck~``, `` `code` ``, fenced blocks, ``<url|text>`` links and
``>`` quotes. Text is already escaped as Slack wants it (``&amp; &lt; &gt;``), so a person's
``<!channel>`` can never become a mention. The cards are written from the card view
(bot.cardview, bot.slack.cards); only a plan's own Markdown on the review card comes through
here.
"""

from __future__ import annotations

import html
import re

from bot.telegram.render import markdown_to_html
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

_TAG = re.compile(r"<(/?)([a-zA-Z-]+)([^>]*)>")
_HREF = re.compile(r'href="([^"]*)"')
_SIMPLE = {"b": "*", "strong": "*", "i": "_", "em": "_", "s": "~", "del": "~", "code": "`"}


def slack_escape(text: str) -> str:
    """Plain text made safe for mrkdwn (no mention, link or markup can be smuggled in)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def html_to_mrkdwn(text: str) -> str:
    """Telegram's HTML subset as Slack mrkdwn (unknown tags are dropped, their text kept)."""
    out: list[str] = []
    links: list[tuple[str, int]] = []
    pos = 0
    in_pre = 0
    quote_at: list[int] = []
    for match in _TAG.finditer(text):
        out.append(text[pos : match.start()])
        pos = match.end()
        closing, name, attrs = match.group(1) == "/", match.group(2).lower(), match.group(3)
        if name == "pre":
            in_pre += -1 if closing else 1
            out.append("\n```" if closing else "```\n")
        elif name in _SIMPLE:
            if not (name == "code" and in_pre):
                out.append(_SIMPLE[name])
        elif name == "a":
            if closing and links:
                url, start = links.pop()
                label = "".join(out[start:])
                del out[start:]
                out.append(f"<{url}|{label}>" if url and label else label or f"<{url}>")
            elif not closing:
                found = _HREF.search(attrs)
                url = slack_escape(html.unescape(found.group(1))) if found else ""
                links.append((url.replace("|", "%7C"), len(out)))
        elif name == "blockquote":
            if closing and quote_at:
                start = quote_at.pop()
                inner = "".join(out[start:])
                del out[start:]
                out.append("\n".join("> " + line for line in inner.split("\n")))
            elif not closing:
                quote_at.append(len(out))
    out.append(text[pos:])
    return "".join(out)


def markdown_to_mrkdwn(markdown: str) -> str:
    """The engine's Markdown as mrkdwn."""
    return html_to_mrkdwn(markdown_to_html(markdown))


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


__all__ = ["MESSAGE_CHARS", "SECTION_CHARS", "html_to_mrkdwn", "markdown_to_mrkdwn", "split_mrkdwn"]
