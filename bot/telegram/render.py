"""Markdown to Telegram HTML, and splitting HTML into messages (docs/telegram.md).

Telegram's HTML subset: ``b i u s code pre a blockquote`` (``pre`` may hold one
``<code class="language-x">``). Everything else is text: escaped with
``html.escape(..., quote=False)`` outside tags, attributes double-quoted and fully escaped.
Headings become bold lines, lists become text bullets or numbers, tables become ``pre``.

``split_html`` cuts at block boundaries (blank lines) and never inside a tag; a block that
is itself too long is cut inside, closing the open tags at the end of one chunk and
reopening them at the start of the next. The limit counts UTF-16 code units of the visible
text, as Telegram does.

``markdown_messages`` is what every send path uses: render, split, and when the Markdown renders
to nothing visible (a reply made only of link definitions) its escaped source, split too, so
no path sends an unsplit text. ``messages_or_document`` does that in a thread and says "send it
as a document" (``None``) for text that renders longer than a limit (without rendering it at
all when its source is far longer); ``summary_html`` is the first paragraph that goes with it.
"""

from __future__ import annotations

import asyncio
import html
import re
from dataclasses import dataclass
from typing import Any

import mistune

from bot.cardview import first_paragraph as first_paragraph
from bot.markup import BLOCK_SEP, ChatMarkupRenderer
from engine.text import ELLIPSIS, clip

TELEGRAM_TEXT_LIMIT = 4096


def escape(text: str) -> str:
    """Escape text for Telegram HTML (``& < >``; quotes stay as they are)."""
    return html.escape(text, quote=False)


def _attr(value: str) -> str:
    return html.escape(value, quote=True)


def utf16_len(text: str) -> int:
    """Length in UTF-16 code units, the unit Telegram's limits count in."""
    # surrogatepass: a lone surrogate that slipped past sanitizing counts as one unit, not a crash.
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


_SAFE_SCHEMES = ("http://", "https://", "tg://", "mailto:")


class TelegramHTMLRenderer(ChatMarkupRenderer):
    """A mistune 3 renderer that emits only Telegram's HTML subset.

    Top-level blocks are joined by a blank line, which is where ``split_html`` prefers to cut.
    """

    NAME = "telegram_html"
    EMPHASIS = ("<i>", "</i>")
    STRONG = ("<b>", "</b>")
    STRIKETHROUGH = ("<s>", "</s>")
    HEADING = ("<b>", "</b>")
    escape = staticmethod(escape)

    # ---- inline ----
    def _codespan(self, token: dict[str, Any], state: Any) -> str:
        return "<code>" + escape(token["raw"]) + "</code>"

    def _link(self, token: dict[str, Any], state: Any) -> str:
        url = str(token.get("attrs", {}).get("url", ""))
        text = self._children(token, state)
        if not url.lower().startswith(_SAFE_SCHEMES):
            return text  # a relative or unsafe link is shown as its text
        return f'<a href="{_attr(url)}">{text}</a>'

    def _image(self, token: dict[str, Any], state: Any) -> str:
        alt = self._children(token, state)
        url = str(token.get("attrs", {}).get("url", ""))
        if url.lower().startswith(_SAFE_SCHEMES):
            return f'<a href="{_attr(url)}">{alt or escape(url)}</a>'
        return alt

    # ---- blocks ----
    def _block_code(self, token: dict[str, Any], state: Any) -> str:
        code = escape(token["raw"].rstrip("\n")) or " "
        info = str(token.get("attrs", {}).get("info") or "").strip()
        lang = info.split(None, 1)[0] if info else ""
        if lang and re.fullmatch(r"[A-Za-z0-9_+#.-]{1,32}", lang):
            return f'<pre><code class="language-{_attr(lang)}">{code}</code></pre>'
        return f"<pre>{code}</pre>"

    def _block_quote(self, token: dict[str, Any], state: Any) -> str:
        parts = [self.render_token(c, state) for c in token.get("children", [])]
        inner = "\n".join(p.strip("\n") for p in parts if p.strip())
        # Telegram cannot nest blockquotes: an inner quote is flattened into the outer one.
        inner = inner.replace("<blockquote>", "").replace("</blockquote>", "")
        return "<blockquote>" + inner + "</blockquote>"

    # ---- tables (plugin) ----
    def _table(self, token: dict[str, Any], state: Any) -> str:
        rows: list[list[str]] = []
        for part in token.get("children", []):
            if part["type"] == "table_head":
                rows.append([self._cell_text(c, state) for c in part.get("children", [])])
            else:
                for row in part.get("children", []):
                    rows.append([self._cell_text(c, state) for c in row.get("children", [])])
        widths = [max(len(r[i]) for r in rows if i < len(r)) for i in range(max(map(len, rows)))]
        out = [" | ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip() for r in rows]
        return "<pre>" + escape("\n".join(out)) + "</pre>"

    def _cell_text(self, token: dict[str, Any], state: Any) -> str:
        rendered = self.render_tokens(token.get("children", []), state)
        return html.unescape(re.sub(r"<[^>]+>", "", rendered))


_markdown = mistune.create_markdown(
    renderer=TelegramHTMLRenderer(), plugins=["strikethrough", "table", "url"]
)


def markdown_to_html(markdown: str) -> str:
    """Render Markdown as Telegram HTML (blocks separated by blank lines)."""
    result = _markdown(markdown)
    return result if isinstance(result, str) else ""


def markdown_messages(markdown: str, limit: int = TELEGRAM_TEXT_LIMIT) -> list[str]:
    """Markdown as Telegram HTML messages of at most ``limit`` visible units each.

    Text that renders to nothing visible is sent as its escaped source, split the same way.
    CPU-bound (linear): on the event loop, use :func:`messages_or_document` for long text.
    """
    chunks = split_html(markdown_to_html(markdown), limit)
    return chunks or split_html(escape(markdown), limit)


def clip_html(text: str, limit: int = TELEGRAM_TEXT_LIMIT) -> str:
    """``text`` (Telegram HTML) cut to one message of at most ``limit`` visible units, tags
    balanced and entities whole, with "…" when something was cut."""
    chunks = split_html(text, limit - 1)
    if len(chunks) <= 1:
        return chunks[0] if chunks else text
    return chunks[0] + ELLIPSIS


def escape_within(text: str, max_units: int, *, one_line: bool = False) -> str:
    """Plain ``text`` escaped and cut (by :func:`engine.text.clip`, marked with "…") so the
    HTML is at most ``max_units`` UTF-16 units: escaping and emoji can make it longer."""
    limit = max_units
    out = escape(clip(text, limit, one_line=one_line))
    while utf16_len(out) > max_units and limit > 1:
        limit = limit * 3 // 4
        out = escape(clip(text, limit, one_line=one_line))
    return out


# Markdown source this many times longer than the visible limit is a document unrendered:
# rendering only drops markup, so its visible text could hardly fit (tables aside).
_SOURCE_FACTOR = 4


async def messages_or_document(markdown: str, *, max_visible: int) -> list[str] | None:
    """The messages for ``markdown``, rendered off the event loop; ``None`` when it should go
    as a document instead (its rendered text is longer than ``max_visible`` UTF-16 units).

    Text whose source alone is far longer is not rendered at all: a 10 MB reply costs seconds
    of rendering that no one would read as messages.
    """
    if len(markdown) > _SOURCE_FACTOR * max_visible:
        return None
    return await asyncio.to_thread(_messages_within, markdown, max_visible)


def _messages_within(markdown: str, max_visible: int) -> list[str] | None:
    rendered = markdown_to_html(markdown)
    if visible_len(rendered) > max_visible:
        return None
    return split_html(rendered) or split_html(escape(markdown))


def summary_html(markdown: str, limit: int) -> str:
    """The answer's first paragraph as Telegram HTML, cut to ``limit`` visible units."""
    first = first_paragraph(markdown)
    if not first:
        return ""
    return clip_html(markdown_to_html(first[: limit * _SOURCE_FACTOR]), limit)


# ---- splitting ---------------------------------------------------------------------------

_TOKEN = re.compile(
    r"<(/?)([a-zA-Z][a-zA-Z0-9-]*)([^>]*)>|&(?:#[0-9]+|#[xX][0-9a-fA-F]+|[a-zA-Z]+);"
)


@dataclass(frozen=True, slots=True)
class _Piece:
    """An indivisible run of source: a tag, an entity, or one character."""

    src: str
    visible: int  # UTF-16 units it shows
    tag: str | None = None  # tag name for tags
    closing: bool = False


def _pieces(src: str) -> list[_Piece]:
    out: list[_Piece] = []
    pos = 0
    for m in _TOKEN.finditer(src):
        out.extend(_Piece(ch, _char_len(ch)) for ch in src[pos : m.start()])
        if m.group(2) is not None:
            out.append(_Piece(m.group(0), 0, m.group(2).lower(), m.group(1) == "/"))
        else:
            out.append(_Piece(m.group(0), utf16_len(html.unescape(m.group(0)))))
        pos = m.end()
    out.extend(_Piece(ch, _char_len(ch)) for ch in src[pos:])
    return out


def _char_len(ch: str) -> int:
    return 2 if ord(ch) > 0xFFFF else 1


def visible_len(src: str) -> int:
    """UTF-16 length of the text Telegram would show for this HTML (linear in ``src``)."""
    total = 0
    pos = 0
    for m in _TOKEN.finditer(src):
        total += utf16_len(src[pos : m.start()])
        if m.group(2) is None:  # an entity shows as the character it names
            total += utf16_len(html.unescape(m.group(0)))
        pos = m.end()
    return total + utf16_len(src[pos:])


def _split_block(block: str, limit: int) -> list[str]:
    """Cut one over-long block, closing open tags at each cut and reopening them after."""
    pieces = _pieces(block)
    chunks: list[str] = []
    chunk_start = 0
    open_at_start: list[_Piece] = []
    stack: list[_Piece] = []
    size = 0
    newline_break: tuple[int, list[_Piece]] | None = None
    space_break: tuple[int, list[_Piece]] | None = None
    i = 0
    while i < len(pieces):
        piece = pieces[i]
        if piece.tag is not None:
            if not piece.closing:
                stack.append(piece)
            elif stack and stack[-1].tag == piece.tag:
                stack.pop()
            i += 1
            continue
        if size + piece.visible > limit and size > 0:
            # Cut after the last newline, else the last space, else right here.
            cut, open_at_cut = newline_break or space_break or (i, list(stack))
            body = "".join(p.src for p in pieces[chunk_start:cut])
            chunks.append(_reopen(open_at_start) + body + _closing(open_at_cut))
            chunk_start, open_at_start = cut, open_at_cut
            stack = list(open_at_cut)
            i, size = cut, 0
            newline_break = space_break = None
            continue
        size += piece.visible
        i += 1
        if piece.src == "\n":
            newline_break = (i, list(stack))
        elif piece.src == " ":
            space_break = (i, list(stack))
    body = "".join(p.src for p in pieces[chunk_start:])
    chunks.append(_reopen(open_at_start) + body)
    return [c for c in chunks if _has_text(c)]


def _reopen(stack: list[_Piece]) -> str:
    return "".join(p.src for p in stack)


def _closing(stack: list[_Piece]) -> str:
    return "".join(f"</{p.tag}>" for p in reversed(stack))


_TAG = re.compile(r"<(/?)([a-zA-Z][a-zA-Z0-9-]*)([^>]*)>")


def _has_text(chunk: str) -> bool:
    return bool(_TAG.sub("", chunk).strip())


def split_html(text: str, limit: int = TELEGRAM_TEXT_LIMIT) -> list[str]:
    """Split Telegram HTML into chunks of at most ``limit`` visible UTF-16 units each.

    Cuts between blocks (blank lines outside tags) first; only a block longer than the limit
    is cut inside, with its open tags closed and reopened. Every chunk is balanced HTML.
    Linear in the text (each block is measured once), but still CPU work: callers on the event
    loop run it in a thread for anything long.
    """
    if limit < 2:
        raise ValueError("limit must be at least 2")
    sep = visible_len(BLOCK_SEP)
    chunks: list[str] = []
    current: list[str] = []
    size = 0
    for block in _blocks(text):
        length = visible_len(block)
        if current and size + sep + length <= limit:
            current.append(block)
            size += sep + length
            continue
        if current:
            chunks.append(BLOCK_SEP.join(current))
            current, size = [], 0
        if length <= limit:
            current, size = [block], length
            continue
        parts = _split_block(block, limit)
        chunks.extend(parts[:-1])
        if parts:
            current, size = [parts[-1]], visible_len(parts[-1])
    rest = BLOCK_SEP.join(current)
    if _has_text(rest):
        chunks.append(rest)
    return chunks


def _blocks(text: str) -> list[str]:
    """Split at blank lines that are outside every tag."""
    blocks: list[str] = []
    depth = 0
    start = 0
    for m in re.finditer(r"<(/?)([a-zA-Z][a-zA-Z0-9-]*)[^>]*>|\n\n+", text):
        if m.group(0).startswith("\n"):
            if depth == 0:
                blocks.append(text[start : m.start()])
                start = m.end()
        elif m.group(1) == "/":
            depth = max(0, depth - 1)
        else:
            depth += 1
    blocks.append(text[start:])
    return [b for b in blocks if b.strip()]
