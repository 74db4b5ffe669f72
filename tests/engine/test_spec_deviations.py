"""Lifecycle rules a review found broken: each test failed before its fix.

A stray ``.md`` never makes a fresh ``/plan`` approvable; ``/discard`` takes back a pending
``/plan`` in the plan-mode projection too; ``/execute text`` hands the text to the agent.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from engine.commands import TEXT_NOT_SENT
from engine.events import CommandRun, PlanChanged, UserMessage
from engine.model.script import Script, call, say
from engine.model.scripted import ScriptedProvider
from engine.projections import (
    TAKE_BACK_COMMANDS,
    PlanModeState,
    fold_session,
    replay_projections,
)
from tests.engine.helpers import OWNER, PLAN_MD, Rig, engine_rig, post_init, settle
from tests.engine.test_pending import HeldModel
from tests.keys import chat


async def busy(rig: Rig, model: HeldModel, sid: str) -> None:
    """An owner's message whose turn waits on the held model: the agent is busy."""
    await rig.engine.user_message(sid, "think about it", actor=OWNER, message_id="1")
    await asyncio.wait_for(model.waiting.wait(), 10)
    assert rig.engine.agents.is_busy(sid)


async def test_an_md_written_before_plan_does_not_make_the_plan_approvable(
    tmp_path: Path,
) -> None:
    model = ScriptedProvider([])
    async with engine_rig(tmp_path, model) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-1))
        md_path = await engine.plans.md_path(sid)
        # NoPlan is ungated: the agent may write the session .md before any /plan.
        model.script = Script(
            [call("write_file", {"path": str(md_path), "content": PLAN_MD}), say("written")]
        )
        await engine.user_message(sid, "write a plan file", actor=OWNER, message_id=None)
        await settle(engine, sid)
        assert md_path.read_text(encoding="utf-8") == PLAN_MD
        await engine.command(sid, "plan", "", actor=OWNER)
        assert await engine.plans.state(sid) == "pre_init"
        outcome = await engine.command(sid, "execute", "", actor=OWNER)
        assert outcome.reply is not None and outcome.reply.startswith("No plan written yet")
        assert await engine.plans.state(sid) == "pre_init"
        # The stray text is moved aside, not lost, and no longer sits next to the sidecar.
        assert not md_path.exists()
        [kept] = md_path.parent.glob(md_path.name + ".stale-*")
        assert kept.read_text(encoding="utf-8") == PLAN_MD
    async with engine_rig(tmp_path, ScriptedProvider([])) as rig:
        assert await rig.engine.plans.state(sid) == "pre_init"  # and after a restart
        outcome = await rig.engine.command(sid, "execute", "", actor=OWNER)
        assert outcome.reply is not None and outcome.reply.startswith("No plan written yet")


@pytest.mark.parametrize("take_back", sorted(TAKE_BACK_COMMANDS))
def test_a_take_back_command_clears_a_pending_plan_switch_in_the_fold(take_back: str) -> None:
    events = [CommandRun(name="plan", data={"target": True}), CommandRun(name=take_back)]
    assert fold_session(events).plan_mode == PlanModeState(active=False, pending=None)


async def test_discard_of_a_pending_plan_leaves_no_pending_switch_on_a_cold_replay(
    tmp_path: Path,
) -> None:
    model = HeldModel([say("done")] * 5)
    async with engine_rig(tmp_path, model) as rig:
        sid = await rig.engine.session_for_chat(chat(-1))
        await busy(rig, model, sid)
        await rig.engine.command(sid, "plan", "", actor=OWNER)
        assert (await replay_projections(rig.engine.log, sid)).plan_mode.pending is True
        assert (await rig.engine.command(sid, "discard", "", actor=OWNER)).reply == (
            "Planning cancelled."
        )
        model.release.set()
        await settle(rig.engine, sid)
        assert (await replay_projections(rig.engine.log, sid)).plan_mode == PlanModeState()
    async with engine_rig(tmp_path, ScriptedProvider([])) as rig:
        assert (await replay_projections(rig.engine.log, sid)).plan_mode == PlanModeState()
        assert await rig.engine.plans.state(sid) == "none"


async def _owner_messages(rig: Rig, sid: str) -> list[tuple[int, str]]:
    return [
        (s.seq, s.event.text)
        for s in await rig.engine.log.read(sid)
        if isinstance(s.event, UserMessage) and s.event.source.kind == "human"
    ]


async def _approved_at(rig: Rig, sid: str) -> int:
    [seq] = [
        s.seq
        for s in await rig.engine.log.read(sid)
        if isinstance(s.event, PlanChanged) and s.event.reason == "approve"
    ]
    return seq


async def test_execute_with_text_approves_and_hands_the_text_to_the_agent(tmp_path: Path) -> None:
    async with engine_rig(tmp_path, ScriptedProvider([say("ok")] * 6)) as rig:
        sid = await rig.engine.session_for_chat(chat(-1))
        await post_init(rig, sid)
        outcome = await rig.engine.command(sid, "execute", "use tabs, not spaces", actor=OWNER)
        assert outcome.reply == "Approved. Working through the checklist."
        await settle(rig.engine, sid)
        assert await rig.engine.plans.state(sid) == "active"
        [(seq, text)] = await _owner_messages(rig, sid)
        assert text == "use tabs, not spaces" and seq > await _approved_at(rig, sid)


async def test_execute_with_text_while_busy_sends_the_text_after_the_approval_commits(
    tmp_path: Path,
) -> None:
    model = HeldModel([say("ok")] * 6)
    async with engine_rig(tmp_path, model) as rig:
        sid = await rig.engine.session_for_chat(chat(-1))
        await post_init(rig, sid)
        await busy(rig, model, sid)
        outcome = await rig.engine.command(sid, "execute", "start with the tests", actor=OWNER)
        assert outcome.reply is not None and "current step ends" in outcome.reply
        model.release.set()
        await settle(rig.engine, sid)
        assert await rig.engine.plans.state(sid) == "active"
        messages = await _owner_messages(rig, sid)
        assert [t for _s, t in messages] == ["think about it", "start with the tests"]
        assert messages[1][0] > await _approved_at(rig, sid)


async def test_execute_with_text_that_cannot_approve_says_the_text_was_not_sent(
    tmp_path: Path,
) -> None:
    async with engine_rig(tmp_path, ScriptedProvider([])) as rig:
        sid = await rig.engine.session_for_chat(chat(-1))
        none = await rig.engine.command(sid, "execute", "go", actor=OWNER)
        assert none.reply == "No plan to execute. Start one with /plan.\n" + TEXT_NOT_SENT
        await post_init(rig, sid, md="# Title only\n")
        refused = await rig.engine.command(sid, "execute", "go", actor=OWNER)
        assert refused.reply is not None and refused.reply.endswith("\n" + TEXT_NOT_SENT)
        assert await _owner_messages(rig, sid) == []
        assert await rig.engine.plans.state(sid) == "post_init"
