"""Updates of different chats run concurrently, one session's in order; the dedupe holds.

The integration tests run the real Application over HTTP to the fake Bot API, with an engine
whose ``/stop`` blocks until the test releases it (as a real /stop waits for the turn's
cancellation). Order and overlap are asserted from recorded events, never from timings.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from telegram import Update

from bot.telegram.app import parts
from bot.telegram.routes import LAST_UPDATE_KEY
from bot.telegram.updates import ChatLaneProcessor, UpdateLedger, lane_of
from engine.api import CommandName, Outcome
from tests.fakebot.server import FakeBotApi
from tests.telegram.app_support import (
    GROUP,
    OWNER,
    RecordingEngine,
    eventually,
    open_db,
    running_bot,
)

NEW_GROUP = -100999


class SlowStopEngine(RecordingEngine):
    """``/stop`` blocks until ``release`` is set; every command start and end is recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[str] = []
        self.release = asyncio.Event()

    async def command(
        self,
        session_id: str,
        name: CommandName,
        args: str,
        *,
        actor: int | None,
        actor_name: str = "",
    ) -> Outcome:
        self.events.append(f"{session_id}:{name}:start")
        if name == "stop":
            await self.release.wait()
        outcome = await super().command(session_id, name, args, actor=actor)
        self.events.append(f"{session_id}:{name}:end")
        return outcome

    async def user_message(self, session_id: str, text: str, **kw: Any) -> None:
        self.events.append(f"{session_id}:said:{text}")
        await super().user_message(session_id, text, **kw)

    def has(self, event: str) -> bool:
        return event in self.events


async def test_a_slow_update_in_one_chat_does_not_hold_up_another(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = SlowStopEngine()
    async with open_db(tmp_path / "p.db") as db, running_bot(fake_api, engine, db):
        fake_api.user_message(GROUP, OWNER, "/stop")
        await eventually(lambda: engine.has("s1:stop:start"))
        fake_api.user_message(OWNER, OWNER, "hello")
        await eventually(lambda: engine.has("s2:said:hello"))
        # The private chat was heard while the group's /stop was still waiting.
        assert not engine.has("s1:stop:end")
        engine.release.set()
        await eventually(lambda: engine.has("s1:stop:end"))
    assert engine.events.index("s2:said:hello") < engine.events.index("s1:stop:end")


async def test_updates_of_one_chat_run_in_order_even_when_the_first_is_slow(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = SlowStopEngine()
    async with open_db(tmp_path / "p.db") as db, running_bot(fake_api, engine, db):
        fake_api.user_message(GROUP, OWNER, "/stop")
        await eventually(lambda: engine.has("s1:stop:start"))
        fake_api.user_message(GROUP, OWNER, "/status")
        fake_api.user_message(OWNER, OWNER, "after")  # arrives after the /status
        await eventually(lambda: engine.has("s2:said:after"))
        # The other chat has gone ahead; the group's /status still waits its turn.
        assert not engine.has("s1:status:start")
        engine.release.set()
        await eventually(lambda: engine.has("s1:status:end"))
    group = [e for e in engine.events if e.startswith("s1:")]
    assert group == ["s1:stop:start", "s1:stop:end", "s1:status:start", "s1:status:end"]


async def test_a_forum_topic_is_its_own_lane(fake_api: FakeBotApi, tmp_path: Path) -> None:
    engine = SlowStopEngine()
    async with open_db(tmp_path / "p.db") as db, running_bot(fake_api, engine, db):
        fake_api.user_message(GROUP, OWNER, "/stop", thread_id=5)
        await eventually(lambda: engine.has("s1:stop:start"))
        fake_api.user_message(GROUP, OWNER, "/status", thread_id=5)
        fake_api.user_message(GROUP, OWNER, "/status", thread_id=7)
        fake_api.user_message(GROUP, OWNER, "/help")  # the group's General topic

        def heard(key: tuple[int, int], name: str) -> bool:
            sid = engine.keys.get(key)
            return sid is not None and engine.has(f"{sid}:{name}:end")

        await eventually(lambda: heard((GROUP, 7), "status") and heard((GROUP, 0), "help"))
        assert engine.keys[(GROUP, 5)] == "s1"
        assert not engine.has("s1:status:start")  # topic 5 keeps its order
        engine.release.set()
        await eventually(lambda: engine.has("s1:status:end"))
    topic5 = [e for e in engine.events if e.startswith("s1:")]
    assert topic5 == ["s1:stop:start", "s1:stop:end", "s1:status:start", "s1:status:end"]


async def test_the_dedupe_never_drops_an_update_still_waiting_for_its_chat(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = SlowStopEngine()
    async with open_db(tmp_path / "p.db") as db:
        async with running_bot(fake_api, engine, db) as app:
            bp = parts(app)
            fake_api.user_message(GROUP, OWNER, "/stop")
            slow_id = fake_api.last_update_id
            await eventually(lambda: engine.has("s1:stop:start"))
            fake_api.user_message(GROUP, OWNER, "/status")
            waiting_id = fake_api.last_update_id
            fake_api.user_message(OWNER, OWNER, "newer")
            newer_id = fake_api.last_update_id
            await eventually(lambda: engine.has("s2:said:newer"))
            # A newer update of another chat went first: the watermark stays below the one
            # still waiting, in memory and on disk (the slow one began: it counts).
            await eventually(lambda: not bp.tasks)
            assert bp.ledger.watermark == slow_id
            assert await db.get_meta(LAST_UPDATE_KEY) == str(slow_id)
            assert not bp.ledger.is_repeat(waiting_id)
            assert bp.ledger.is_repeat(newer_id)
            engine.release.set()
            await eventually(lambda: engine.has("s1:status:end"))
            await eventually(lambda: bp.ledger.watermark == newer_id)
        assert await db.get_meta(LAST_UPDATE_KEY) == str(newer_id)


async def test_repeats_after_a_restart_are_dropped_with_chats_running_concurrently(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = SlowStopEngine()
    async with open_db(tmp_path / "p.db") as db:
        async with running_bot(fake_api, engine, db):
            stop = fake_api.user_message(GROUP, OWNER, "/stop")
            stop_id = fake_api.last_update_id
            await eventually(lambda: engine.has("s1:stop:start"))
            hello = fake_api.user_message(OWNER, OWNER, "hello")
            hello_id = fake_api.last_update_id
            await eventually(lambda: engine.has("s2:said:hello"))
            engine.release.set()
            await eventually(lambda: engine.has("s1:stop:end"))
        assert await db.get_meta(LAST_UPDATE_KEY) == str(hello_id)
        # Telegram redelivers both (their offset was not confirmed), then a new message.
        fake_api.redeliver(stop_id, stop.raw)
        fake_api.redeliver(hello_id, hello.raw)
        fake_api.user_message(OWNER, OWNER, "again")
        async with running_bot(fake_api, engine, db):
            await eventually(lambda: engine.has("s2:said:again"))
    assert engine.events.count("s1:stop:start") == 1
    assert engine.events.count("s2:said:hello") == 1


async def test_a_group_the_owner_adds_is_known_before_its_topics_are_heard(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    engine = SlowStopEngine()
    async with open_db(tmp_path / "p.db") as db, running_bot(fake_api, engine, db):
        fake_api.bot_added(NEW_GROUP, by_user_id=OWNER)
        fake_api.user_message(NEW_GROUP, OWNER, "/status", thread_id=3)
        await eventually(lambda: engine.has("s1:status:end"))
    assert fake_api.count("leaveChat") == 0


# ---- the processor and the ledger on their own ---------------------------------------------


def _message(update_id: int, chat_id: int, *, thread: int | None = None, date: int = 0) -> Update:
    chat_type = "private" if chat_id > 0 else "supergroup"
    message: dict[str, Any] = {
        "message_id": update_id,
        "date": date,
        "chat": {"id": chat_id, "type": chat_type},
        "from": {"id": OWNER, "is_bot": False, "first_name": "O"},
        "text": "x",
    }
    if thread is not None:
        message |= {"message_thread_id": thread, "is_topic_message": True}
    return Update.de_json({"update_id": update_id, "message": message}, None)


def _added(update_id: int, chat_id: int) -> Update:
    member = {"status": "member", "user": {"id": 9, "is_bot": True, "first_name": "B"}}
    return Update.de_json(
        {
            "update_id": update_id,
            "my_chat_member": {
                "chat": {"id": chat_id, "type": "supergroup"},
                "from": {"id": OWNER, "is_bot": False, "first_name": "O"},
                "date": 0,
                "old_chat_member": member | {"status": "left"},
                "new_chat_member": member,
            },
        },
        None,
    )


def test_lanes_are_the_session_key_the_chat_or_global() -> None:
    assert lane_of(_message(1, OWNER)) == (OWNER, 0)
    assert lane_of(_message(2, GROUP, thread=5)) == (GROUP, 5)
    assert lane_of(_added(3, GROUP)) == (GROUP, None)
    assert lane_of(Update.de_json({"update_id": 4}, None)) is None
    assert lane_of("not an update") is None


async def test_a_chat_wide_update_waits_for_the_chat_and_holds_its_later_topics() -> None:
    processor = ChatLaneProcessor(max_running=8)
    log: list[str] = []
    gate = asyncio.Event()

    async def step(name: str, *, wait: bool = False) -> None:
        log.append(f"{name}:start")
        if wait:
            await gate.wait()
        log.append(f"{name}:end")

    async with processor:
        runs = [
            asyncio.create_task(
                processor.process_update(_message(1, GROUP, thread=5), step("t5", wait=True))
            ),
            asyncio.create_task(processor.process_update(_added(2, GROUP), step("added"))),
            asyncio.create_task(processor.process_update(_message(3, GROUP, thread=7), step("t7"))),
            asyncio.create_task(processor.process_update(_message(4, OWNER), step("private"))),
        ]
        await asyncio.wait_for(_until(lambda: "private:end" in log), 5)
        assert "added:start" not in log and "t7:start" not in log
        gate.set()
        await asyncio.wait_for(asyncio.gather(*runs), 5)
        await asyncio.wait_for(processor.idle(), 5)
    assert log.index("t5:end") < log.index("added:start") < log.index("added:end")
    assert log.index("added:end") < log.index("t7:start")


async def test_the_running_bound_is_kept_and_waiting_updates_hold_no_slot() -> None:
    processor = ChatLaneProcessor(max_running=2)
    gate = asyncio.Event()
    running = 0
    peak = 0
    finished: list[int] = []

    async def step(n: int) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await gate.wait()
        running -= 1
        finished.append(n)

    async def free(n: int) -> None:
        finished.append(n)

    async with processor:
        # Ten updates queue behind one slow update of chat 1; chat 2 still gets through.
        runs = [
            asyncio.create_task(processor.process_update(_message(i, 1), step(i)))
            for i in range(1, 11)
        ]
        runs.append(asyncio.create_task(processor.process_update(_message(11, 2), free(11))))
        await asyncio.wait_for(_until(lambda: 11 in finished), 5)
        runs += [
            asyncio.create_task(processor.process_update(_message(20 + i, -i), step(20 + i)))
            for i in range(1, 4)
        ]
        await asyncio.wait_for(_until(lambda: running == 2), 5)
        await asyncio.sleep(0)
        gate.set()
        await asyncio.wait_for(asyncio.gather(*runs), 5)
    assert peak == 2
    assert [n for n in finished if n <= 10] == list(range(1, 11))


def test_the_watermark_never_passes_an_update_still_waiting() -> None:
    advanced: list[int] = []
    ledger = UpdateLedger(on_advance=advanced.append)
    u10, u11, u12 = (_message(i, OWNER) for i in (10, 11, 12))
    for u in (u10, u11, u12):
        ledger.arrived(u)
    assert ledger.take(u12)
    assert ledger.watermark is None and ledger.is_repeat(12) and not ledger.is_repeat(10)
    assert ledger.take(u10)
    assert ledger.watermark == 10 and not ledger.is_repeat(11)
    ledger.finished(u10)  # already taken: nothing changes
    ledger.finished(u11)  # nothing took it (no dedupe ran): taken now
    assert ledger.watermark == 12 and advanced == [10, 12]
    assert ledger.in_flight == 0


def test_a_second_copy_of_an_update_is_a_repeat_even_while_the_first_runs() -> None:
    ledger = UpdateLedger()
    first, copy = _message(5, OWNER), _message(5, OWNER)
    ledger.arrived(first)
    ledger.arrived(copy)
    assert ledger.take(first)
    assert not ledger.take(copy)
    assert ledger.in_flight == 0 and ledger.watermark == 5


def test_a_restored_watermark_makes_older_ids_repeats_and_a_late_arrival_is_not_one() -> None:
    ledger = UpdateLedger()
    ledger.restore(100)
    assert ledger.is_repeat(100) and ledger.is_repeat(7) and not ledger.is_repeat(101)
    assert not ledger.take(_message(100, OWNER))
    # A webhook may deliver out of order: 103 is taken before 102 arrives; 102 is new.
    for i in (101, 103):
        u = _message(i, OWNER)
        ledger.arrived(u)
        assert ledger.take(u)
    assert ledger.watermark == 103
    late = _message(102, OWNER)
    ledger.arrived(late)
    assert ledger.take(late)
    assert ledger.is_repeat(102)


def test_the_ledger_remembers_a_bounded_number_of_ids_and_never_forgets_a_waiting_one() -> None:
    ledger = UpdateLedger(remember=4)
    waiting = _message(1, OWNER)
    ledger.arrived(waiting)
    for i in range(2, 20):
        u = _message(i, OWNER)
        ledger.arrived(u)
        ledger.take(u)
    assert ledger.watermark is None  # nothing passes the waiting update
    assert not ledger.is_repeat(1)
    assert ledger.take(waiting)
    assert ledger.watermark == 19
    for i in range(20, 40):
        u = _message(i, OWNER)
        ledger.arrived(u)
        ledger.take(u)
    assert len(ledger.recent()[0]) <= 5  # what it remembers (and would persist)
    assert ledger.is_repeat(2) and ledger.is_repeat(39) and not ledger.is_repeat(40)


async def _until(predicate: Any) -> None:
    while not predicate():
        await asyncio.sleep(0.005)


def _press(update_id: int) -> Update:
    return Update.de_json(
        {
            "update_id": update_id,
            "callback_query": {
                "id": f"q{update_id}",
                "from": {"id": OWNER, "is_bot": False, "first_name": "O"},
                "chat_instance": "c",
                "data": "p:x",
            },
        },
        None,
    )


def _taken(ledger: UpdateLedger, update: Update) -> bool:
    ledger.arrived(update)
    return ledger.take(update)


def test_ids_that_restart_lower_with_newer_dates_are_new_and_rebase_the_ledger() -> None:
    week = 7 * 86400
    old = UpdateLedger()
    assert _taken(old, _message(5000, OWNER, date=1000))
    ids, last = old.recent()
    ledger = UpdateLedger()  # a restart
    ledger.restore(5000)
    ledger.restore_recent(ids, last)
    assert not _taken(ledger, _message(5000, OWNER, date=1000))  # a re-delivery
    assert not _taken(ledger, _message(4000, OWNER, date=900))  # older, forgotten: a repeat
    assert not _taken(ledger, _press(80))  # no date of its own: judged a repeat
    assert _taken(ledger, _message(77, OWNER, date=1000 + week))  # the new numbering
    assert ledger.watermark == 77 and ledger.last_date == 1000 + week
    # Rebased: the next ids of the new numbering, presses included, are new even within
    # the same second; a re-delivery of 77 is not.
    assert _taken(ledger, _message(78, OWNER, date=1000 + week))
    assert _taken(ledger, _press(79))
    assert not _taken(ledger, _message(77, OWNER, date=1000 + week))
    assert ledger.watermark == 79
    # Reaching an id the old numbering used: a newer date says it is new, the same one not.
    assert not _taken(ledger, _message(5000, OWNER, date=1000))
    assert _taken(ledger, _message(5000, OWNER, date=2000 + week))


def test_a_jump_in_a_process_started_without_a_watermark_is_rebased_and_persisted() -> None:
    week = 7 * 86400
    persisted: list[int] = []
    ledger = UpdateLedger(on_advance=persisted.append)  # nothing stored: a first start
    for uid in (5000, 5001):
        assert _taken(ledger, _message(uid, OWNER, date=1000))
    assert persisted == [5000, 5001]
    # Telegram numbers anew: the new ids are new, and the watermark follows them (stored).
    assert _taken(ledger, _message(3, OWNER, date=1000 + week))
    assert _taken(ledger, _message(4, OWNER, date=1000 + week))
    assert persisted[-2:] == [3, 4] and ledger.watermark == 4
    assert 4 in ledger.recent()[0]
    # A re-delivery of the old numbering stays a repeat; so does the new one's.
    assert not _taken(ledger, _message(5001, OWNER, date=1000))
    assert not _taken(ledger, _message(3, OWNER, date=1000 + week))
    # A lower id without a newer date is not a jump: a press below the watermark is a repeat.
    assert not _taken(ledger, _press(2))
