"""/status reads the goal without a database trip, so it must be current from a session's
first touch in this process: after a restart, in a fork, and after every change here."""

from __future__ import annotations

from pathlib import Path

from engine.model.script import say
from engine.model.scripted import ScriptedProvider
from tests.engine.helpers import OWNER, Rig, engine_rig
from tests.keys import chat


def _model() -> ScriptedProvider:
    return ScriptedProvider([say("ok")] * 10)


async def _status(rig: Rig, sid: str) -> str:
    reply = (await rig.engine.command(sid, "status", "", actor=None)).reply
    assert reply is not None
    return reply


async def test_status_shows_each_goal_change_made_in_this_process(tmp_path: Path) -> None:
    async with engine_rig(tmp_path, _model()) as rig:
        sid = await rig.engine.session_for_chat(chat(-1))
        assert "No goal." in await _status(rig, sid)
        await rig.engine.command(sid, "goal", "Ship the release", actor=OWNER)
        assert "Goal: Ship the release" in await _status(rig, sid)
        await rig.engine.command(sid, "goal", "clear", actor=OWNER)
        assert "No goal." in await _status(rig, sid)


async def test_status_shows_a_goal_from_the_log_after_a_restart_and_in_a_fork(
    tmp_path: Path,
) -> None:
    async with engine_rig(tmp_path, _model()) as rig:
        sid = await rig.engine.session_for_chat(chat(-1))
        await rig.engine.command(sid, "goal", "Ship the release", actor=OWNER)
        await rig.engine.command(sid, "stop", "", actor=OWNER)
    async with engine_rig(tmp_path, _model()) as rig:
        assert "Goal: Ship the release" in await _status(rig, sid)
        # A fork is bound to no chat, so the engine's start did not load it: first touch.
        fork = await rig.engine.sessions.fork(sid)
        assert "Goal: Ship the release" in await _status(rig, fork)
