"""The agent cannot make plangate's own writes fail (docs/security.md, "Whole-call limits"):
a small tmpfs in a private mount namespace stands in for the disk that holds both plangate's
home and the workspace. An approved run's bash fills it; plangate's home stays writable, the
run pauses with the reason on the card, and another chat keeps answering. Through the real
Application on the fake Bot API, the real engine, SQLite and bubblewrap, the real openai SDK
against the fake chat-completions server.

The outer test starts the inner one in its own mount namespace (``unshare -m``, then a tmpfs
``mount``): nothing of the host's mounts changes, and the tmpfs goes with the namespace.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bot.telegram.app import parts
from engine.events import RunPaused
from engine.model.script import call, say
from tests.checks.support import PLANNING, make_project
from tests.engine.helpers import settle
from tests.fakebot.server import FakeBotApi, FakeMessage
from tests.keys import chat
from tests.telegram.app_support import GROUP, OWNER, eventually
from tests.telegram.live import button, card, live_bot, until

DISK_ENV = "PLANGATE_TEST_DISK"
DISK_MB = 96
RESERVE_MB = 16
BOT = "@plangate_test_bot "


def test_a_full_disk_pauses_the_run_and_every_chat_keeps_answering(tmp_path: Path) -> None:
    if os.environ.get(DISK_ENV):
        pytest.skip("this is the outer test; the inner one runs in the namespace")
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and util-linux's unshare for a private mount namespace")
    disk = tmp_path / "disk"
    disk.mkdir()
    inner = f"{Path(__file__).resolve()}::test_inner_full_disk"
    done = subprocess.run(
        [
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            f'mount -t tmpfs -o size={DISK_MB}m plangate-disk "$0" && exec "$@"',
            str(disk),
            sys.executable,
            "-m",
            "pytest",
            "-v",
            "-p",
            "no:cacheprovider",
            inner,
        ],
        env={**os.environ, DISK_ENV: str(disk)},
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " 1 passed in " in done.stdout, done.stdout[-2000:]
    assert not any(disk.iterdir())  # the tmpfs was the namespace's: nothing landed here


FILL = "dd if=/dev/zero of=fill.bin bs=1M count=400 2>&1 | tail -1"


async def test_inner_full_disk(fake_api: FakeBotApi) -> None:
    where = os.environ.get(DISK_ENV)
    if not where:
        pytest.skip("runs inside the outer test's mount namespace only")
    disk = Path(where)
    make_project(disk / "work")
    script = [
        *PLANNING,
        call("plan", {"op": "start"}),
        call("bash", {"command": FILL}),
        # Nothing more of the run: it paused before its next step. The other chat's turn:
        say("Still answering.", expect="other chat"),
    ]
    async with live_bot(fake_api, disk, script, disk_reserve_mb=RESERVE_MB) as live:
        home = disk / "home"
        assert (home / ".disk-reserve").stat().st_size == RESERVE_MB * 1024 * 1024
        fake_api.user_message(GROUP, OWNER, "/plan Fix the health check")
        await eventually(lambda: len(fake_api.bot_messages(GROUP)) >= 1)
        sid = await live.engine.session_for_chat(chat(GROUP))
        await settle(live.engine, sid)
        await parts(live.app).presenter.flush()
        review = await card(fake_api, live, sid)
        fake_api.press(GROUP, review.message_id, button(review, "✅ Approve"), user_id=OWNER)

        async def paused() -> bool:
            events = await live.storage.log.read(sid, types=("run/paused",))
            return any(isinstance(e.event, RunPaused) for e in events)

        await until(paused, timeout_s=120)
        await settle(live.engine, sid, timeout_s=60)
        [event] = [e.event for e in await live.storage.log.read(sid, types=("run/paused",))]
        assert isinstance(event, RunPaused) and event.kind == "disk"
        assert "PLANGATE_DISK_RESERVE_MB" in event.text
        # The bash call that filled the disk was stopped with the reason, and its result kept.
        results = await live.storage.log.read(sid, types=("tool/result",))
        assert any("PLANGATE_DISK_RESERVE_MB" in getattr(r.event, "content", "") for r in results)
        # The card says why, where the run stands.
        await parts(live.app).presenter.flush()
        shown = await card(fake_api, live, sid)
        assert "Paused: the disk plangate's home is on has" in shown.text
        # plangate's home stays writable: the reserve went back to it.
        (home / "still-writable").write_bytes(b"x" * 1024 * 1024)
        # Another chat (a forum topic of its own) keeps answering: a command and a turn.
        before = len(fake_api.bot_messages(GROUP))
        fake_api.user_message(GROUP, OWNER, "/status", thread_id=5)
        await eventually(lambda: len(_topic(fake_api, 5)) >= 1)
        fake_api.user_message(GROUP, OWNER, BOT + "other chat: are you there?", thread_id=5)
        await eventually(
            lambda: any(m.text == "Still answering." for m in _topic(fake_api, 5)), timeout_s=60
        )
        assert len(fake_api.bot_messages(GROUP)) > before


def _topic(api: FakeBotApi, topic: int) -> list[FakeMessage]:
    return [m for m in api.bot_messages(GROUP) if m.thread_id == topic]


# More than any disk has free: the reserve can never be held, so the disk is always "low".
NEVER_ENOUGH_MB = 1 << 40


async def test_below_the_reserve_a_goal_blocks_and_a_person_still_gets_answers(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    script = [
        # The owner's own turn goes on; its bash is refused with the reason.
        call("bash", {"command": "echo hi > hi.txt"}),
        say("Bash was refused: the disk is low.", expect="PLANGATE_DISK_RESERVE_MB"),
    ]
    async with live_bot(fake_api, tmp_path, script, disk_reserve_mb=NEVER_ENOUGH_MB) as live:
        fake_api.user_message(GROUP, OWNER, '/goal keep the build green --check "true"')
        await eventually(lambda: len(fake_api.bot_messages(GROUP)) >= 1)
        sid = await live.engine.session_for_chat(chat(GROUP))

        async def blocked() -> bool:
            goal = await live.engine.goals.get(sid)
            return goal is not None and goal.phase == "blocked"

        await until(blocked, timeout_s=60)
        goal = await live.engine.goals.get(sid)
        assert goal is not None and goal.blocked is not None
        assert goal.blocked.code == "budget-limit"
        assert "PLANGATE_DISK_RESERVE_MB" in goal.blocked.message
        await settle(live.engine, sid)
        fake_api.user_message(GROUP, OWNER, BOT + "write hi.txt", thread_id=3)
        await eventually(
            lambda: any(m.text.startswith("Bash was refused") for m in _topic(fake_api, 3)),
            timeout_s=60,
        )
        assert not (live.workspace / "hi.txt").exists()
