"""The one parse of a plan's Markdown, and exact source-line slicing (used by extract.py).

markdown-it-py (CommonMark) decides every block: fences, indented code and list containers.
Sections, blocks and items are then read as source line ranges from the tokens' ``map``, so
callers only ever cut exact slices out of the normalised source lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from markdown_it import MarkdownIt
from markdown_it.token import Token

_PARSER = MarkdownIt("commonmark")

# Sections that describe the plan rather than its work (matched case-insensitively, trimmed,
# a trailing colon ignored). Their subsections are not work either. ``## Checks`` names the
# whole plan's checks (docs/checks.md): gates, never tasks.
NON_WORK = frozenset({"context", "risks", "open questions", "notes", "checks"})
CHECKS_SECTION = "checks"

_MARKER = re.compile(r"^([ \t]*)([-*+]|\d{1,9}[.)])")
_PROSE_TYPES = frozenset({"paragraph_open", "blockquote_open", "html_block"})
_CODE_TYPES = frozenset({"fence", "code_block"})
_LIST_TYPES = frozenset({"bullet_list_open", "ordered_list_open"})


# --------------------------------------------------------------------------- the one parse


@dataclass(slots=True)
class Block:
    """A root-level block of a section: its kind, source lines [start, end) and token span."""

    kind: str  # "prose" | "code" | "list" | "other"
    start: int
    end: int
    tokens: list[Token]


@dataclass(slots=True)
class Section:
    """A ``##``-or-deeper root heading and its own root blocks (not its subsections')."""

    level: int
    name: str
    path: list[str]
    work: bool
    parent: Section | None
    blocks: list[Block] = field(default_factory=list)


@dataclass(slots=True)
class Doc:
    """The parse: normalised source lines, ``#`` titles, sections in order, code lines.

    ``opening_title`` is the text of the ATX ``# `` heading the document opens with (its first
    block), ``None`` when it opens with anything else (a setext title included).
    """

    lines: list[str]
    titles: list[str]
    sections: list[Section]
    code_lines: frozenset[int]
    opening_title: str | None = None


def normalise(markdown: str) -> list[str]:
    """Source lines: ``\\r\\n`` normalised, split on ``\\n`` only."""
    return markdown.replace("\r\n", "\n").split("\n")


def parse_plan(markdown: str) -> Doc:
    """Parse once; both the extractor and the validator read this."""
    lines = normalise(markdown)
    # markdown-it also breaks lines at a lone \r; we split on \n only, so keep the line
    # count aligned by showing the parser a space there (the slices still come from `lines`).
    tokens = _PARSER.parse("\n".join(lines).replace("\r", " "))
    code: set[int] = set()
    for tok in tokens:
        if tok.type in _CODE_TYPES and tok.map:
            code.update(range(tok.map[0], tok.map[1]))
    titles: list[str] = []
    sections: list[Section] = []
    stack: list[Section] = []
    current: Section | None = None
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.level != 0:
            i += 1
            continue
        if tok.type == "heading_open":
            level = int(tok.tag[1:])
            name = tokens[i + 1].content if i + 1 < len(tokens) else ""
            i += 3
            if level == 1:
                titles.append(name)
                stack = []
                current = None
                continue
            while stack and stack[-1].level >= level:
                stack.pop()
            parent = stack[-1] if stack else None
            work = norm_name(name) not in NON_WORK and (parent is None or parent.work)
            path = [*parent.path, name] if parent else [name]
            current = Section(level=level, name=name, path=path, work=work, parent=parent)
            sections.append(current)
            stack.append(current)
            continue
        j = _block_end(tokens, i)
        span = tokens[i:j]
        assert tok.map is not None
        if tok.type == "html_block" and _is_comment(tok.content):
            kind = "other"  # an HTML comment renders as nothing: no work in it
        elif tok.type in _PROSE_TYPES:
            kind = "prose"
        elif tok.type in _CODE_TYPES:
            kind = "code"
        elif tok.type in _LIST_TYPES:
            kind = "list"
        else:
            kind = "other"
        if current is not None:
            current.blocks.append(Block(kind, tok.map[0], tok.map[1], span))
        i = j
    first = tokens[0] if tokens else None
    opening = (
        tokens[1].content
        if first is not None and first.type == "heading_open" and first.markup == "#"
        else None
    )
    return Doc(
        lines=lines,
        titles=titles,
        sections=sections,
        code_lines=frozenset(code),
        opening_title=opening,
    )


def _is_comment(html: str) -> bool:
    text = html.strip()
    return text.startswith("<!--") and text.endswith("-->") and "-->" not in text[4:-3]


def _block_end(tokens: list[Token], i: int) -> int:
    """Index just past the root block opened at ``tokens[i]``."""
    if tokens[i].nesting != 1:
        return i + 1
    depth = 0
    j = i
    while j < len(tokens):
        if tokens[j].level == 0:
            depth += tokens[j].nesting
            if depth == 0:
                return j + 1
        j += 1
    return j


def norm_name(name: str) -> str:
    """A heading name for matching: trimmed, one trailing colon dropped, casefolded."""
    name = name.strip()
    if name.endswith(":"):
        name = name[:-1].rstrip()
    return name.casefold()


# --------------------------------------------------------------------------- slicing


def trim_blank_tail(lines: list[str]) -> list[str]:
    """``lines`` without trailing blank (whitespace-only) lines."""
    end = len(lines)
    while end > 0 and not lines[end - 1].strip():
        end -= 1
    return lines[:end]


def slice_lines(doc: Doc, start: int, end: int) -> str:
    """Source lines ``[start, end)`` joined, trailing blank lines trimmed."""
    return "\n".join(trim_blank_tail(doc.lines[start:end]))


def strip_columns(line: str, width: int) -> str:
    """Remove up to ``width`` columns of leading whitespace (tabs stop at multiples of 4).

    A tab that would cross ``width`` is kept whole, so the result is still a suffix of the line.
    """
    col = 0
    k = 0
    while k < len(line) and col < width:
        ch = line[k]
        if ch == " ":
            col += 1
        elif ch == "\t":
            nxt = col + 4 - col % 4
            if nxt > width:
                break
            col = nxt
        else:
            break
        k += 1
    return line[k:]


def columns(text: str) -> int:
    """The column width of ``text`` (tabs stop at multiples of 4)."""
    col = 0
    for ch in text:
        col = col + 4 - col % 4 if ch == "\t" else col + 1
    return col


def item_own_lines(doc: Doc, start: int, own_end: int, end: int) -> list[str]:
    """The item's lines with the marker off the first line and container indent off the rest.

    Lines in ``[own_end, end)`` are glued ``Done when:`` blocks from outside the item's
    container; they are kept verbatim.
    """
    first = doc.lines[start]
    m = _MARKER.match(first)
    if m is None:  # not expected for a list item's first line; keep it verbatim
        return trim_blank_tail(doc.lines[start:end])

    after = first[m.end() :]
    gap = len(after) - len(after.lstrip(" \t"))
    gap_cols = columns(first[: m.end() + gap]) - columns(first[: m.end()])
    rest = after[gap:]
    marker_cols = columns(first[: m.end()])
    if not rest or gap_cols > 4:
        # Blank after the marker, or indented code inside the item: content starts one
        # column after the marker.
        indent = marker_cols + 1
        text = after[1:] if after[:1] in (" ", "\t") else after
        if not rest:
            text = ""
    else:
        indent = marker_cols + gap_cols
        text = rest
    out = [text]
    out.extend(strip_columns(line, indent) for line in doc.lines[start + 1 : own_end])
    out.extend(doc.lines[own_end:end])
    return trim_blank_tail(out)


def list_items(block: Block) -> list[tuple[int, int]]:
    """Source line ranges of a root list's own items."""
    return [
        (t.map[0], t.map[1])
        for t in block.tokens
        if t.type == "list_item_open" and t.level == 1 and t.map is not None
    ]


def trim_blank_head(lines: list[str]) -> list[str]:
    """``lines`` without leading blank (whitespace-only) lines."""
    k = 0
    while k < len(lines) and not lines[k].strip():
        k += 1
    return lines[k:]
