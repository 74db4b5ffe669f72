"""A home written before chats and people were string keys opens with today's code, whole.

The builder writes what plangate wrote then, byte for byte in its shape: the schema of
migrations 1-5 (released migrations are frozen, so ``MIGRATIONS[:5]`` is that schema), chat
bindings and the roles log keyed by integer ids, event payloads and plan sidecars holding
integer user, chat and message ids, and the bot's goal card id in ``meta``. The engine then
opens the home (migration 6 runs) and everything is there: sessions, kinds and parents, plans
with their card keys, roles, votes, approvals, usage, the goal card id; the event log's rows
were read as keys, never rewritten.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import aiosqlite

from bot.telegram.routes import goal_card_key
from engine.events import ApprovalDecided, CommandRun, UserMessage
from engine.keys import Chat, ChatKind
from engine.model.scripted import ScriptedProvider
from engine.plan.types import PlanFlow, PlanSidecar, PlanTask
from engine.roles.types import Person
from engine.roles.votes import votes_for
from storage.db import database_path
from storage.files import session_dir
from storage.migrations import MIGRATIONS, migrate, user_version
from tests.engine.helpers import engine_rig
from tests.keys import chat, person

GROUP, TOPIC, OWNER, ANA = -100123, 45, 1001, 5
GROUP_SID, TOPIC_SID, PRIVATE_SID = "a" * 32, "b" * 32, "c" * 32


def _sidecar(session_id: str, workspace: Path, flow: dict[str, Any]) -> dict[str, Any]:
    """An Active plan as the old version wrote it: integer ids in ``flow`` and ``approved_by``."""
    task = PlanTask(id="1", order=1, title="Write the greeting", status="pending")
    plan = PlanSidecar(
        id=f"plan-{session_id[:4]}",
        session_id=session_id,
        title="Greeting",
        status="Active",
        tasks=[task],
        approved_at="2026-12-05T10:00:00Z",
        working_directory=str(workspace),
        revision=3,
        mode="checklist",
        next_task_id=2,
    )
    raw = plan.model_dump(mode="json", exclude={"flow", "approved_by"})
    raw["flow"] = flow
    raw["approved_by"] = [{"user_id": OWNER, "name": "Olga", "at": "2026-12-05T10:00:00Z"}]
    return raw


def _event(sid: str, seq: int, at: float, payload: dict[str, Any]) -> tuple[Any, ...]:
    return (sid, seq, payload["type"], at, json.dumps(payload))


async def _write_old_home(home: Path, workspace: Path) -> list[tuple[Any, ...]]:
    """The home the version before string keys left behind; returns the event rows written."""
    now = time.time()
    rows = [
        _event(
            GROUP_SID,
            1,
            now,
            {
                "type": "user/message",
                "text": "make a greeting",
                "source": {"kind": "human", "user_id": OWNER, "message_id": 17},
            },
        ),
        _event(
            GROUP_SID,
            2,
            now,
            {
                "type": "command/run",
                "name": "approval_vote",
                "args": "3",
                "actor": ANA,
                "data": {"revision": 3, "name": "Ana"},
            },
        ),
        _event(
            GROUP_SID,
            3,
            now,
            {
                "type": "command/run",
                "name": "approve",
                "args": "3",
                "actor": OWNER,
                "data": {"revision": 3},
            },
        ),
        _event(
            GROUP_SID,
            4,
            now,
            {
                "type": "approval/decided",
                "request_id": "r1",
                "call_id": "c1",
                "decision": "once",
                "actor": ANA,
                "actor_name": "Ana",
            },
        ),
        _event(
            GROUP_SID,
            5,
            now,
            {
                "type": "model/usage",
                "turn_id": "t1",
                "prompt_tokens": 1200,
                "completion_tokens": 300,
            },
        ),
        _event(
            GROUP_SID,
            6,
            now,
            {
                "type": "command/run",
                "name": "usage_cap",
                "args": "50k",
                "actor": OWNER,
                "data": {"cap": 50_000},
            },
        ),
        _event(
            TOPIC_SID,
            1,
            now,
            {
                "type": "user/message",
                "text": "and here",
                "source": {"kind": "feedback", "user_id": OWNER, "message_id": 90},
            },
        ),
    ]
    path = database_path(home)
    path.parent.mkdir(parents=True)
    async with aiosqlite.connect(path, isolation_level=None) as conn:
        assert await migrate(conn, MIGRATIONS[:5]) == 5
        for sid in (GROUP_SID, TOPIC_SID, PRIVATE_SID):
            await conn.execute(
                "INSERT INTO sessions (id, workspace, profile, created_at, parent_id) "
                "VALUES (?, ?, NULL, ?, NULL)",
                (sid, str(workspace), now - 60),
            )
        await conn.executemany(
            "INSERT INTO chat_bindings (chat_id, thread_id, session_id) VALUES (?, ?, ?)",
            [(GROUP, 0, GROUP_SID), (GROUP, TOPIC, TOPIC_SID), (OWNER, 0, PRIVATE_SID)],
        )
        await conn.executemany(
            "INSERT INTO events (session_id, seq, type, at, payload) VALUES (?, ?, ?, ?, ?)",
            rows,
        )
        role = {
            "type": "role/granted",
            "user_id": ANA,
            "role": "approver",
            "name": "Ana",
            "by": OWNER,
        }
        await conn.execute(
            "INSERT INTO chat_events (chat_id, seq, type, at, payload) VALUES (?, 1, ?, ?, ?)",
            (GROUP, role["type"], now - 30, json.dumps(role)),
        )
        await conn.execute(
            "INSERT INTO meta (key, value) VALUES (?, ?)", (goal_card_key(GROUP_SID), "43")
        )
    folder = session_dir(home, workspace=str(workspace))
    folder.mkdir(parents=True)
    flows = {
        GROUP_SID: {"chat_id": GROUP, "thread_id": None, "card_id": 41, "review_ids": [42]},
        TOPIC_SID: {"chat_id": GROUP, "thread_id": TOPIC, "card_id": 51, "review_ids": []},
    }
    for sid, flow in flows.items():
        sidecar = _sidecar(sid, workspace, flow)
        (folder / f".plangate_plan_{sid}.json").write_text(json.dumps(sidecar, indent=2))
    return rows


async def test_a_home_from_before_string_keys_upgrades_in_place(tmp_path: Path) -> None:
    home, workspace = tmp_path / "home", tmp_path / "work"
    workspace.mkdir()
    rows = await _write_old_home(home, workspace)
    owners = frozenset({person(OWNER)})
    model = ScriptedProvider([])
    async with engine_rig(tmp_path, model, owner_ids=owners) as rig:
        engine = rig.engine
        # Sessions: every binding carried, with the kind and parent the old ids meant.
        assert await engine.session_for_chat(chat(GROUP)) == GROUP_SID
        assert await engine.session_for_chat(chat(GROUP, TOPIC)) == TOPIC_SID
        assert await engine.session_for_chat(chat(OWNER)) == PRIVATE_SID
        bound = {b.chat: b.session_id for b in await rig.storage.sessions.chat_bindings()}
        assert bound == {
            Chat("tg:-100123", ChatKind.GROUP): GROUP_SID,
            Chat("tg:-100123/45", ChatKind.THREAD, "tg:-100123"): TOPIC_SID,
            Chat("tg:1001", ChatKind.PRIVATE): PRIVATE_SID,
        }
        assert engine.sessions.is_private(PRIVATE_SID)
        assert not engine.sessions.is_private(GROUP_SID)
        assert not engine.sessions.is_private(TOPIC_SID)

        # Roles: the group's team, also from its topic (a thread shares its parent's).
        assert await engine.role_of("tg:-100123", person(ANA)) == "approver"
        assert await engine.role_of("tg:-100123/45", person(ANA)) == "approver"
        assert await engine.role_of("tg:-100123", person(OWNER)) == "owner"
        assert await engine.role_of("tg:1001", person(ANA)) == "member"
        team = await engine.team(chat(GROUP), "", actor=person(OWNER))
        assert "Ana (5), since" in (team.reply or "") and "by 1001" in (team.reply or "")
        # A removal finds the person the old log named.
        removed = await engine.team(
            chat(GROUP), "remove 5", actor=person(OWNER), target=Person(person(ANA))
        )
        assert removed.reply == "Ana is no longer an approver; they are a member now."

        # Plans: the card's and the plan text's message keys, in the group and the topic.
        group_plan = await engine.plans.current(GROUP_SID)
        topic_plan = await engine.plans.current(TOPIC_SID)
        assert group_plan is not None and topic_plan is not None
        assert group_plan.flow == PlanFlow(chat_id="tg:-100123", card_id="41", review_ids=["42"])
        assert topic_plan.flow == PlanFlow(
            chat_id="tg:-100123", thread_id="tg:-100123/45", card_id="51"
        )
        assert [(a.user_id, a.name) for a in group_plan.approved_by] == [("tg:1001", "Olga")]
        assert group_plan.revision == 3 and [t.title for t in group_plan.tasks] == [
            "Write the greeting"
        ]

        # The event log: integer ids read as keys.
        events = [s.event for s in await engine.log.read(GROUP_SID)]
        first = events[0]
        assert isinstance(first, UserMessage)
        assert (first.source.user_id, first.source.message_id) == ("tg:1001", "17")  # type: ignore[union-attr]
        runs = [e for e in events if isinstance(e, CommandRun)]
        assert [(e.name, e.actor) for e in runs] == [
            ("approval_vote", "tg:5"),
            ("approve", "tg:1001"),
            ("usage_cap", "tg:1001"),
        ]
        [decided] = [e for e in events if isinstance(e, ApprovalDecided)]
        assert decided.actor == "tg:5"
        topic_events = [s.event for s in await engine.log.read(TOPIC_SID)]
        assert topic_events[0].source.user_id == "tg:1001"  # type: ignore[union-attr]
        votes = votes_for(await engine.log.read(GROUP_SID), group_plan.id, 3)
        assert [(v.user_id, v.name) for v in votes] == [("tg:5", "Ana"), ("tg:1001", "")]

        # Usage: today's tokens and the owner's daily cap.
        assert engine.usage.today().tokens == 1500
        assert engine.usage.daily_cap == 50_000

        # The bot's goal card id is where the bot keeps it.
        assert await rig.storage.db.get_meta(goal_card_key(GROUP_SID)) == "43"

    # Never rewritten: the old rows are still the old bytes, and the schema is the new one.
    async with aiosqlite.connect(database_path(home)) as conn:
        assert await user_version(conn) == len(MIGRATIONS)
        async with conn.execute(
            "SELECT session_id, seq, type, at, payload FROM events ORDER BY session_id, seq"
        ) as cursor:
            assert [tuple(r) for r in await cursor.fetchall()] == sorted(rows)
        async with conn.execute("SELECT chat, seq, payload FROM chat_events ORDER BY seq") as c:
            stored = await c.fetchall()
        assert [r[0] for r in stored] == ["tg:-100123", "tg:-100123"]
        assert json.loads(stored[0][2])["user_id"] == ANA  # as written then
