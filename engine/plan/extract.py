"""From approved plan Markdown to work items (spec/plan-reconciliation.md, DESIGN.md §5, §14).

One parse (markdown-it-py, CommonMark) serves both the extractor and the template-B validator.
Block tokens carry source line maps, so every ``work_body`` is built only from exact source
line slices: fences, indented code and list containers are decided by the CommonMark parser,
never by a line scan, so a line inside code can never start an item.

The rules as implemented are written down in docs/extraction.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from markdown_it import MarkdownIt
from markdown_it.token import Token

__all__ = [
    "MISSING_CONTEXT",
    "MISSING_INTENT",
    "MISSING_PROBLEM",
    "MISSING_STEPS",
    "MISSING_TARGET_STATE",
    "MISSING_TITLE",
    "WorkItem",
    "extract_work_items",
    "validate_template_b",
]

_PARSER = MarkdownIt("commonmark")

# Sections that describe the plan rather than its work (matched case-insensitively, trimmed,
# a trailing colon ignored). Their subsections are not work either.
_NON_WORK = frozenset({"context", "risks", "open questions", "notes"})

_STEPS_SECTION = "implementation steps"

# What validate_template_b reports; fixed strings so callers and tests can rely on them.
MISSING_TITLE = "a `# ` title line"
MISSING_CONTEXT = "a `## Context` section"
MISSING_PROBLEM = "a non-empty **Problem:** in `## Context`"
MISSING_TARGET_STATE = "a non-empty **Target state:** in `## Context`"
MISSING_INTENT = "a non-empty **Intent:** in `## Context`"
MISSING_STEPS = "at least one numbered step in `## Implementation steps`"

_DONE_WHEN = re.compile(
    r"^[ \t]*(?:(?:[-*+]|\d{1,9}[.)])[ \t]+)?(?:\*\*)?done when(?:\*\*:|:\*\*|:)[ \t]*(.*)$",
    re.I,
)
_BULLET_LINE = re.compile(r"^([ \t]*)[-*+][ \t]+(.*\S)[ \t]*$")
_MARKER = re.compile(r"^([ \t]*)([-*+]|\d{1,9}[.)])")
_TITLE_SEP = " — "

_PROSE_TYPES = frozenset({"paragraph_open", "blockquote_open", "html_block"})
_CODE_TYPES = frozenset({"fence", "code_block"})
_LIST_TYPES = frozenset({"bullet_list_open", "ordered_list_open"})


@dataclass(frozen=True, slots=True)
class WorkItem:
    """One unit of plan work: a bullet (with its nested lines) or a work section's prose/code.

    ``heading_path`` and ``work_body`` are its strict identity (``plan_identity`` version 1).
    """

    heading_path: list[str]
    work_body: str
    title: str
    description: str
    acceptance_criteria: list[str]


# --------------------------------------------------------------------------- the one parse


@dataclass(slots=True)
class _Block:
    """A root-level block of a section: its kind, source lines [start, end) and token span."""

    kind: str  # "prose" | "code" | "list" | "other"
    start: int
    end: int
    tokens: list[Token]


@dataclass(slots=True)
class _Section:
    level: int
    name: str
    path: list[str]
    work: bool
    parent: _Section | None
    blocks: list[_Block] = field(default_factory=list)


@dataclass(slots=True)
class _Doc:
    lines: list[str]
    titles: list[str]
    sections: list[_Section]
    code_lines: frozenset[int]


def _normalise(markdown: str) -> list[str]:
    """Source lines: ``\\r\\n`` normalised, split on ``\\n`` only."""
    return markdown.replace("\r\n", "\n").split("\n")


def _parse(markdown: str) -> _Doc:
    """Parse once; both the extractor and the validator read this."""
    lines = _normalise(markdown)
    # markdown-it also breaks lines at a lone \r; we split on \n only, so keep the line
    # count aligned by showing the parser a space there (the slices still come from `lines`).
    tokens = _PARSER.parse("\n".join(lines).replace("\r", " "))
    code: set[int] = set()
    for tok in tokens:
        if tok.type in _CODE_TYPES and tok.map:
            code.update(range(tok.map[0], tok.map[1]))
    titles: list[str] = []
    sections: list[_Section] = []
    stack: list[_Section] = []
    current: _Section | None = None
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
            work = _norm_name(name) not in _NON_WORK and (parent is None or parent.work)
            path = [*parent.path, name] if parent else [name]
            current = _Section(level=level, name=name, path=path, work=work, parent=parent)
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
            current.blocks.append(_Block(kind, tok.map[0], tok.map[1], span))
        i = j
    return _Doc(lines=lines, titles=titles, sections=sections, code_lines=frozenset(code))


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


def _norm_name(name: str) -> str:
    name = name.strip()
    if name.endswith(":"):
        name = name[:-1].rstrip()
    return name.casefold()


# --------------------------------------------------------------------------- slicing


def _trim_blank_tail(lines: list[str]) -> list[str]:
    end = len(lines)
    while end > 0 and not lines[end - 1].strip():
        end -= 1
    return lines[:end]


def _slice(doc: _Doc, start: int, end: int) -> str:
    return "\n".join(_trim_blank_tail(doc.lines[start:end]))


def _strip_columns(line: str, width: int) -> str:
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


def _columns(text: str) -> int:
    col = 0
    for ch in text:
        col = col + 4 - col % 4 if ch == "\t" else col + 1
    return col


def _item_own_lines(doc: _Doc, start: int, own_end: int, end: int) -> list[str]:
    """The item's lines with the marker off the first line and container indent off the rest.

    Lines in ``[own_end, end)`` are glued ``Done when:`` blocks from outside the item's
    container; they are kept verbatim.
    """
    first = doc.lines[start]
    m = _MARKER.match(first)
    if m is None:  # not expected for a list item's first line; keep it verbatim
        return _trim_blank_tail(doc.lines[start:end])

    after = first[m.end() :]
    gap = len(after) - len(after.lstrip(" \t"))
    gap_cols = _columns(first[: m.end() + gap]) - _columns(first[: m.end()])
    rest = after[gap:]
    marker_cols = _columns(first[: m.end()])
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
    out.extend(_strip_columns(line, indent) for line in doc.lines[start + 1 : own_end])
    out.extend(doc.lines[own_end:end])
    return _trim_blank_tail(out)


# --------------------------------------------------------------------------- items


@dataclass(slots=True)
class _Raw:
    """An item before ordering: its first source line, path, own body and scoping context."""

    line: int
    path: list[str]
    own: list[str]
    own_source_lines: list[int]
    context: list[tuple[int, str]]
    heading_named: bool


def _is_done_when(doc: _Doc, line: int) -> bool:
    return line not in doc.code_lines and bool(_DONE_WHEN.match(doc.lines[line]))


def _list_items(block: _Block) -> list[tuple[int, int]]:
    """Source line ranges of a root list's own items."""
    return [
        (t.map[0], t.map[1])
        for t in block.tokens
        if t.type == "list_item_open" and t.level == 1 and t.map is not None
    ]


@dataclass(slots=True)
class _Parts:
    """A section's root blocks sorted into lists, lead-ins, glued ``Done when:`` and context."""

    blocks: list[_Block]
    lead_ins: set[int]
    attached: set[int]
    context: list[tuple[int, str]]
    has_prose: bool
    has_list: bool


def _classify(doc: _Doc, section: _Section) -> _Parts:
    blocks = [b for b in section.blocks if b.kind != "other"]
    lead_ins: set[int] = set()
    attached: set[int] = set()
    context: list[tuple[int, str]] = []
    has_prose = False
    after_step = False  # the previous block ended with a step (a list item)
    for idx, b in enumerate(blocks):
        if b.kind == "list":
            after_step = True
            continue
        if b.kind == "prose" and after_step and _is_done_when(doc, b.start):
            # "Done when:" right after a step belongs to that step, even at column 0; a bare
            # "Done when:" brings the list under it along (its bullets are the criteria).
            attached.add(idx)
            m = _DONE_WHEN.match(doc.lines[b.end - 1]) if b.end - b.start == 1 else None
            nxt = blocks[idx + 1] if idx + 1 < len(blocks) else None
            if m and not m.group(1).strip() and nxt is not None and nxt.kind == "list":
                attached.add(idx + 1)
            continue
        after_step = False
        text = _slice(doc, b.start, b.end)
        if b.kind == "prose":
            nxt = blocks[idx + 1] if idx + 1 < len(blocks) else None
            if nxt is not None and nxt.kind == "list" and text.rstrip().endswith(":"):
                lead_ins.add(idx)
                continue
            has_prose = True
        context.append((b.start, text))
    has_list = any(b.kind == "list" for b in blocks)
    return _Parts(blocks, lead_ins, attached, context, has_prose, has_list)


def _section_raws(doc: _Doc, section: _Section, inherited: list[tuple[int, str]]) -> list[_Raw]:
    parts = _classify(doc, section)
    blocks = parts.blocks
    raws: list[_Raw] = []
    last_list = max((b.start for b in blocks if b.kind == "list"), default=-1)
    trailing = any(ln > last_list for ln, _t in parts.context)
    # The section's own item: its prose (with its code), a code-only section, or code that
    # follows every bullet (so no work text is dropped).
    if parts.context and (parts.has_prose or not parts.has_list or trailing):
        raws.append(
            _Raw(
                line=parts.context[0][0],
                path=section.path,
                own=[],
                own_source_lines=[],
                context=[*inherited, *parts.context],
                heading_named=True,
            )
        )
    # Steps as (start, own end, end with glued lines, lead-in): a "Done when:" item or
    # paragraph directly after a step extends that step instead of starting one.
    steps: list[tuple[int, int, int, list[tuple[int, str]]]] = []
    last: int | None = None
    for idx, b in enumerate(blocks):
        if idx in parts.attached and last is not None:
            steps[last] = (*steps[last][:2], b.end, steps[last][3])
            continue
        if b.kind != "list":
            last = None
            continue
        lead: list[tuple[int, str]] = []
        if idx - 1 in parts.lead_ins:
            prev = blocks[idx - 1]
            lead = [(prev.start, _slice(doc, prev.start, prev.end))]
        for s, e in _list_items(b):
            if last is not None and _is_done_when(doc, s):
                steps[last] = (*steps[last][:2], e, steps[last][3])
                continue
            steps.append((s, e, e, lead))
            last = len(steps) - 1
    for s, own_end, end, lead in steps:
        raws.append(
            _Raw(
                line=s,
                path=section.path,
                own=_item_own_lines(doc, s, own_end, end),
                own_source_lines=list(range(s, end)),
                # Context scopes the bullets after it, so a body reads in document order.
                context=[*inherited, *[c for c in parts.context if c[0] < s], *lead],
                heading_named=False,
            )
        )
    return raws


def _criteria_and_description(lines: list[str], code: list[bool]) -> tuple[list[str], list[str]]:
    """Split body lines into acceptance criteria and the remaining description lines."""
    criteria: list[str] = []
    rest: list[str] = []
    k = 0
    while k < len(lines):
        line = lines[k]
        m = None if code[k] else _DONE_WHEN.match(line)
        if m is None:
            rest.append(line)
            k += 1
            continue
        text = m.group(1).strip()
        k += 1
        if text:
            criteria.append(text)
            continue
        # "Done when:" alone: the bullets that follow are the criteria.
        base = _columns(line[: len(line) - len(line.lstrip(" \t"))])
        while k < len(lines):
            if code[k]:
                break
            if not lines[k].strip():
                k += 1
                continue
            bm = _BULLET_LINE.match(lines[k])
            if bm is None or _columns(bm.group(1)) < base:
                break
            criteria.append(bm.group(2).strip())
            k += 1
    return criteria, rest


def _finish(doc: _Doc, raw: _Raw) -> WorkItem:
    ctx_text = [t for _ln, t in raw.context]
    if raw.heading_named:
        body = "\n\n".join(ctx_text)
        own_ctx = [t for ln, t in raw.context if ln >= raw.line]
        own_lines = "\n\n".join(own_ctx).split("\n")
        # Context lines are whole blocks; find which are code by re-slicing their source.
        code_flags = _context_code_flags(doc, [(ln, t) for ln, t in raw.context if ln >= raw.line])
        criteria, rest = _criteria_and_description(own_lines, code_flags)
        return WorkItem(
            heading_path=list(raw.path),
            work_body=body,
            title=raw.path[-1].strip(),
            description="\n".join(_trim_blank_tail(_trim_blank_head(rest))),
            acceptance_criteria=criteria,
        )
    own = "\n".join(raw.own)
    body = "\n\n".join([*ctx_text, own]) if ctx_text else own
    code_flags = [(ln in doc.code_lines) for ln in raw.own_source_lines[: len(raw.own)]]
    code_flags += [False] * (len(raw.own) - len(code_flags))
    first_idx = next((k for k, ln in enumerate(raw.own) if ln.strip()), 0)
    first = raw.own[first_idx] if raw.own else ""
    if _TITLE_SEP in first and not code_flags[first_idx]:
        title, _sep, lead = first.partition(_TITLE_SEP)
        title = title.strip()
        lead = lead.strip()
    else:
        title, lead = first.strip(), ""
    if not title:
        title = first.strip() or raw.path[-1].strip()
    criteria, rest = _criteria_and_description(
        raw.own[first_idx + 1 :], code_flags[first_idx + 1 :]
    )
    desc_lines = [lead, *rest] if lead else rest
    return WorkItem(
        heading_path=list(raw.path),
        work_body=body,
        title=title,
        description="\n".join(_trim_blank_tail(_trim_blank_head(desc_lines))),
        acceptance_criteria=criteria,
    )


def _context_code_flags(doc: _Doc, blocks: list[tuple[int, str]]) -> list[bool]:
    flags: list[bool] = []
    for n, (ln, text) in enumerate(blocks):
        if n:
            flags.append(False)  # the blank line of the "\n\n" joint
        count = text.count("\n") + 1
        flags.extend((ln + k) in doc.code_lines for k in range(count))
    return flags


def _trim_blank_head(lines: list[str]) -> list[str]:
    k = 0
    while k < len(lines) and not lines[k].strip():
        k += 1
    return lines[k:]


def extract_work_items(markdown: str) -> list[WorkItem]:
    """Return the plan's work items in document order (deterministic; no model call).

    Each item's ``heading_path`` + ``work_body`` is its strict identity: any change to a
    heading, bullet, nested line or scoping prose gives a different identity.
    """
    return [item for _line, _bullet, item in _extract_located(markdown)]


def _extract_located(markdown: str) -> list[tuple[int, bool, WorkItem]]:
    """Items with their first source line and whether they are list items (for tests)."""
    doc = _parse(markdown)
    shared: dict[int, list[tuple[int, str]]] = {}
    raws: list[_Raw] = []
    for section in doc.sections:
        if not section.work:
            continue
        inherited = shared.get(id(section.parent), []) if section.parent else []
        shared[id(section)] = [*inherited, *_classify(doc, section).context]
        raws.extend(_section_raws(doc, section, inherited))
    raws.sort(key=lambda r: r.line)  # stable: document order, sections already in order
    return [(r.line, not r.heading_named, _finish(doc, r)) for r in raws]


# --------------------------------------------------------------------------- template B


_LABEL = re.compile(r"^\*\*(problem|target state|intent)(?::\*\*|\*\*:)(.*)$", re.I)


def validate_template_b(markdown: str) -> list[str]:
    """Return what the plan lacks to be approvable template B; ``[]`` when it is valid.

    Checks the ``#`` title, ``## Context`` with non-empty Problem, Target state and Intent,
    and at least one numbered step in ``## Implementation steps``. Same parse as extraction.
    """
    doc = _parse(markdown)
    missing: list[str] = []
    if not any(t.strip() for t in doc.titles):
        missing.append(MISSING_TITLE)
    contexts = [s for s in doc.sections if s.level == 2 and _norm_name(s.name) == "context"]
    if not contexts:
        missing.append(MISSING_CONTEXT)
    filled: set[str] = set()
    for s in contexts:
        for b in s.blocks:
            for t in b.tokens:
                if t.type != "inline":
                    continue
                # One paragraph may hold several labels, one per line.
                for line in t.content.split("\n"):
                    m = _LABEL.match(line.strip())
                    if m and m.group(2).strip():
                        filled.add(m.group(1).casefold())
    if contexts:
        for key, msg in (
            ("problem", MISSING_PROBLEM),
            ("target state", MISSING_TARGET_STATE),
            ("intent", MISSING_INTENT),
        ):
            if key not in filled:
                missing.append(msg)
    has_step = any(
        b.kind == "list" and b.tokens[0].type == "ordered_list_open" and _list_items(b)
        for s in doc.sections
        if s.level == 2 and _norm_name(s.name) == _STEPS_SECTION
        for b in s.blocks
    )
    if not has_step:
        missing.append(MISSING_STEPS)
    return missing
