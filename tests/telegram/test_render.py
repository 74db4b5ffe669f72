from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.telegram.render import (
    clip_html,
    escape,
    markdown_messages,
    markdown_to_html,
    split_html,
    utf16_len,
    visible_len,
)
from tests.fakebot.tg_html import HtmlParseError, parse_html


def visible(html_text: str) -> str:
    return parse_html(html_text).text


def test_escape_leaves_quotes_and_escapes_markup() -> None:
    assert escape('a < b & "c"') == 'a &lt; b &amp; "c"'


def test_markdown_uses_only_telegram_tags() -> None:
    out = markdown_to_html(
        "# Title <x>\n\nSome *em*, **bold**, `a<b`, ~~old~~ and [link](https://e.com/?a=1&b=2)."
        "\n\n- one\n- two\n\n1. first\n2. second\n\n> quoted\n\n```py\nif a < b:\n    pass\n```"
        "\n\n<div onclick=x>raw</div>"
    )
    parsed = parse_html(out)  # raises on anything Telegram would reject
    assert "<b>Title &lt;x&gt;</b>" in out
    assert "<i>em</i>" in out and "<b>bold</b>" in out and "<s>old</s>" in out
    assert "<code>a&lt;b</code>" in out
    assert '<a href="https://e.com/?a=1&amp;b=2">link</a>' in out
    assert "• one\n• two" in out and "1. first\n2. second" in out
    assert "<blockquote>quoted</blockquote>" in out
    assert '<pre><code class="language-py">if a &lt; b:\n    pass</code></pre>' in out
    assert "&lt;div onclick=x&gt;raw&lt;/div&gt;" in out
    assert "<div" not in out
    types = {e["type"] for e in parsed.entities}
    assert {"bold", "italic", "code", "strikethrough", "text_link", "blockquote", "pre"} <= types


def test_unsafe_link_is_plain_text() -> None:
    out = markdown_to_html("[x](javascript:alert(1)) and [y](relative/path)")
    assert "<a" not in out
    assert visible(out) == "x and y"


def test_nested_list_and_table_render_as_text() -> None:
    out = markdown_to_html("1. a\n   - b\n2. c\n\n| h | i |\n|---|---|\n| 1 | 2 |")
    assert "1. a\n  • b\n2. c" in out
    assert "<pre>h | i\n1 | 2</pre>" in out
    parse_html(out)


def test_split_keeps_short_text_whole() -> None:
    assert split_html("<b>hi</b>\n\nthere") == ["<b>hi</b>\n\nthere"]


def test_split_cuts_between_blocks_first() -> None:
    a, b = "<b>" + "a" * 30 + "</b>", "<i>" + "b" * 30 + "</i>"
    assert split_html(f"{a}\n\n{b}", limit=40) == [a, b]


def test_split_inside_a_long_block_closes_and_reopens_tags() -> None:
    block = '<a href="https://x.org/?a=1&amp;b=2"><b>' + "word " * 40 + "</b></a>"
    chunks = split_html(block, limit=50)
    assert len(chunks) > 1
    for chunk in chunks:
        assert utf16_len(visible(chunk)) <= 50
        assert chunk.startswith('<a href="https://x.org/?a=1&amp;b=2"><b>')
        assert chunk.endswith("</b></a>")
    assert "".join(visible(c) for c in chunks).split() == ["word"] * 40


def test_split_counts_utf16_units_and_entities() -> None:
    text = "😀" * 30 + "&amp;" * 10  # 60 + 10 units
    chunks = split_html(text, limit=21)
    assert all(utf16_len(visible(c)) <= 21 for c in chunks)
    assert "".join(visible(c) for c in chunks) == "😀" * 30 + "&" * 10


def test_split_rejects_tiny_limit() -> None:
    with pytest.raises(ValueError):
        split_html("abc", limit=1)


def test_visible_len_matches_the_fake_servers_parser() -> None:
    out = markdown_to_html("**a** & <b> 😀 `c`")
    assert visible_len(out) == utf16_len(visible(out))


def test_fake_parser_rejects_malformed_html() -> None:
    for bad in ["<b>x", "<b>x</i>", "</b>", "<div>x</div>", "a < b"]:
        with pytest.raises(HtmlParseError):
            parse_html(bad)


_md_fragment = st.sampled_from(
    [
        "word",
        "**bold text**",
        "*it*",
        "`co<de>`",
        "[l](https://e.com/a?b=1&c=2)",
        "a & b < c > d",
        "😀 émoji",
        "~~gone~~",
        "\n\n",
        "\n",
        "\n- item ",
        "\n1. step ",
        "\n# Head ",
        "\n> quote ",
        "\n\n```py\ncode <x> & y\n```\n\n",
        "<span>raw</span>",
        " ",
        "x" * 50,
    ]
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    parts=st.lists(_md_fragment, min_size=1, max_size=60),
    limit=st.integers(min_value=8, max_value=300),
)
def test_split_chunks_fit_and_parse(parts: list[str], limit: int) -> None:
    html_text = markdown_to_html("".join(parts))
    chunks = split_html(html_text, limit=limit)
    whole = visible(html_text)  # the renderer's output itself parses
    for chunk in chunks:
        parsed = parse_html(chunk)
        assert utf16_len(parsed.text) <= limit
        assert parsed.text.strip()
    # Nothing visible is lost: the chunks' text is the original's, modulo the whitespace
    # at cut points.
    assert "".join("".join(visible(c).split()) for c in chunks) == "".join(whole.split())


def test_clip_html_counts_visible_units_and_keeps_entities_whole() -> None:
    emoji = "😀" * 4000  # 8,000 UTF-16 units in 4,000 characters
    clipped = clip_html(emoji, 4000)
    assert clipped.endswith("…") and visible_len(clipped) <= 4000
    amps = clip_html("<b>" + "&amp;" * 5000 + "</b>", 100)
    assert visible_len(amps) <= 100 and amps.endswith("</b>…")
    assert "&am" not in amps.replace("&amp;", "")
    assert clip_html("short") == "short"


def test_markdown_that_renders_to_nothing_is_sent_as_its_source_split() -> None:
    defs = "\n".join(f"[r{i}]: https://example.com/{i}" for i in range(400))
    assert markdown_to_html(defs) == ""
    chunks = markdown_messages(defs)
    assert len(chunks) > 1 and all(visible_len(c) <= 4096 for c in chunks)
