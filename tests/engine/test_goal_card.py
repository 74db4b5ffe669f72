"""Where the goal card is: kept by the engine (a ``goal/card`` event), not by a front end.

A goal has no sidecar (it lives in NoPlan too), so its card's message is logged in the
session: a restart keeps editing the same message, a fork or a group's migration owns none.
"""

from __future__ import annotations

from pathlib import Path

from engine.model.scripted import ScriptedProvider
from tests.engine.helpers import OWNER, engine_rig
from tests.keys import chat


async def test_the_goal_card_id_survives_a_restart_and_a_fork_owns_none(tmp_path: Path) -> None:
    async with engine_rig(tmp_path, ScriptedProvider([])) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-5))
        await engine.command(sid, "goal", "Keep it green", actor=OWNER)
        assert (await engine.goal_card(sid)).card_id is None
        await engine.set_goal_card(sid, chat_id="tg:-5", card_id="77")
        card = await engine.goal_card(sid)
        assert (card.chat_id, card.card_id) == ("tg:-5", "77")
        fork = await engine.sessions.fork(sid)
        assert (await engine.goal_card(fork)).card_id is None
    async with engine_rig(tmp_path, ScriptedProvider([])) as rig:
        card = await rig.engine.goal_card(sid)
        assert (card.chat_id, card.card_id) == ("tg:-5", "77")
        moved = await rig.engine.migrate_chat("tg:-5", "tg:-1005")
        assert moved == [sid]
        assert (await rig.engine.goal_card(sid)).card_id is None
