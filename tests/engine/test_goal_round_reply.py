"""A goal round that completes its goal ends at the next pre-step; the chat still hears what
the model said with that call, as the round's reply."""

from __future__ import annotations

import asyncio
from pathlib import Path

from engine.model.script import call
from engine.model.scripted import ScriptedProvider
from tests.engine.helpers import engine_rig, settle
from tests.keys import chat


async def test_a_round_that_completes_its_goal_replies_with_what_the_model_said(
    tmp_path: Path,
) -> None:
    model = ScriptedProvider(
        [call("update_goal", {"status": "complete"}, text="Met: the tests pass.")]
    )
    async with engine_rig(tmp_path, model) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-1))
        await engine.command(sid, "goal", "Make the tests pass", actor="tg:1")

        async def completed() -> None:
            while (goal := await engine.goals.get(sid)) is None or goal.phase != "complete":
                await asyncio.sleep(0.01)

        await asyncio.wait_for(completed(), 20)
        await settle(engine, sid)
        assert [c.args["text"] for c in rig.channel.of("reply")] == ["Met: the tests pass."]
        goal = await engine.goals.get(sid)
        assert goal is not None and goal.rounds_started == 1
