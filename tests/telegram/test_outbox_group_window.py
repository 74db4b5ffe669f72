"""The outbox's rolling group window against a fake that enforces Telegram's group limit,
when a call takes time to arrive: Telegram counts a message when it arrives, so the window
must count it no earlier than that."""

from __future__ import annotations

from typing import Any

from telegram import Bot, Message

from bot.telegram.outbox import Outbox
from tests.fakebot.clock import ManualClock
from tests.fakebot.server import FakeBotApi

GROUP = -100600


class LaggingBot(Bot):
    """A Bot whose next sends spend ``lag_s`` of the manual clock on the way to the server."""

    def __init__(self, *args: Any, clock: ManualClock, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lag_clock = clock
        self._lags: list[float] = []

    def lag_next(self, *lags_s: float) -> None:
        self._lags.extend(lags_s)

    async def send_message(self, *args: Any, **kwargs: Any) -> Message:
        if self._lags:
            self._lag_clock.advance(self._lags.pop(0))
        return await super().send_message(*args, **kwargs)


async def test_a_slow_first_call_does_not_let_the_21st_arrive_inside_its_minute() -> None:
    clock = ManualClock()
    api = FakeBotApi(group_limit_per_minute=20, clock=clock)
    await api.start()
    try:
        async with LaggingBot(
            api.token, base_url=api.base_url, base_file_url=api.base_file_url, clock=clock
        ) as bot:
            api.chat(GROUP)
            out = Outbox(bot, clock=clock, sleep=clock.sleep, chat_burst=30, chat_interval_s=0.001)
            bot.lag_next(0.5)  # the first message is half a second on the way
            for i in range(22):
                await out.send_text(GROUP, f"g{i}")
    finally:
        await api.stop()
    assert api.group_429s == 0
    assert len(api.bot_messages(GROUP)) == 22
    arrivals = [c.at for c in api.calls_of("sendMessage")]
    assert len(arrivals) == 22  # no call was refused and retried
    for t in arrivals:
        assert sum(1 for u in arrivals if t - 60 < u <= t) <= 20
