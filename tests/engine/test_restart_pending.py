"""A pending /plan or approval that a dead process logged but never committed is decided on
load, the same way it would have been (docs/plan-lifecycle.md); one that was taken back is not."""

from __future__ import annotations

from pathlib import Path

from engine.events import CommandRun
from engine.model.script import say
from engine.model.scripted import ScriptedProvider
from engine.sessions import PLAN_RESUMED_NOTICE, STALE_APPROVAL_NOTICE
from tests.engine.helpers import OWNER, engine_rig, post_init, settle
from tests.keys import chat


def _model() -> ScriptedProvider:
    return ScriptedProvider([say("ok")] * 10)


async def test_a_logged_approval_commits_after_a_restart(tmp_path: Path) -> None:
    async with engine_rig(tmp_path, _model()) as rig:
        sid = await rig.engine.session_for_chat(chat(-1))
        await post_init(rig, sid)
        revision = await rig.engine.plans.revision(sid)
        # The dead process logged the approval and died before committing it.
        await rig.storage.log.append(
            sid, [CommandRun(name="approve", args=str(revision), actor=OWNER,
                             data={"revision": revision})]
        )  # fmt: skip
    async with engine_rig(tmp_path, _model()) as rig:
        assert await rig.engine.plans.state(sid) == "active"
        await settle(rig.engine, sid)
        sidecar = await rig.engine.plans.current(sid)
        assert sidecar is not None and sidecar.approved_at is not None
        assert len(sidecar.tasks) == 2


async def test_a_logged_approval_for_an_old_revision_goes_back_to_review(tmp_path: Path) -> None:
    async with engine_rig(tmp_path, _model()) as rig:
        sid = await rig.engine.session_for_chat(chat(-1))
        await post_init(rig, sid)
        revision = await rig.engine.plans.revision(sid)
        await rig.storage.log.append(
            sid, [CommandRun(name="approve", actor=OWNER, data={"revision": revision - 1})]
        )
    async with engine_rig(tmp_path, _model()) as rig:
        assert await rig.engine.plans.state(sid) == "post_init"
        notices = [c.args["text"] for c in rig.channel.of("notice")]
        assert notices == [STALE_APPROVAL_NOTICE]


async def test_an_approval_taken_back_by_keep_planning_stays_taken_back(tmp_path: Path) -> None:
    async with engine_rig(tmp_path, _model()) as rig:
        sid = await rig.engine.session_for_chat(chat(-1))
        await post_init(rig, sid)
        revision = await rig.engine.plans.revision(sid)
        await rig.storage.log.append(
            sid,
            [
                CommandRun(name="approve", actor=OWNER, data={"revision": revision}),
                CommandRun(name="keep_planning", actor=OWNER),
            ],
        )
    async with engine_rig(tmp_path, _model()) as rig:
        assert await rig.engine.plans.state(sid) == "post_init"
        assert rig.channel.of("notice") == []


async def test_a_logged_plan_switch_commits_after_a_restart_unless_discarded(
    tmp_path: Path,
) -> None:
    async with engine_rig(tmp_path, _model()) as rig:
        pending = await rig.engine.session_for_chat(chat(-1))
        taken_back = await rig.engine.session_for_chat(chat(-2))
        await rig.storage.log.append(
            pending, [CommandRun(name="plan", actor=OWNER, data={"target": True})]
        )
        await rig.storage.log.append(
            taken_back,
            [
                CommandRun(name="plan", actor=OWNER, data={"target": True}),
                CommandRun(name="discard", actor=OWNER),
            ],
        )
    async with engine_rig(tmp_path, _model()) as rig:
        assert await rig.engine.plans.state(pending) == "pre_init"
        assert await rig.engine.plans.state(taken_back) == "none"
        notices = [(c.session_id, c.args["text"]) for c in rig.channel.of("notice")]
        assert notices == [(pending, PLAN_RESUMED_NOTICE)]
