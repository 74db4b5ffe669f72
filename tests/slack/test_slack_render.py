"""Slack writes the engine's Markdown in mrkdwn with its own renderer (bot.slack.render)."""

from __future__ import annotations

from bot.slack.render import markdown_to_mrkdwn


def test_markdown_becomes_mrkdwn_and_nobody_is_mentioned_through_it() -> None:
    text = markdown_to_mrkdwn(
        "# Title\n\nDone: **greet.py** and _its_ `test` <!channel> "
        "[site](https://x.org/a|b) [local](./file.md)\n\n- one\n- two\n\n> quoted\n\n"
        "```py\nx = 1 < 2\n```"
    )
    assert text.split("\n\n") == [
        "*Title*",
        "Done: *greet.py* and _its_ `test` &lt;!channel&gt; <https://x.org/a%7Cb|site> local",
        "• one\n• two",
        "> quoted",
        "```\nx = 1 &lt; 2\n```",
    ]


def test_a_table_is_a_fenced_block_of_columns() -> None:
    assert markdown_to_mrkdwn("| a | b |\n|---|---|\n| 1 | 22 |") == "```\na | b\n1 | 22\n```"
