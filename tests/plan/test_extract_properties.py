"""Properties of extraction over generated plans, and a differential test against markdown-it-py.

The oracle here is markdown-it-py's own token stream, read independently of the extractor.
"""

from __future__ import annotations

from hypothesis import given, settings
from markdown_it import MarkdownIt
from markdown_it.token import Token

from engine.plan.extract import extract_work_items, located_work_items
from tests.plan.plangen import plan_lines

_SETTINGS = settings(max_examples=150, deadline=None)
_NON_WORK = {"context", "risks", "open questions", "notes"}


def _source_lines(md: str) -> list[str]:
    return md.replace("\r\n", "\n").split("\n")


def _tokens(md: str) -> list[Token]:
    return MarkdownIt("commonmark").parse(md.replace("\r\n", "\n"))


def _code_tokens(tokens: list[Token]) -> list[Token]:
    return [t for t in tokens if t.type in ("fence", "code_block") and t.map]


@_SETTINGS
@given(plan_lines(done_when=True))
def test_no_line_inside_a_code_block_ever_starts_an_item(md: str) -> None:
    tokens = _tokens(md)
    item_starts = {t.map[0] for t in tokens if t.type == "list_item_open" and t.map}
    for line, is_bullet, _item in located_work_items(md):
        if not is_bullet:
            continue
        assert line in item_starts  # only a real list item starts a bullet item
        for code in _code_tokens(tokens):
            assert code.map is not None
            lo, hi = code.map
            assert not lo < line < hi
            assert not (line == lo and code.level == 0)


@_SETTINGS
@given(plan_lines(done_when=True))
def test_every_work_body_is_made_only_of_exact_source_slices_in_document_order(md: str) -> None:
    src = _source_lines(md)
    for line, is_bullet, item in located_work_items(md):
        pos = 0
        last = -1
        for piece in item.work_body.split("\n"):
            if piece == "":
                continue
            # Context lines are whole source lines; the item's own lines (from its first line
            # on) are source lines with the marker or container indentation taken off.
            j = pos
            while j < len(src) and not (
                src[j] == piece or (is_bullet and j >= line and src[j].endswith(piece))
            ):
                j += 1
            assert j < len(src), (piece, item)
            pos = last = j + 1
        if is_bullet:
            assert last - 1 >= line  # the body ends with the item's own lines


@_SETTINGS
@given(plan_lines(done_when=True))
def test_bullet_body_ends_with_its_own_lines_marker_and_indent_removed(md: str) -> None:
    src = _source_lines(md)
    for line, is_bullet, item in located_work_items(md):
        if not is_bullet:
            continue
        first = src[line].lstrip(" \t")
        # The first own line is the item's first source line minus its marker and gap.
        marker_end = len(first) - len(first.lstrip("-*+0123456789.)"))
        rest = first[marker_end:]
        own_first = rest[1:] if rest[:1] in (" ", "\t") else rest
        assert own_first.lstrip(" \t") in item.work_body


@_SETTINGS
@given(plan_lines(done_when=True))
def test_extraction_is_deterministic(md: str) -> None:
    assert extract_work_items(md) == extract_work_items(str(md))
    assert extract_work_items(md) == extract_work_items(md.replace("\r\n", "\n"))


def _root_blocks(md: str) -> list[tuple[Token, list[str], bool]]:
    """Root tokens after the first ``##`` with their heading path and work flag (the oracle)."""
    tokens = _tokens(md)
    out: list[tuple[Token, list[str], bool]] = []
    stack: list[tuple[int, str, bool]] = []  # (level, name, work)
    for i, t in enumerate(tokens):
        if t.type == "heading_open" and t.level == 0:
            level = int(t.tag[1:])
            name = tokens[i + 1].content
            if level == 1:
                stack = []
                continue
            while stack and stack[-1][0] >= level:
                stack.pop()
            norm = name.strip().removesuffix(":").strip().casefold()
            work = norm not in _NON_WORK and all(w for _l, _n, w in stack)
            stack.append((level, name, work))
        elif stack and (t.level == 0 or (t.level == 1 and t.type == "list_item_open")):
            out.append((t, [n for _l, n, _w in stack], stack[-1][2]))
    return out


def _expected_bullets(md: str) -> list[tuple[int, list[str]]]:
    return [
        (t.map[0], path)
        for t, path, work in _root_blocks(md)
        if work and t.type == "list_item_open" and t.map is not None
    ]


@settings(max_examples=200, deadline=None)
@given(plan_lines(done_when=False))
def test_bullet_items_match_markdown_it_token_stream(md: str) -> None:
    got = [(line, item.heading_path) for line, b, item in located_work_items(md) if b]
    assert got == _expected_bullets(md)


@settings(max_examples=200, deadline=None)
@given(plan_lines(done_when=True))
def test_every_root_code_block_of_a_work_section_is_in_some_item_whole(md: str) -> None:
    src = _source_lines(md)
    items = extract_work_items(md)
    for t, path, work in _root_blocks(md):
        if not work or t.type not in ("fence", "code_block") or t.map is None:
            continue
        lines = src[t.map[0] : t.map[1]]
        while lines and not lines[-1].strip():
            lines.pop()
        whole = "\n".join(lines)
        assert any(whole in i.work_body and i.heading_path[: len(path)] == path for i in items)


@settings(max_examples=200, deadline=None)
@given(plan_lines(done_when=True))
def test_nothing_outside_work_sections_reaches_an_item(md: str) -> None:
    works = {tuple(p) for _t, p, w in _root_blocks(md) if w}
    for item in extract_work_items(md):
        assert tuple(item.heading_path) in works
