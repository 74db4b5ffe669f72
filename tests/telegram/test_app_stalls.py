"""One chat's bad input must not stall the bot: while it is handled, /status elsewhere answers.

The real engine over real files and SQLite, the real PTB Application on the fake Bot API. The
model is gated on its first call so the /status update is already waiting when the bad tool call
starts: a frozen event loop would then answer it only after the freeze.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from pathlib import Path

from engine.model.script import ScriptedCall, ScriptStep, say
from engine.tools.files import SEARCH_CHILD_TAG, FileLimits
from tests.fakebot.server import FakeBotApi
from tests.telegram.app_support import GROUP, OWNER, eventually
from tests.telegram.live import live_bot
from tests.telegram.test_app_e2e import GatedProvider


def _grep_step(pattern: str, *, times: int = 1) -> ScriptStep:
    calls = tuple(ScriptedCall("grep", {"pattern": pattern}) for _ in range(times))
    return ScriptStep(tool_calls=calls)


async def _status_answered(
    fake_api: FakeBotApi, model: GatedProvider, turn_done: Callable[[], bool]
) -> bool:
    """Queue /status in the group, release the gated model call, wait for the answer; return
    whether the bad turn was still going when it came (no timing: an order of events)."""
    await asyncio.wait_for(model.entered.wait(), 10)
    before = len(fake_api.bot_messages(GROUP))
    fake_api.user_message(GROUP, OWNER, "/status")
    model.release.set()  # the bad tool call starts now, with /status already waiting
    await eventually(lambda: len(fake_api.bot_messages(GROUP)) > before, timeout_s=60)
    return not turn_done()


async def test_a_runaway_regex_does_not_stall_the_bot_and_stop_ends_its_search(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    # ^(a+)+$ on forty a's and a b backtracks for ever: the search never ends by itself, so
    # nothing here depends on the machine's speed (its deadline is far off and /stop ends it;
    # the deadline itself is tested on the tool, tests/agent/test_file_tools.py).
    (work / "a.txt").write_text("a" * 40 + "b\n", encoding="utf-8")
    model = GatedProvider([_grep_step("^(a+)+$"), say("never reached")], gate_at=1)
    limits = FileLimits(grep_timeout_s=600.0)
    async with live_bot(fake_api, tmp_path, [], model=model, file_limits=limits):
        fake_api.user_message(OWNER, OWNER, "find the runs of a")

        def stopped() -> bool:
            return any(m.text == "Stopped." for m in fake_api.bot_messages(OWNER))

        assert await _status_answered(fake_api, model, stopped)
        await eventually(lambda: bool(_search_children()), timeout_s=30)
        assert model.calls == 1  # the search runs; the bot answered all the same
        fake_api.user_message(OWNER, OWNER, "/stop")
        await eventually(stopped, timeout_s=30)
        await eventually(lambda: not _search_children(), timeout_s=30)
        assert model.calls == 1


def _search_children() -> list[int]:
    """Pids of this process's children running grep's search."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid() and (
            SEARCH_CHILD_TAG.encode() in cmd
        ):
            found.append(int(entry.name))
    return found


async def test_a_fifo_in_the_workspace_does_not_block_six_parallel_greps(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    fifo = work / "pipe"
    os.mkfifo(fifo)
    (work / "notes.txt").write_text("the needle\n", encoding="utf-8")
    model = GatedProvider(
        [_grep_step("needle", times=6), say("Found it.", expect="notes.txt:1: the needle")],
        gate_at=1,
    )
    try:
        async with live_bot(fake_api, tmp_path, [], model=model):
            fake_api.user_message(OWNER, OWNER, "where is the needle?")
            # Answered with nothing writing to the FIFO yet: no reader sits on it.
            await _status_answered(fake_api, model, lambda: False)
            await eventually(
                lambda: any("Found it." in m.text for m in fake_api.bot_messages(OWNER)),
                timeout_s=20,
            )
    finally:
        # Without the fix, readers sit in open() on the FIFO: a writer lets them go.
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


async def test_a_ten_megabyte_reply_goes_as_a_document_and_status_answers_meanwhile(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    huge = "\n\n".join(
        f"Paragraph {i}: " + "lorem ipsum dolor sit amet " * 20 for i in range(19_000)
    )
    assert len(huge) > 10_000_000
    model = GatedProvider([say(huge)], gate_at=1)
    async with live_bot(fake_api, tmp_path, [], model=model):
        fake_api.user_message(OWNER, OWNER, "write me a novel")

        def sent_as_document() -> bool:
            return any(m.document is not None for m in fake_api.bot_messages(OWNER))

        # Rendered off the loop: /status, queued in another chat while the novel is rendered,
        # is answered. Whether it comes before the document is a race between the render's
        # thread and the turn's own work on the loop (storing 10 MB), which a loaded machine
        # decides either way; that /status answers at all while the turn runs is the point.
        await _status_answered(fake_api, model, sent_as_document)
        await eventually(
            lambda: any(m.document is not None for m in fake_api.bot_messages(OWNER)),
            timeout_s=30,
        )
    sent = [m for m in fake_api.bot_messages(OWNER) if m.document is not None]
    assert len(sent) == 1 and sent[0].document is not None
    assert sent[0].document["file_name"] == "answer.md"
    texts = [m for m in fake_api.bot_messages(OWNER) if m.document is None]
    # One summary (the opening paragraph), no wall of messages.
    assert [m.text.split(":")[0] for m in texts if m.text.startswith("Paragraph")] == [
        "Paragraph 0"
    ]


async def test_lone_surrogates_are_replaced_and_the_turn_is_answered(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    # Over the real openai SDK: JSON carries "\ud800" as an escape, which decodes to a lone
    # surrogate that UTF-8 (the event log, SQLite, Telegram) cannot encode.
    script = [say("Done \ud800 here.", expect="hello \ufffd there")]
    async with live_bot(fake_api, tmp_path, script):
        fake_api.user_message(OWNER, OWNER, "hello \udc00 there")
        await eventually(
            lambda: any("Done" in m.text for m in fake_api.bot_messages(OWNER)), timeout_s=20
        )
    replies = [m.text for m in fake_api.bot_messages(OWNER) if "Done" in m.text]
    assert len(replies) == 1 and replies[0].startswith("Done \ufffd here.")


async def test_a_reply_of_only_link_definitions_is_split_and_delivered(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    # Link definitions render to nothing: the reply falls back to its source text, which must
    # be split like any other (9 KB in one message is refused as too long).
    defs = "\n".join(f"[ref{i}]: https://example.com/docs/page-{i}" for i in range(240))
    assert 9_000 < len(defs) < 5 * 4096
    async with live_bot(fake_api, tmp_path, [say(defs)]):
        # In the group: a private reply would end with the usage footer, which renders.
        fake_api.user_message(GROUP, OWNER, "@plangate_test_bot list the references")
        await eventually(
            lambda: any("ref239" in m.text for m in fake_api.bot_messages(GROUP)), timeout_s=20
        )
    parts = [m.text for m in fake_api.bot_messages(GROUP) if "[ref" in m.text]
    assert len(parts) >= 3
    assert all(len(p) <= 4096 for p in parts)
    # (a private reply may end with the usage footer: not a definition line)
    lines = [line for part in parts for line in part.splitlines() if line.startswith("[ref")]
    assert lines == defs.split("\n")  # every line, once, in order
