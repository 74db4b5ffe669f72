"""Why an approved run stopped is always on its card: after a failure in the controller's
drain (no armed run is left without a turn), and after a restart (read back from the log).
The real engine over real files and SQLite, the scripted model."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest

from engine.agent.adapters import PlanServiceAdapter
from engine.agent.checklist import RESTART_TEXT, STOP_TEXT, PauseReason
from engine.model.script import say
from engine.model.scripted import ScriptedProvider
from tests.engine.helpers import OWNER, engine_rig, post_init, settle
from tests.engine.test_checklist_run import TASK_1, TASK_2, _press
from tests.keys import chat


async def test_a_failure_in_the_drain_after_a_turn_pauses_the_run_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = [*TASK_1, say("Task 1 is done."), *TASK_2, say("All done.")]
    async with engine_rig(tmp_path, ScriptedProvider(script)) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-1))
        await post_init(rig, sid)
        real = PlanServiceAdapter.prompt_view
        failed: list[bool] = []

        async def once_after_the_turn(self: PlanServiceAdapter, session_id: str) -> Any:
            # The first read of the plan once the first turn has ended fails (as a locked
            # store would): an exception in the drain, between two turns of the run.
            if not failed and inspect.stack()[2].function == "_after_turn":
                failed.append(True)
                raise OSError("the store is locked")
            return await real(self, session_id)

        monkeypatch.setattr(PlanServiceAdapter, "prompt_view", once_after_the_turn)
        await engine.command(sid, "execute", "", actor=OWNER)
        await settle(engine, sid)
        assert failed
        controller = engine.agents.controller(sid)
        assert not controller.checklist.armed  # no armed run waits for a turn that never comes
        card = await engine.plan_card(sid)
        assert card.state == "paused", card.state
        assert card.halted == "Paused: an internal error stopped the run (OSError)"
        # Resume goes on to the end.
        assert await _press(rig, sid, "resume") == "Continuing with the checklist."
        await settle(engine, sid)
        assert await engine.plans.state(sid) == "none"


async def test_after_a_restart_the_card_says_the_restart_or_the_stop(tmp_path: Path) -> None:
    model = ScriptedProvider([*TASK_1, say("Task 1 is done.")])
    async with engine_rig(tmp_path, model) as rig:
        sid = await rig.engine.session_for_chat(chat(-1))
        await post_init(rig, sid)
        await rig.engine.command(sid, "execute", "", actor=OWNER)
        await settle(rig.engine, sid)
        await rig.engine.command(sid, "stop", "", actor=OWNER)
    async with engine_rig(tmp_path, ScriptedProvider([])) as again:
        await again.engine.ensure_loaded(sid)  # as any command or press of the session does
        await settle(again.engine, sid)
        card = await again.engine.plan_card(sid)
        assert card.state == "paused" and card.halted == STOP_TEXT, card.halted
        # Resume arms it again: what stopped it before no longer shows.
        assert await _press(again, sid, "resume") == "Continuing with the checklist."
        await settle(again.engine, sid)  # the empty script fails the turn: paused, and why
        assert (await again.engine.plan_card(sid)).halted != STOP_TEXT
    assert RESTART_TEXT.startswith("Paused by the restart")


def test_the_reason_read_back_is_the_last_stop_since_the_last_arm() -> None:
    from engine.agent.checklist import stopped_reason
    from engine.events import CommandRun, RunPaused, TurnEnd

    stuck = RunPaused(kind="stuck", text="Stuck on task 2: monologue")
    round_stuck = RunPaused(kind="stuck", text="Stuck: a goal round", goal_id="g1")
    assert stopped_reason([]) is None
    ended = TurnEnd(turn_id="t", outcome="completed")
    assert stopped_reason([CommandRun(name="approve"), ended]) is None
    cut = [CommandRun(name="approve"), TurnEnd(turn_id="t", outcome="interrupted")]
    assert stopped_reason(cut) == PauseReason("restart", RESTART_TEXT)
    assert stopped_reason([*cut, CommandRun(name="resume")]) is None  # armed again since
    paused = [CommandRun(name="execute"), stuck, TurnEnd(turn_id="t", outcome="cancelled")]
    reason = stopped_reason(paused)
    assert reason is not None and reason.kind == "stuck" and reason.text == stuck.text
    cancelled = TurnEnd(turn_id="t", outcome="cancelled")
    stopped = [CommandRun(name="resume"), CommandRun(name="stop"), cancelled]
    assert stopped_reason(stopped) == PauseReason("stop", STOP_TEXT)
    # A goal round's stuck pause is the goal's, not the checklist's.
    assert stopped_reason([CommandRun(name="approve"), round_stuck]) is None
