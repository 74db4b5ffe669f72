"""Extraction of a 2,000-step template-B plan against markdown-it-py's bare parse (docs/bench.md).

Run: ``python -m bench.extract [--steps N] [--repeat R]``.

Both sides get the same text: ``extract_work_items`` (parse, sections, slicing, titles,
criteria) against ``MarkdownIt("commonmark").parse`` alone. Each figure is the best of R runs
with the heap collected first; the ratio, not the absolute time, is the result.
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable

from markdown_it import MarkdownIt

from engine.plan.extract import extract_work_items, validate_template_b


def make_plan(steps: int) -> str:
    """A template-B plan with ``steps`` numbered steps, nested lines, criteria and code."""
    out = [
        "# Benchmark plan",
        "",
        "## Context",
        "- **Problem:** a large plan",
        "- **Target state:** a checklist",
        "- **Intent:** measure extraction",
        "",
        "## Implementation steps",
    ]
    for n in range(1, steps + 1):
        pad = " " * len(f"{n}. ")  # nested lines sit at the step's content column
        out.append(f"{n}. Step {n} — change module_{n % 37}.py and run its tests")
        if n % 3 == 0:
            out.append(f"{pad}details for step {n}, with `code` and **bold**")
        if n % 5 == 0:
            out += [f"{pad}```sh", f"{pad}make test-{n}", f"{pad}- not a task", f"{pad}```"]
        if n % 2 == 0:
            out.append(f"{pad}- Done when: check {n} passes")
        if n % 7 == 0:
            out.append(f"- Done when: glued criterion {n}")
    out += ["", "## Risks", "- none", ""]
    return "\n".join(out)


def _best(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main(argv: list[str] | None = None) -> None:
    """Print both timings and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args(argv)
    text = make_plan(args.steps)
    md = MarkdownIt("commonmark")
    items = extract_work_items(text)
    assert len(items) == args.steps, len(items)
    assert validate_template_b(text) == []
    bare = _best(lambda: md.parse(text), args.repeat)
    full = _best(lambda: extract_work_items(text), args.repeat)
    print(f"plan: {args.steps} steps, {text.count(chr(10)) + 1} lines, {len(text)} chars")
    print(f"markdown-it-py parse : {bare * 1000:8.1f} ms")
    print(f"extract_work_items   : {full * 1000:8.1f} ms")
    print(f"ratio extract/parse  : {full / bare:8.2f}x")


if __name__ == "__main__":
    main()
