"""A setup script nobody approved never runs in a goal round (docs/environments.md): the goal
is blocked needs-approval, naming the script, with one message. Real engine, git, SQLite and
bubblewrap; a scripted agent."""

from __future__ import annotations

import asyncio
from pathlib import Path

from engine.model.script import call, say
from engine.model.scripted import ScriptedProvider
from tests.checks.support import APP_PY, TEST_PY
from tests.engine.helpers import OWNER, engine_rig, settle
from tests.projects.support import make_repo

SETUP = "echo installing > installed.txt\n"


async def test_a_goal_round_never_runs_an_unapproved_setup_script_and_blocks_naming_it(
    tmp_path: Path,
) -> None:
    make_repo(
        tmp_path / "work",
        {"app.py": APP_PY, "test_app.py": TEST_PY, ".plangate/setup.sh": SETUP},
    )
    script = [
        # The round starts a checklist of its own: a worktree, whose setup nobody approved.
        call("plan", {"op": "init", "title": "Fix health", "tasks": [{"title": "Fix it"}]}),
        call("read_file", {"path": "app.py"}, expect="Checklist"),
        say("unreachable: the round stops before this step"),
    ]
    async with engine_rig(tmp_path, ScriptedProvider(script)) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(-1, 0)
        await engine.command(sid, "goal", "make the health test pass", actor=OWNER)

        async def blocked() -> None:
            while (goal := await engine.goals.get(sid)) is None or goal.phase != "blocked":
                await settle(engine, sid, timeout_s=60)
                await asyncio.sleep(0.02)

        await asyncio.wait_for(blocked(), 90)
        goal = await engine.goals.get(sid)
        record = await engine.worktrees.record(sid)
        script_sha = (await engine.worktrees.project_script(rig.workspace)).sha  # type: ignore[union-attr]
    assert goal is not None and goal.blocked is not None
    assert goal.blocked.code == "needs-approval"
    assert f".plangate/setup.sh (sha256 {script_sha[:12]})" in goal.blocked.message
    # Nothing ran: the worktree has no trace of the script, and nobody was asked.
    assert record is not None and record.phase == "live" and record.setup == "needed"
    assert not (Path(record.path) / "installed.txt").exists()
    asked = [c for c in rig.channel.calls if c.method == "approval_requested"]
    assert asked == []
    said = [c for c in rig.channel.calls if "setup.sh" in str(c.args.get("text", c.args))]
    assert len(said) <= 1
