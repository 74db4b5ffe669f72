"""engine.text.clip: the one plain-text cut."""

from __future__ import annotations

import pytest

from engine.text import clip


def test_short_text_is_kept_whole() -> None:
    assert clip("plan", 4) == "plan"
    assert clip("", 1) == ""


def test_long_text_ends_in_an_ellipsis_within_the_limit() -> None:
    assert clip("abcdef", 4) == "abc…"
    assert len(clip("x" * 500, 120)) == 120
    assert clip("abc", 1) == "…"


def test_one_line_folds_whitespace_before_measuring() -> None:
    assert clip("a\n\n  b\tc", 10, one_line=True) == "a b c"
    assert clip("one two\nthree", 8, one_line=True) == "one two…"
    assert clip("a\nb", 10) == "a\nb"  # kept as is unless asked


def test_a_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        clip("text", 0)
