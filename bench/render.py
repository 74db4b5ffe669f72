"""Splitting rendered replies into Telegram messages: does it grow linearly with the text?

Run: ``python -m bench.render [--sizes 250,1000,2000] [--corpus DIR] [--repeat R]``.

For N paragraphs of 12 words each, times ``markdown_to_html`` (the mistune render) and
``split_html`` of its output separately. Linear splitting keeps ``split / render`` flat as N
grows and ``split(2000) / split(250)`` near 8. Then the same over every ``*.md`` in the corpus
folder (real plan documents; read in place, never copied into the repository), one by one, and
the largest of them repeated to about 1 MB. Each figure is the best of R runs with the heap
collected first, in CPU time of this process (the work is single-threaded, and on a shared
machine wall time mostly measures the neighbours).
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable
from pathlib import Path

from bot.telegram.render import markdown_to_html, split_html

_WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "and", "runs", "far"]
_ROOT = Path(__file__).resolve().parents[1]


def paragraphs(n: int) -> str:
    """``n`` paragraphs of 12 words, some with inline markup, blank-line separated."""
    out = []
    for i in range(n):
        words = list(_WORDS)
        if i % 3 == 0:
            words[2] = f"**{words[2]}**"
        if i % 5 == 0:
            words[5] = f"`{words[5]}`"
        out.append(" ".join(words) + f" {i}.")
    return "\n\n".join(out)


def _best(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def _default_corpus() -> Path | None:
    for up in (_ROOT.parent, _ROOT.parent.parent):  # beside the checkout, or a worktree's
        candidate = up / "shared" / "corpus"
        if candidate.is_dir():
            return candidate
    return None


def main(argv: list[str] | None = None) -> None:
    """Print render and split timings per size, then for the corpus."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="250,1000,2000")
    parser.add_argument("--corpus", type=Path, default=None)
    parser.add_argument("--repeat", type=int, default=3)
    opts = parser.parse_args(argv)
    sizes = [int(s) for s in opts.sizes.split(",")]

    print("paragraphs | chars | render ms | split ms | split/render | messages")
    split_ms: dict[int, float] = {}
    for n in sizes:
        md = paragraphs(n)
        html = markdown_to_html(md)
        render = _best(lambda md=md: markdown_to_html(md), opts.repeat)
        split = _best(lambda html=html: split_html(html), opts.repeat)
        split_ms[n] = split * 1000
        chunks = len(split_html(html))
        print(
            f"{n} | {len(md)} | {render * 1000:.1f} | {split * 1000:.1f} | "
            f"{split / render:.2f} | {chunks}"
        )
    if len(sizes) > 1:
        lo, hi = sizes[0], sizes[-1]
        print(
            f"split({hi}) / split({lo}) = {split_ms[hi] / split_ms[lo]:.1f} (linear: {hi / lo:.1f})"
        )

    corpus = opts.corpus or _default_corpus()
    if corpus is None or not corpus.is_dir():
        print("corpus: not found (pass --corpus DIR)")
        return
    docs = sorted(corpus.glob("*.md"))
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in docs]
    htmls = [markdown_to_html(t) for t in texts]
    render = _best(lambda: [markdown_to_html(t) for t in texts], opts.repeat)
    split = _best(lambda: [split_html(h) for h in htmls], opts.repeat)
    chars = sum(map(len, texts))
    messages = sum(len(split_html(h)) for h in htmls)
    print(
        f"corpus: {len(docs)} documents, {chars} chars | render {render * 1000:.1f} ms | "
        f"split {split * 1000:.1f} ms | split/render {split / render:.2f} | {messages} messages"
    )
    biggest = max(texts, key=len)
    big = "\n\n".join([biggest] * max(1, 1_000_000 // max(1, len(biggest))))
    big_html = markdown_to_html(big)
    render = _best(lambda: markdown_to_html(big), 1)
    split = _best(lambda: split_html(big_html), 1)
    print(
        f"largest repeated: {len(big)} chars | render {render * 1000:.0f} ms | "
        f"split {split * 1000:.0f} ms | split/render {split / render:.2f}"
    )


if __name__ == "__main__":
    main()
