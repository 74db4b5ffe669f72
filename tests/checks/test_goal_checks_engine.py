"""A goal with checks: the model's "complete" stands only when plangate's run passes; the
failure goes into the next round's prompt (docs/checks.md). Real engine, files, SQLite and
bubblewrap, a scripted agent."""

from __future__ import annotations

import asyncio
from pathlib import Path

from engine.events import GoalCheck, GoalRoundSource, UserMessage
from engine.goal.fold import fold_goal
from engine.model.script import ScriptStep, call, say
from engine.model.scripted import ScriptedProvider
from tests.checks.support import ALLOW_CHECK, CHECK, FIXED_APP_PY, explore, make_project
from tests.engine.helpers import OWNER, engine_rig, settle
from tests.keys import chat


def goal_script() -> list[ScriptStep]:
    """Round 1: explore, claim done too early (refused with the failure), end the round.
    Round 2: the prompt carries the failure; fix the code, claim done: it stands."""
    return [
        *explore(),
        call("bash", {"command": CHECK}),
        call("update_goal", {"status": "complete"}, expect="FAILED"),
        say("The checks still fail; I will fix it next round.", expect="checks-failed"),
        call("read_file", {"path": "app.py"}, expect="AssertionError"),
        call(
            "edit_file",
            {"path": "app.py", "old_text": 'return "down"', "new_text": 'return "ok"'},
        ),
        call("bash", {"command": CHECK}),
        call("update_goal", {"status": "complete"}, expect="OK"),
        say("Done: the suite passes.", expect="checks passed"),
    ]


async def test_a_goal_claimed_done_while_its_check_fails_stays_active_until_it_passes(
    tmp_path: Path,
) -> None:
    make_project(tmp_path / "work")
    model = ScriptedProvider(goal_script())
    async with engine_rig(tmp_path, model, allow_bash=ALLOW_CHECK) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-1))
        out = await engine.command(
            sid, "goal", f'make the health test pass --check "{CHECK}"', actor=OWNER
        )
        assert out.reply is not None and "Goal set." in out.reply and CHECK in out.reply

        async def complete() -> None:
            while True:
                goal = await engine.goals.get(sid)
                if goal is not None and goal.phase == "complete":
                    return
                await settle(engine, sid, timeout_s=60)
                await engine.agents.wait_idle(sid)

        await asyncio.wait_for(complete(), 90)
        events = [s.event for s in await rig.storage.log.read(sid)]
    assert (rig.workspace / "app.py").read_text() == FIXED_APP_PY
    checks = [e for e in events if isinstance(e, GoalCheck)]
    assert [c.passed for c in checks] == [False, True]
    assert checks[0].run.results[0].exit_code == 1
    rounds = [
        e for e in events if isinstance(e, UserMessage) and isinstance(e.source, GoalRoundSource)
    ]
    assert len(rounds) == 2
    assert "failed" not in rounds[0].text and "AssertionError" in rounds[1].text
    assert CHECK in rounds[0].text  # every round names the checks
    # Replay: the fold rebuilds the goal, its checks and the last run.
    state = fold_goal(events)
    assert state.goal is not None and state.goal.phase == "complete"
    assert state.goal.checks == (CHECK,)
    assert state.last_check is not None and state.last_check.passed


async def test_goal_check_add_list_and_clear_are_edits_of_the_snapshot(tmp_path: Path) -> None:
    async with engine_rig(tmp_path, ScriptedProvider([])) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-1))
        assert (await engine.command(sid, "goal", "check list", actor=OWNER)).reply == (
            "There is no goal."
        )
        await engine.command(sid, "goal", "keep it green --check make", actor=OWNER)
        await engine.goals.disarm(sid)  # no rounds in this test
        added = await engine.command(sid, "goal", 'check add "python3 -m unittest -q"', actor=OWNER)
        assert added.reply is not None and added.reply.startswith("Check added.")
        listed = await engine.command(sid, "goal", "check list", actor=OWNER)
        assert listed.reply == "Checks of the goal:\n- `make`\n- `python3 -m unittest -q`"
        goal = await engine.goals.get(sid)
        assert goal is not None and goal.revision == 2
        assert goal.checks == ("make", "python3 -m unittest -q")
        bad = await engine.command(sid, "goal", "check add " + "x" * 1001, actor=OWNER)
        assert bad.reply is not None and bad.reply.startswith("Refused: a check is one")
        cleared = await engine.command(sid, "goal", "check clear", actor=OWNER)
        assert cleared.reply is not None and cleared.reply.startswith("Checks cleared.")
        goal = await engine.goals.get(sid)
        assert goal is not None and goal.checks == () and goal.revision == 3
