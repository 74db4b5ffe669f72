"""What the card, ``submit`` and Approve need from a plan's text, worked out once per revision.

A plan's ``.md`` is parsed for two answers: is it approvable template B (what is missing), and
what are its steps (work items, with their Done when lines). Both cost about a second per MB
of Markdown, and a review card is drawn many times at one revision, so :class:`PlanDigests`
keeps the answer per (plan id, revision, text length) and works it out in a worker thread,
never on the event loop. A text over the size limit (``PLANGATE_MAX_PLAN_KB``, default 512 KB)
is not parsed at all: it is refused where it is written or submitted, with its size.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

DEFAULT_MAX_PLAN_KB = 512
# Digests kept: a few per live session is plenty (one revision is drawn many times).
_KEPT = 64

Step = tuple[str, tuple[str, ...]]


def md_bytes(text: str) -> int:
    """The size of a plan text on disk (UTF-8)."""
    return len(text.encode("utf-8", "surrogatepass"))


def too_big_detail(size_bytes: int, max_bytes: int) -> str:
    """The line that says how big the plan is against the limit."""
    return (
        f"the plan .md would be {size_bytes / 1024:,.0f} KB; the limit is "
        f"{max_bytes // 1024:,} KB (PLANGATE_MAX_PLAN_KB)"
    )


@dataclass(frozen=True, slots=True)
class PlanDigest:
    """One plan text's answers. ``key`` is the (plan id, revision, length) it was made for;
    ``problems`` is template B's list of what is missing (empty: approvable); ``items`` are the
    extracted work items and ``steps`` their titles with Done when lines. A text over the
    limit (``too_big``) has neither."""

    key: tuple[str, int, int]
    size_bytes: int
    too_big: bool
    problems: tuple[str, ...] = ()
    items: tuple[Any, ...] = ()
    steps: tuple[Step, ...] = ()
    # Every check the plan names, with where: (command, "step N" | "whole plan").
    checks: tuple[tuple[str, str], ...] = ()

    @property
    def approvable(self) -> bool:
        return not self.too_big and not self.problems


def digest_plan(
    text: str,
    *,
    key: tuple[str, int, int],
    max_bytes: int,
    validate: Callable[[str], Sequence[str]],
    extract: Callable[[str], Sequence[Any]],
    plan_checks: Callable[[str], Sequence[str]] = lambda _text: (),
) -> PlanDigest:
    """Size check first, then template B, the work items and the checks (pure; run it off
    the loop)."""
    size = md_bytes(text)
    if size > max_bytes:
        return PlanDigest(key=key, size_bytes=size, too_big=True)
    items = tuple(extract(text))
    steps = tuple(
        (str(getattr(item, "title", "")), tuple(getattr(item, "acceptance_criteria", ())))
        for item in items
    )
    checks = [
        (str(command), f"step {n}")
        for n, item in enumerate(items, start=1)
        for command in getattr(item, "checks", ())
    ]
    checks.extend((str(command), "whole plan") for command in plan_checks(text))
    return PlanDigest(
        key=key,
        size_bytes=size,
        too_big=False,
        problems=tuple(validate(text)),
        items=items,
        steps=steps,
        checks=tuple(checks),
    )


class PlanDigests:
    """Digests by (plan id, revision, text length), made in a worker thread on first need."""

    def __init__(
        self,
        *,
        max_bytes: int,
        validate: Callable[[str], Sequence[str]],
        extract: Callable[[str], Sequence[Any]],
        plan_checks: Callable[[str], Sequence[str]] = lambda _text: (),
    ) -> None:
        self.max_bytes = max_bytes
        self._validate = validate
        self._extract = extract
        self._plan_checks = plan_checks
        self._kept: OrderedDict[tuple[str, int, int], PlanDigest] = OrderedDict()
        self.computed = 0  # digests worked out (not served from the cache), for tests

    def cached(self, plan_id: str, revision: int, text: str) -> PlanDigest | None:
        """The digest if it is already known (no work)."""
        return self._kept.get((plan_id, revision, len(text)))

    async def of(self, plan_id: str, revision: int, text: str) -> PlanDigest:
        """The digest of this revision's text: from the cache, else made in a thread."""
        key = (plan_id, revision, len(text))
        found = self._kept.get(key)
        if found is not None:
            self._kept.move_to_end(key)
            return found
        made = await asyncio.to_thread(self.make, text, key)
        self._kept[key] = made
        while len(self._kept) > _KEPT:
            self._kept.popitem(last=False)
        return made

    def make(self, text: str, key: tuple[str, int, int]) -> PlanDigest:
        """Work a digest out here and now (for a caller already off the loop, or a text
        that is not the live one)."""
        self.computed += 1
        return digest_plan(
            text,
            key=key,
            max_bytes=self.max_bytes,
            validate=self._validate,
            extract=self._extract,
            plan_checks=self._plan_checks,
        )


__all__ = [
    "DEFAULT_MAX_PLAN_KB",
    "PlanDigest",
    "PlanDigests",
    "Step",
    "digest_plan",
    "md_bytes",
    "too_big_detail",
]
