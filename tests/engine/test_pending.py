"""What the owner takes back stays taken back: pending approvals and plan switches under
/discard, Keep planning and Revise, and card states that survive a redraw."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.api import Press
from engine.app import SHUTDOWN_NOTICE
from engine.model.script import ScriptStep, call, say
from engine.model.scripted import ScriptedProvider
from engine.model.types import ModelReply
from tests.engine.helpers import OWNER, Rig, engine_rig, post_init, settle
from tests.keys import chat


class HeldModel:
    """The scripted model, but each reply waits until the test releases it (a busy turn)."""

    def __init__(self, steps: Sequence[ScriptStep]) -> None:
        self._inner = ScriptedProvider(steps)
        self.release = asyncio.Event()
        self.waiting = asyncio.Event()

    async def complete(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        *,
        max_tokens: int | None = None,
    ) -> ModelReply:
        self.waiting.set()
        await self.release.wait()
        return await self._inner.complete(messages, tools)


async def _busy(rig: Rig, model: HeldModel, sid: str) -> None:
    await rig.engine.user_message(sid, "think about it", actor=OWNER, message_id="1")
    await asyncio.wait_for(model.waiting.wait(), 10)
    assert rig.engine.agents.is_busy(sid)


async def _press(rig: Rig, sid: str, action: str) -> Any:
    sidecar = await rig.engine.plans.current(sid)
    assert sidecar is not None
    return await rig.engine.press(
        sid, Press("p", action, sidecar.id[:8], sidecar.revision), actor=OWNER
    )


async def test_keep_planning_takes_back_a_pending_approval(tmp_path: Path) -> None:
    model = HeldModel([say("still thinking")] * 5)
    async with engine_rig(tmp_path, model) as rig:
        sid = await rig.engine.session_for_chat(chat(-1))
        await post_init(rig, sid)
        await _busy(rig, model, sid)
        approved = await _press(rig, sid, "approve")
        assert approved.reply is not None and "current step ends" in approved.reply
        kept = await _press(rig, sid, "keep")
        assert kept.await_feedback
        model.release.set()
        await settle(rig.engine, sid)
        assert await rig.engine.plans.state(sid) == "post_init"


async def test_discard_takes_back_a_pending_plan_switch(tmp_path: Path) -> None:
    model = HeldModel([say("done")] * 5)
    async with engine_rig(tmp_path, model) as rig:
        sid = await rig.engine.session_for_chat(chat(-1))
        await _busy(rig, model, sid)
        planning = await rig.engine.command(sid, "plan", "", actor=OWNER)
        assert (
            planning.reply
            == "Planning starts when the current step ends. What should it plan? Send your request."
        )
        discarded = await rig.engine.command(sid, "discard", "", actor=OWNER)
        assert discarded.reply == "Planning cancelled."
        model.release.set()
        await settle(rig.engine, sid)
        assert await rig.engine.plans.state(sid) == "none"


async def test_discard_in_pre_init_stops_the_turn_and_disarms_the_goal(tmp_path: Path) -> None:
    model = HeldModel([call("write_file", {"path": "x.txt", "content": "x"}), say("ok")])
    async with engine_rig(tmp_path, model) as rig:
        sid = await rig.engine.session_for_chat(chat(-1))
        await rig.engine.goals.create(sid, "keep going", arm=False)
        await rig.engine.command(sid, "plan", "", actor=OWNER)
        await _busy(rig, model, sid)
        goal = await rig.engine.goals.get(sid)
        assert goal is not None
        await rig.engine.goals.arm(sid, goal.ref)
        outcome = await rig.engine.command(sid, "discard", "", actor=OWNER)
        assert outcome.reply == "Planning cancelled."
        assert not rig.engine.agents.is_busy(sid)
        assert not rig.engine.goals.is_armed(sid)
        model.release.set()
        await settle(rig.engine, sid)
        assert not (rig.workspace / "x.txt").exists()


async def test_revise_then_pending_approve_then_discard_keeps_the_approved_plan(
    tmp_path: Path,
) -> None:
    model = HeldModel([say("ok")] * 10)
    async with engine_rig(tmp_path, model) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-1))
        await post_init(rig, sid)
        model.release.set()
        await engine.command(sid, "execute", "", actor=OWNER)
        await settle(engine, sid)
        active = await engine.plans.current(sid)
        assert active is not None and active.status == "Active"
        tasks_before = [t.title for t in active.tasks]
        revised = await _press(rig, sid, "revise")
        assert revised.await_feedback
        model.release.clear()
        model.waiting.clear()
        await _busy(rig, model, sid)
        pending = await _press(rig, sid, "approve")
        assert pending.reply is not None and "current step ends" in pending.reply
        outcome = await engine.command(sid, "discard", "", actor=OWNER)
        assert outcome.reply == "The revision is discarded; the approved plan stands."
        model.release.set()
        await settle(engine, sid)
        restored = await engine.plans.current(sid)
        assert restored is not None and restored.status == "Active"
        assert restored.id == active.id
        assert [t.title for t in restored.tasks] == tasks_before


async def test_confirmation_and_revise_offer_survive_a_redraw(tmp_path: Path) -> None:
    async with engine_rig(tmp_path, ScriptedProvider([say("ok")] * 5)) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-1))
        await post_init(rig, sid)
        confirm = await _press(rig, sid, "discard")
        assert confirm.plan_card == "refresh"
        assert (await engine.plan_card(sid)).state == "confirm_discard"
        assert (await engine.plan_card(sid)).state == "confirm_discard"  # a second redraw
        await _press(rig, sid, "cancel")
        assert (await engine.plan_card(sid)).state == "review"
        await engine.command(sid, "execute", "", actor=OWNER)
        await settle(engine, sid)
        offer = await engine.command(sid, "plan", "", actor=OWNER)
        assert offer.plan_card == "restick"
        assert (await engine.plan_card(sid)).state == "revise_offer"
        await engine.command(sid, "show_plan", "", actor=OWNER)  # read-only: keeps it
        assert (await engine.plan_card(sid)).state == "revise_offer"
        await engine.command(sid, "execute", "", actor=OWNER)  # acting clears it
        await settle(engine, sid)
        assert (await engine.plan_card(sid)).state == "paused"  # the run ended: Resume


async def test_shutdown_tells_a_working_chat_what_stopped_and_what_was_not_handled(
    tmp_path: Path,
) -> None:
    model = HeldModel([say("ok")] * 5)
    async with engine_rig(tmp_path, model) as rig:
        sid = await rig.engine.session_for_chat(chat(-1))
        idle = await rig.engine.session_for_chat(chat(-2))
        await _busy(rig, model, sid)
        await rig.engine.user_message(sid, "and then add docs", actor=OWNER, message_id="2")
        await rig.engine.shutdown()
        notices = [(c.session_id, c.args["text"]) for c in rig.channel.of("notice")]
        assert len(notices) == 1
        session, text = notices[0]
        assert session == sid and session != idle
        assert text.startswith(SHUTDOWN_NOTICE)
        assert "- and then add docs" in text
