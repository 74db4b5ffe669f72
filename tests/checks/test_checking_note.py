"""While plangate runs a task's checks the card says so, and the note goes with the run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from bot.telegram.presenter import plan_note
from engine.api import PlanCardData
from engine.checks.runner import SandboxChecks
from engine.checks.types import CheckRun
from engine.plan.service import PlanChange, PlanService
from engine.testing import InMemoryEventLog
from engine.tools.bash import BashTool
from tests.checks.support import CHECK, CHECKED_PLAN, make_project
from tests.plan.lifecycle_helpers import make_store


class SpyChecks:
    """The real runner, noting what the service says while it runs."""

    def __init__(self) -> None:
        self.inner = SandboxChecks(BashTool())
        self.plans: PlanService | None = None
        self.seen: list[str | None] = []

    async def run(
        self,
        commands: Sequence[str],
        *,
        session_id: str,
        workspace: Path,
        hidden: Sequence[Path] = (),
        baseline: Mapping[str, str] | None = None,
        watch: Sequence[str] = (),
    ) -> CheckRun:
        assert self.plans is not None
        self.seen.append(self.plans.checking(session_id))
        return await self.inner.run(
            commands,
            session_id=session_id,
            workspace=workspace,
            hidden=hidden,
            baseline=baseline,
            watch=watch,
        )


async def test_the_card_says_checks_are_running_and_drops_it_after(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    make_project(workspace)
    spy = SpyChecks()
    plans = PlanService(make_store(tmp_path / "home", workspace), InMemoryEventLog(), checks=spy)
    spy.plans = plans
    redraws: list[str | None] = []

    async def listener(change: PlanChange) -> None:
        redraws.append(plans.checking(change.session_id))

    plans.add_listener(listener)
    sid = "s1"
    assert (await plans.enter_pre_init(sid)).ok
    assert (await plans.init(sid, title="Health", mode="design", workspace=workspace)).ok
    (await plans.md_path(sid)).write_text(CHECKED_PLAN)
    await plans.md_written(sid)
    assert (await plans.approve(sid, revision=await plans.revision(sid), actor="tg:1")).ok
    assert (await plans.start(sid)).ok
    redraws.clear()
    refused = await plans.complete(sid, workspace=workspace)
    assert refused.code == "checks-failed"
    assert spy.seen == [f"task 1: `{CHECK}`"]
    # A redraw while it ran (with the note), and one after (without it).
    assert redraws == [f"task 1: `{CHECK}`", None]
    assert plans.checking(sid) is None
    note = plan_note(
        PlanCardData(state="active", sidecar=None, busy=True, checking=spy.seen[0]), now=0.0
    )
    assert note == f"🧪 Running the checks of task 1: `{CHECK}`"
