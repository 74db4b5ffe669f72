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
from collections import Counter
from pathlib import Path
from typing import Any

import asyncpg

from tests.engine.helpers import EXECUTION, PLANNING
from tests.fakebot.server import FakeBotApi, FakeMessage
from tests.fakes.openai_server import FakeOpenAIServer
from tests.projects.support import make_repo
from tests.replicas.live import RoutedScript, replica_env, running
from tests.telegram.app_support import OWNER

LEASE_TTL_S = 3


def _labels(msg: FakeMessage) -> list[str]:
    return [text for row in msg.buttons for text, _ in row]


def _button(msg: FakeMessage, label: str) -> str:
    return next(d for row in msg.buttons for text, d in row if text == label)


def _with(api: FakeBotApi, chat: int, label: str) -> FakeMessage | None:
    return next((m for m in api.bot_messages(chat) if label in _labels(m)), None)


def _finished(api: FakeBotApi, chat: int) -> bool:
    return any(m.text.startswith("All done") for m in api.bot_messages(chat))


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
            await fake_api.wait_for(
                lambda: all(_finished(fake_api, c) for c in chats), timeout_s=300
            )
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
