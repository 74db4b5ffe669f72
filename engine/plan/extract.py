"""From approved plan Markdown to work items (docs/extraction.md).

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

from engine.checks.types import MAX_CHECKS, check_problem
from engine.plan.mdsource import (
    CHECKS_SECTION,
    Block,
    Doc,
    Section,
    columns,
    item_own_lines,
    list_items,
    norm_name,
    parse_plan,
    slice_lines,
    trim_blank_head,
    trim_blank_tail,
)

__all__ = [
    "MISSING_CONTEXT",
    "MISSING_INTENT",
    "MISSING_PROBLEM",
    "MISSING_STEPS",
    "MISSING_TARGET_STATE",
    "MISSING_TITLE",
    "WorkItem",
    "checks_in_criteria",
    "extract_work_items",
    "located_work_items",
    "plan_checks",
    "validate_template_b",
]


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
_TITLE_SEP = " — "


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
    # Commands its Done when names as checks (docs/checks.md), in order.
    checks: list[str] = field(default_factory=list)


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


def _is_done_when(doc: Doc, line: int) -> bool:
    return line not in doc.code_lines and bool(_DONE_WHEN.match(doc.lines[line]))


@dataclass(slots=True)
class _Parts:
    """A section's root blocks sorted into lists, lead-ins, glued ``Done when:`` and context."""

    blocks: list[Block]
    lead_ins: set[int]
    attached: set[int]
    context: list[tuple[int, str]]
    has_prose: bool
    has_list: bool


def _classify(doc: Doc, section: Section) -> _Parts:
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
        text = slice_lines(doc, b.start, b.end)
        if b.kind == "prose":
            nxt = blocks[idx + 1] if idx + 1 < len(blocks) else None
            if nxt is not None and nxt.kind == "list" and text.rstrip().endswith(":"):
                lead_ins.add(idx)
                continue
            has_prose = True
        context.append((b.start, text))
    has_list = any(b.kind == "list" for b in blocks)
    return _Parts(blocks, lead_ins, attached, context, has_prose, has_list)


def _section_raws(doc: Doc, section: Section, inherited: list[tuple[int, str]]) -> list[_Raw]:
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
            lead = [(prev.start, slice_lines(doc, prev.start, prev.end))]
        for s, e in list_items(b):
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
                own=item_own_lines(doc, s, own_end, end),
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
        base = columns(line[: len(line) - len(line.lstrip(" \t"))])
        while k < len(lines):
            if code[k]:
                break
            if not lines[k].strip():
                k += 1
                continue
            bm = _BULLET_LINE.match(lines[k])
            if bm is None or columns(bm.group(1)) < base:
                break
            criteria.append(bm.group(2).strip())
            k += 1
    return criteria, rest


def _finish(doc: Doc, raw: _Raw) -> WorkItem:
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
            description="\n".join(trim_blank_tail(trim_blank_head(rest))),
            acceptance_criteria=criteria,
            checks=checks_in_criteria(criteria),
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
        description="\n".join(trim_blank_tail(trim_blank_head(desc_lines))),
        acceptance_criteria=criteria,
        checks=checks_in_criteria(criteria),
    )


def _context_code_flags(doc: Doc, blocks: list[tuple[int, str]]) -> list[bool]:
    flags: list[bool] = []
    for n, (ln, text) in enumerate(blocks):
        if n:
            flags.append(False)  # the blank line of the "\n\n" joint
        count = text.count("\n") + 1
        flags.extend((ln + k) in doc.code_lines for k in range(count))
    return flags


def extract_work_items(markdown: str) -> list[WorkItem]:
    """Return the plan's work items in document order (deterministic; no model call).

    Each item's ``heading_path`` + ``work_body`` is its strict identity: any change to a
    heading, bullet, nested line or scoping prose gives a different identity.
    """
    return [item for _line, _bullet, item in located_work_items(markdown)]


def located_work_items(markdown: str) -> list[tuple[int, bool, WorkItem]]:
    """:func:`extract_work_items` with each item's first source line (0-based) and whether it
    is a list item."""
    doc = parse_plan(markdown)
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


# --------------------------------------------------------------------------- checks

_INLINE = MarkdownIt("commonmark")
# What makes a code span in a Done when a check: the words right after it.
_VERDICT = re.compile(
    r"^\s*(?:passes|pass|succeeds|succeed|exits 0|exit 0|exits with 0|returns 0|is green|are green)"
    r"\b",
    re.I,
)


def _keep(found: list[str], command: str) -> None:
    command = command.strip()
    if command and command not in found and check_problem([command]) is None:
        found.append(command)


def checks_in_criteria(criteria: list[str]) -> list[str]:
    """The commands a step's ``Done when:`` criteria name as checks, in order, deduplicated.

    A code span is a check when the words after it say it passes (``passes``, ``succeeds``,
    ``exits 0``, ``returns 0``, ``is green``) or when the criterion is that one code span and
    nothing else; any other code span (``hello("x")`` returns ...) is prose.
    """
    found: list[str] = []
    for criterion in criteria:
        for token in _INLINE.parseInline(criterion):
            children = token.children or []
            spans = [c for c in children if c.type == "code_inline"]
            if len(spans) == 1 and all(
                c.type == "code_inline" or not c.content.strip() for c in children
            ):
                _keep(found, spans[0].content)
                continue
            for k, child in enumerate(children):
                if child.type != "code_inline":
                    continue
                after = children[k + 1] if k + 1 < len(children) else None
                if after is not None and after.type == "text" and _VERDICT.match(after.content):
                    _keep(found, child.content)
    return found[:MAX_CHECKS]


def plan_checks(markdown: str) -> list[str]:
    """The commands of the plan's ``## Checks`` section: every code span in its prose and
    lists, and every non-blank line of its code blocks (``#`` comment lines skipped)."""
    doc = parse_plan(markdown)
    found: list[str] = []
    for section in doc.sections:
        if section.level != 2 or norm_name(section.name) != CHECKS_SECTION:
            continue
        for block in section.blocks:
            for token in block.tokens:
                if token.type in ("fence", "code_block"):
                    for line in token.content.split("\n"):
                        if line.strip() and not line.lstrip().startswith("#"):
                            _keep(found, line)
                elif token.type == "inline":
                    for child in token.children or []:
                        if child.type == "code_inline":
                            _keep(found, child.content)
    return found[:MAX_CHECKS]


# --------------------------------------------------------------------------- template B


_LABEL = re.compile(r"^\*\*(problem|target state|intent)(?::\*\*|\*\*:)(.*)$", re.I)


def validate_template_b(markdown: str) -> list[str]:
    """Return what the plan lacks to be approvable template B; ``[]`` when it is valid.

    Checks that the trimmed text opens with a non-empty ``# `` title (a level-one heading further
    down, or a setext ``Title`` / ``=====``, does not count), ``## Context`` with non-empty Problem,
    Target state and Intent, and at least one numbered step with text in
    ``## Implementation steps``. Same parse as extraction.
    """
    doc = parse_plan(markdown.strip())
    missing: list[str] = []
    if not (doc.opening_title or "").strip():
        missing.append(MISSING_TITLE)
    contexts = [s for s in doc.sections if s.level == 2 and norm_name(s.name) == "context"]
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
    # A step needs text: a bare "1." is an empty list item, not a step.
    has_step = any(
        any(line.strip() for line in item_own_lines(doc, start, end, end))
        for s in doc.sections
        if s.level == 2 and norm_name(s.name) == _STEPS_SECTION
        for b in s.blocks
        if b.kind == "list" and b.tokens[0].type == "ordered_list_open"
        for start, end in list_items(b)
    )
    if not has_step:
        missing.append(MISSING_STEPS)
    return missing
