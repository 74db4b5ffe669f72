"""The Slack outbox against the fake Slack: a 429 waits exactly Retry-After and tries again;
calls in one conversation are paced about one a second; waiting edits of one message coalesce."""

from __future__ import annotations

import asyncio

from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.outbox import SlackOutbox
from tests.fakeslack.server import FakeSlack


class Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


async def test_retry_after_pacing_and_coalesced_edits(slack: FakeSlack) -> None:
    slack.channel("C0TEAM01")
    clock = Clock()
    client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)
    outbox = SlackOutbox(client, interval_s=1.0, clock=clock, sleep=clock.sleep)

    slack.fail_next("chat.postMessage", "ratelimited", status=429, retry_after=7)
    ts = await outbox.post("C0TEAM01", "first")
    assert clock.slept == [7.0] and outbox.retried == 1
    assert [m.text for m in slack.bot_messages("C0TEAM01")] == ["first"]

    # The next call in the same conversation waits out the interval since the last one.
    await outbox.post("C0TEAM01", "second")
    assert clock.slept == [7.0, 1.0]

    # Three edits of one message queued behind a post: only the newest text is sent.
    posting = asyncio.create_task(outbox.post("C0TEAM01", "third"))
    await asyncio.sleep(0)
    edits = [asyncio.create_task(outbox.update("C0TEAM01", ts, f"edit {i}")) for i in range(3)]
    await asyncio.gather(posting, *edits)
    await outbox.flush()
    assert slack.count("chat.update") == 1
    assert slack.message("C0TEAM01", ts).text == "edit 2"
