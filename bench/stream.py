"""A long answer in tiny chunks, and another chat meanwhile.

Run: ``python -m bench.stream [--kb 400] [--piece 8] [--probes 20]``.

Everything real except Telegram and the model server: the PTB ``Application`` polling the fake
Bot API (``tests/fakebot/server.py``), the engine over SQLite in a temporary home, and the real
openai SDK streaming from the fake chat-completions server (``tests/fakes/openai_server.py``),
all in one process and one event loop, as a real deployment has them.

1. Idle: the owner sends ``/status`` in a group, ``--probes`` times one after the other; the
   time from injecting each to the fake holding its answer.
2. Meanwhile: the owner's private chat asks for an answer of ``--kb`` kilobytes, which the
   server streams in pieces of ``--piece`` characters as fast as it can (the live draft on, as
   a private chat has it); while it streams, the group sends ``/status`` the same way, one after
   the other until the stream ends.

Printed: the median and the worst ``/status`` latency of each part, and their ratio (the cost
another chat pays for the stream), with the stream's length and duration. When every chunk
re-joined and re-scanned the text so far, another chat's ``/status`` took 16.6 s during a
400 kB stream; the target is a ratio near 1. Ratios, not absolute times, are the result.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from engine.model.script import say
from tests.fakebot.server import FakeBotApi
from tests.telegram.app_support import GROUP, OWNER
from tests.telegram.live import live_bot


async def _status_latency(api: FakeBotApi) -> float:
    before = len(api.bot_messages(GROUP))
    started = time.perf_counter()
    api.user_message(GROUP, OWNER, "/status")
    while len(api.bot_messages(GROUP)) <= before:
        await asyncio.sleep(0.001)
    return time.perf_counter() - started


async def run(kb: int, piece: int, probes: int) -> None:
    answer = ("The quick brown fox jumps over the lazy dog. " * (kb * 1024 // 45 + 1))[: kb * 1024]
    api = FakeBotApi()
    await api.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            async with live_bot(api, Path(tmp), [say(answer)]) as live:
                server = live.model_server
                assert server is not None
                server.stream_piece_chars = piece
                await _status_latency(api)  # warm: the group's session and route exist
                idle = [await _status_latency(api) for _ in range(probes)]

                started = time.perf_counter()
                api.user_message(OWNER, OWNER, "write it all out")
                while not server.chat_requests:  # the stream is asked for
                    await asyncio.sleep(0.001)
                busy: list[float] = []
                while server.streams_done == 0:
                    busy.append(await _status_latency(api))
                took = time.perf_counter() - started
                while not any(m.document for m in api.bot_messages(OWNER)):
                    await asyncio.sleep(0.01)
    finally:
        await api.stop()

    def ms(values: list[float]) -> str:
        return (
            f"median {statistics.median(values) * 1000:.1f} ms, worst {max(values) * 1000:.1f} ms"
        )

    print(
        f"stream: {len(answer):,} characters in {piece}-character pieces, {took:.1f} s "
        f"from the message to the last chunk"
    )
    print(f"/status idle:       {ms(idle)} ({len(idle)} probes)")
    print(f"/status meanwhile:  {ms(busy)} ({len(busy)} probes)")
    ratio = statistics.median(busy) / statistics.median(idle)
    print(f"ratio (median meanwhile / idle): {ratio:.2f}; worst {max(busy) / max(idle):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kb", type=int, default=400)
    parser.add_argument("--piece", type=int, default=8)
    parser.add_argument("--probes", type=int, default=20)
    args = parser.parse_args()
    asyncio.run(run(args.kb, args.piece, args.probes))


if __name__ == "__main__":
    main()
