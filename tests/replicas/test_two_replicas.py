"""Two real ``plangate run`` replicas in webhook mode on one PostgreSQL (tests/pg.py), the fake
Bot API and the fake model server in this process, a git repository as the workspace and bash
in the real bubblewrap sandbox. Updates are POSTed to either replica at random
(tests/replicas/live.py).

- Ten groups plan, approve and finish at once: each chat's updates processed once, in order, by
  one owner; each plan's events appended once; one card per plan.
- SIGKILL of the replica that owns a running plan: the other takes the chat within the lease
  time, the card offers Resume, Resume finishes the plan on the new owner, every event the
  dead one had committed is still there, and nothing was armed by the takeover.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import asyncpg

from engine.model.script import say
from tests.engine.helpers import EXECUTION, PLANNING
from tests.fakebot.server import FakeBotApi, FakeMessage
from tests.fakes.openai_server import FakeOpenAIServer
from tests.projects.support import make_repo
from tests.replicas.live import RoutedScript, replica_env, running
from tests.telegram.app_support import OWNER

# Short enough that a dead replica's chat moves within the test's bounds, long enough that a
# loaded 2-core machine renews well inside it.
LEASE_TTL_S = 5


def _labels(msg: FakeMessage) -> list[str]:
    return [text for row in msg.buttons for text, _ in row]


def _button(msg: FakeMessage, label: str) -> str:
    return next(d for row in msg.buttons for text, d in row if text == label)


def _with(api: FakeBotApi, chat: int, label: str) -> FakeMessage | None:
    return next((m for m in api.bot_messages(chat) if label in _labels(m)), None)


def _finished(api: FakeBotApi, chat: int) -> bool:
    return _said(api, chat, "All done")


def _replies(api: FakeBotApi, chat: int, message_id: int) -> list[FakeMessage]:
    return [m for m in api.bot_messages(chat) if m.reply_to == message_id]


def _said(api: FakeBotApi, chat: int, start: str) -> bool:
    return any(m.text.startswith(start) for m in api.bot_messages(chat))


def _cards(api: FakeBotApi, chat: int) -> list[FakeMessage]:
    """The bot's messages in the chat that were ever a plan card (carried its title)."""
    return [
        m
        for m in api.bot_messages(chat)
        if any("Greeting module" in t for t in [m.text, *m.edits]) and not m.document
    ]


async def _fetch(dsn: str, query: str, *args: Any) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    try:
        return list(await conn.fetch(query, *args))
    finally:
        await conn.close()


async def _session_of(dsn: str, chat: int) -> str:
    rows = await _fetch(dsn, "SELECT session_id FROM chat_bindings WHERE chat = $1", f"tg:{chat}")
    assert len(rows) == 1
    return str(rows[0][0])


def _setup(
    fake_api: FakeBotApi, tmp_path: Path, pg_dsn: str, server: FakeOpenAIServer, chats: list[int]
) -> dict[str, str]:
    workspace = make_repo(tmp_path / "work", {"README.md": "# A project to greet people\n"})
    return replica_env(
        fake_api,
        model_url=server.base_url,
        dsn=pg_dsn,
        home=tmp_path / "home",
        workspace=workspace,
        PLANGATE_OWNER_IDS=str(OWNER),
        PLANGATE_ALLOWED_CHAT_IDS=",".join(str(c) for c in chats),
        PLANGATE_LEASE_TTL=str(LEASE_TTL_S),
    )


async def test_ten_chats_plan_approve_and_finish_across_two_replicas(
    fake_api: FakeBotApi, tmp_path: Path, pg_dsn: str
) -> None:
    chats = [-3001 - i for i in range(10)]
    marker = {chat: f"feature-{i:02d}" for i, chat in enumerate(chats)}
    server = FakeOpenAIServer()
    server.play(RoutedScript({m: [*PLANNING, *EXECUTION] for m in marker.values()}))
    await server.start()
    env = _setup(fake_api, tmp_path, pg_dsn, server, chats)
    try:
        async with running(fake_api, env, tmp_path / "logs", ["r1", "r2"]) as (_, courier):
            for chat in chats:
                fake_api.user_message(chat, OWNER, f"/plan Add a greeting module {marker[chat]}")
            await fake_api.wait_for(
                lambda: all(_with(fake_api, c, "✅ Approve") for c in chats), timeout_s=240
            )
            for chat in chats:
                review = _with(fake_api, chat, "✅ Approve")
                assert review is not None
                fake_api.press(
                    chat, review.message_id, _button(review, "✅ Approve"), user_id=OWNER
                )
            try:
                await fake_api.wait_for(
                    lambda: all(_finished(fake_api, c) for c in chats), timeout_s=300
                )
            except TimeoutError:
                late = [c for c in chats if not _finished(fake_api, c)]
                raise AssertionError(
                    f"not finished: {late}; model errors: {server.errors}"
                ) from None
            delivered = list(courier.delivered)
    finally:
        await server.stop()
    assert server.errors == []
    # Both replicas took POSTs; every update reached the inbox once.
    assert {name for _, name in delivered} == {"r1", "r2"}
    rows = await _fetch(
        pg_dsn,
        "SELECT chat, update_id::bigint AS uid, done_by, done_at FROM update_inbox ORDER BY uid",
    )
    assert [r["uid"] for r in rows] == sorted({uid for uid, _ in delivered})
    assert len(rows) == 2 * len(chats)
    for chat in chats:
        mine = [r for r in rows if r["chat"] == f"tg:{chat}"]
        # Processed by one owner, in update_id order, each once (done once).
        assert len({r["done_by"] for r in mine}) == 1
        assert all(r["done_at"] is not None for r in mine)
        assert [r["done_at"] for r in mine] == sorted(r["done_at"] for r in mine)
        # One card per plan, and it ends Done.
        cards = _cards(fake_api, chat)
        assert len(cards) == 1, [m.text for m in cards]
        assert "Done" in cards[0].text and "2/2" in cards[0].text
        # Each update's events once: one /plan, one approval, one run's writes.
        sid = await _session_of(pg_dsn, chat)
        events = await _fetch(
            pg_dsn, "SELECT seq, type, payload FROM events WHERE session_id = $1 ORDER BY seq", sid
        )
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        commands = Counter(
            json.loads(e["payload"]).get("name") for e in events if e["type"] == "command/run"
        )
        assert commands["plan"] == 1, commands
        calls = Counter(
            json.loads(e["payload"]).get("name") for e in events if e["type"] == "tool/call"
        )
        assert calls["write_file"] == 3 and calls["bash"] == 1, calls


async def test_sigkill_of_the_owner_mid_run_moves_the_chat_and_resume_finishes_it(
    fake_api: FakeBotApi, tmp_path: Path, pg_dsn: str
) -> None:
    chat = -3100
    server = FakeOpenAIServer()
    server.play(RoutedScript({"feature-kill": [*PLANNING, *EXECUTION]}))
    await server.start()
    env = _setup(fake_api, tmp_path, pg_dsn, server, [chat])
    try:
        async with running(fake_api, env, tmp_path / "logs", ["r1", "r2"]) as (reps, _):
            fake_api.user_message(chat, OWNER, "/plan Add a greeting module feature-kill")
            # The planning turn ended (its last words sent) and the review card is up.
            await fake_api.wait_for(
                lambda: (
                    _with(fake_api, chat, "✅ Approve") and _said(fake_api, chat, "The plan is")
                ),
                timeout_s=120,
            )
            review = _with(fake_api, chat, "✅ Approve")
            assert review is not None
            # The approved run's first model call waits: the run is mid-turn when its owner
            # dies.
            asked = len(server.chat_requests)
            server.hold_next()
            fake_api.press(chat, review.message_id, _button(review, "✅ Approve"), user_id=OWNER)
            await _until(lambda: len(server.chat_requests) > asked)
            (held,) = await _fetch(
                pg_dsn, "SELECT replica, epoch FROM chat_leases WHERE chat = $1", f"tg:{chat}"
            )
            owner = next(r for r in reps if r.name == held["replica"])
            survivor = next(r for r in reps if r is not owner)
            sid = await _session_of(pg_dsn, chat)
            committed = await _events(pg_dsn, sid)
            assert any(e[1] == "turn/start" for e in committed)
            owner.kill()
            await owner.proc.wait()
            # Telegram keeps delivering meanwhile: the survivor stores it; the chat's next
            # owner answers it, once.
            asked_status = fake_api.user_message(chat, OWNER, "/status")

            # The survivor takes the chat (the lease lapsed: nobody released it) and the card
            # shows the run paused with Resume, without any update asking.
            async def moved() -> bool:
                rows = await _fetch(
                    pg_dsn, "SELECT replica, epoch FROM chat_leases WHERE chat = $1", f"tg:{chat}"
                )
                return rows[0]["replica"] == survivor.name and rows[0]["epoch"] > held["epoch"]

            await _until(moved, timeout_s=60)
            await fake_api.wait_for(lambda: _with(fake_api, chat, "▶️ Resume"), timeout_s=60)
            paused = _with(fake_api, chat, "▶️ Resume")
            assert paused is not None
            fake_api.press(chat, paused.message_id, _button(paused, "▶️ Resume"), user_id=OWNER)
            await fake_api.wait_for(lambda: _finished(fake_api, chat), timeout_s=120)
            await fake_api.wait_for(
                lambda: _replies(fake_api, chat, asked_status.message_id), timeout_s=60
            )
            final = await _events(pg_dsn, sid)
    finally:
        await server.stop()
    # Every event the dead owner had committed is still there, unchanged, and the log is dense.
    assert final[: len(committed)] == committed
    assert [e[0] for e in final] == list(range(1, len(final) + 1))
    # The run ended Done on the one card; the takeover armed nothing (no goal round ran).
    # (/status reposts the card at the bottom: the earlier message keeps its last state.)
    cards = [m for m in _cards(fake_api, chat) if "Done" in m.text]
    assert len(cards) == 1
    assert not any(
        e[1] == "user/message" and json.loads(e[2]).get("source") == "goal" for e in final
    )
    rows = await _fetch(pg_dsn, "SELECT done_by FROM update_inbox ORDER BY update_id::bigint")
    # /plan and Approve by the first owner; /status and Resume by the survivor, /status once.
    assert [r["done_by"] for r in rows] == [owner.name, owner.name, survivor.name, survivor.name]
    assert len(_replies(fake_api, chat, asked_status.message_id)) == 1


async def _events(dsn: str, sid: str) -> list[tuple[int, str, str]]:
    rows = await _fetch(
        dsn, "SELECT seq, type, payload FROM events WHERE session_id = $1 ORDER BY seq", sid
    )
    return [(int(r["seq"]), str(r["type"]), str(r["payload"])) for r in rows]


async def _until(check: Any, *, timeout_s: float = 60.0) -> None:
    """Wait (bounded) until ``check()`` (sync or async) holds."""

    async def loop() -> None:
        while True:
            got = check()
            if asyncio.iscoroutine(got):
                got = await got
            if got:
                return
            await asyncio.sleep(0.05)

    await asyncio.wait_for(loop(), timeout_s)


async def test_a_scheduled_goal_fires_each_round_once_and_its_owners_death_arms_nothing(
    fake_api: FakeBotApi, tmp_path: Path, pg_dsn: str
) -> None:
    chat = -3200
    server = FakeOpenAIServer()
    server.play(RoutedScript({"goalmark": [say("Checked: the greeting test passes.")] * 60}))
    await server.start()
    env = _setup(fake_api, tmp_path, pg_dsn, server, [chat])
    try:
        async with running(fake_api, env, tmp_path / "logs", ["r1", "r2"]) as (reps, _):
            fake_api.user_message(chat, OWNER, "/goal every 1s Keep the greeting green goalmark")
            # The elected scheduler's ticks run rounds on the chat's owner.
            await _until(lambda: _rounds(pg_dsn), timeout_s=90)
            (held,) = await _fetch(
                pg_dsn, "SELECT replica, epoch FROM chat_leases WHERE chat = $1", f"tg:{chat}"
            )
            owner = next(r for r in reps if r.name == held["replica"])
            survivor = next(r for r in reps if r is not owner)
            owner.kill()
            await owner.proc.wait()

            async def moved() -> bool:
                rows = await _fetch(
                    pg_dsn, "SELECT replica FROM chat_leases WHERE chat = $1", f"tg:{chat}"
                )
                return rows[0]["replica"] == survivor.name

            await _until(moved, timeout_s=60)
            # Taken over: the goal came up disarmed, its card offers Resume.
            await fake_api.wait_for(lambda: _with(fake_api, chat, "▶️ Resume"), timeout_s=60)
            numbers = await _round_numbers(pg_dsn)
    finally:
        await server.stop()
    assert server.errors == []
    # Every round that ran, ran once (a tick is claimed once, across replicas).
    assert numbers and len(numbers) == len(set(numbers)), numbers
    assert numbers == sorted(numbers)


async def _round_numbers(dsn: str) -> list[int]:
    rows = await _fetch(
        dsn, "SELECT payload FROM events WHERE type = 'user/message' ORDER BY session_id, seq"
    )
    found = []
    for row in rows:
        payload = json.loads(row["payload"])
        if payload.get("source", {}).get("kind") == "goal":
            match = re.search(r"Round (\d+)/", payload["text"])
            assert match is not None
            found.append(int(match.group(1)))
    return found


async def _rounds(dsn: str) -> bool:
    return len(await _round_numbers(dsn)) >= 2
