"""Hypothesis strategies for generated plan Markdown (shared by the extraction property tests).

Plans are random sequences of line fragments, so fences open and close at odd places, list
items nest and break, fences go unclosed, and code holds bullets and headings.
"""

from __future__ import annotations

from hypothesis import strategies as st

_HEADINGS = ["# Title", "## Steps", "### Sub", "#### Deep", "## Context", "## notes:", "## Work"]
_FRAGMENTS = [
    "- {w}",
    "* {w}",
    "+ {w}",
    "1. {w}",
    "2) {w}",
    "10. {w} — more {w}",
    "  - {w}",
    "   {w} continued",
    "    - {w}",
    "{w} prose.",
    "{w} lead-in:",
    "```",
    "```py",
    "~~~",
    "~~~~",
    "````",
    "  ```",
    "   ~~~",
    "    ```",
    "      code {w}",
    "> quote {w}",
    "---",
    "",
    "",
    "\t- {w}",
]
_DONE = ["   - Done when: {w}", "- Done when: {w}", "Done when: {w}"]


@st.composite
def plan_lines(draw: st.DrawFn, *, done_when: bool = False, max_lines: int = 40) -> str:
    """A generated plan; ``done_when`` adds ``Done when:`` fragments."""
    pool = _FRAGMENTS + (_DONE if done_when else [])
    n = draw(st.integers(min_value=0, max_value=max_lines))
    lines: list[str] = [draw(st.sampled_from(["## Steps", "# Title", "## Work", "- w"]))]
    for k in range(n):
        if draw(st.integers(0, 9)) == 0:
            lines.append(draw(st.sampled_from(_HEADINGS)))
        else:
            lines.append(draw(st.sampled_from(pool)).format(w=f"w{k}"))
    sep = draw(st.sampled_from(["\n", "\n", "\r\n"]))
    return sep.join(lines) + draw(st.sampled_from(["", "\n", "\n\n"]))
