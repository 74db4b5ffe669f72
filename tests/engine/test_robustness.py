"""Second-review fixes: overrides bound to the plan id, loading that fails is retried and does
not stop start-up, nothing starts a turn after shutdown."""

from __future__ import annotations

from pathlib import Path

from engine.api import Press
from engine.model.script import say
from engine.model.scripted import ScriptedProvider
from tests.engine.helpers import OWNER, engine_rig, faulty_rig, post_init
from tests.keys import chat


async def test_a_confirmation_never_attaches_to_a_later_plan_at_the_same_revision(
    tmp_path: Path,
) -> None:
    async with engine_rig(tmp_path, ScriptedProvider([say("ok")] * 5)) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-1))
        await post_init(rig, sid)
        first = await engine.plans.current(sid)
        assert first is not None
        await engine.press(sid, Press("p", "discard", first.id[:8], first.revision), actor=OWNER)
        assert (await engine.plan_card(sid)).state == "confirm_discard"
        # The plan goes away without the confirmation being answered; a new one reaches the
        # same revision number.
        assert (await engine.plans.abandon(sid)).ok
        await post_init(rig, sid)
        second = await engine.plans.current(sid)
        assert second is not None and second.id != first.id
        assert second.revision == first.revision
        assert (await engine.plan_card(sid)).state == "review"


async def test_a_session_that_fails_to_load_does_not_stop_start_up_and_loads_later(
    tmp_path: Path,
) -> None:
    async with engine_rig(tmp_path, ScriptedProvider([])) as rig:
        broken = await rig.engine.session_for_chat(chat(-1))
        fine = await rig.engine.session_for_chat(chat(-2))
        await rig.engine.goals.create(broken, "this one fails to load")
        await rig.engine.goals.create(fine, "keep going")
    async with faulty_rig(tmp_path, ScriptedProvider([]), start=False) as (rig, log):
        log.locked = broken
        restored = await rig.engine.start()
        assert [r.session_id for r in restored] == [fine]
        log.locked = None
        log.reads.clear()
        # Tried again at its chat's next message; now it loads, and its goal is known.
        assert await rig.engine.session_for_chat(chat(-1)) == broken
        status = await rig.engine.command(broken, "status", "", actor=OWNER)
        assert broken in log.reads
        assert status.reply is not None and "this one fails to load" in status.reply


async def test_nothing_starts_a_turn_after_shutdown(tmp_path: Path) -> None:
    model = ScriptedProvider([say("should not run")])
    async with engine_rig(tmp_path, model) as rig:
        sid = await rig.engine.session_for_chat(chat(-1))
        await rig.engine.shutdown()
        await rig.engine.user_message(sid, "late", actor=OWNER, message_id="1")
        assert not rig.engine.agents.is_busy(sid)
        assert model.requests == []
