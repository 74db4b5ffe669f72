"""PLANGATE_PLAN_APPROVALS and PLANGATE_OWNER_OVERRIDES in the engine: votes by different
people for one plan revision, read back after a restart, reset by a new revision.

Real files and SQLite; the model is scripted and only reached once a plan is approved.
"""

from __future__ import annotations

from pathlib import Path

from engine.api import Press
from engine.app import Engine
from engine.keys import key_label
from engine.model.script import say
from engine.model.scripted import ScriptedProvider
from engine.roles.types import Person
from tests.engine.helpers import OWNER, engine_rig, post_init, settle
from tests.keys import chat, person

GROUP = -100900
ANA, BEN, MAX = person(11), person(12), person(13)
MD_2 = "\n\n## Notes\nA second look.\n"


async def _approve(engine: Engine, sid: str, actor: str, name: str) -> str:
    data = await engine.plan_card(sid)
    assert data.sidecar is not None
    press = Press("p", "approve", data.sidecar.id[:8], data.sidecar.revision)
    outcome = await engine.press(sid, press, actor=actor, actor_name=name)
    return outcome.reply or ""


async def _team(engine: Engine) -> None:
    for who in (ANA, BEN):
        # The front end names the person a typed id means (the target).
        await engine.team(
            chat(GROUP), f"add {key_label(who)} approver", actor=OWNER, target=Person(who)
        )


def _model() -> ScriptedProvider:
    return ScriptedProvider([say("on it")] * 10)


async def test_votes_count_once_each_reset_on_a_new_revision_and_survive_a_restart(
    tmp_path: Path,
) -> None:
    owners = frozenset({OWNER})
    async with engine_rig(tmp_path, _model(), owner_ids=owners, plan_approvals=2) as rig:
        engine = rig.engine
        await _team(engine)
        sid = await engine.session_for_chat(chat(GROUP))
        await post_init(rig, sid)
        assert (await engine.plan_card(sid)).approvals == ()
        assert (
            await _approve(engine, sid, ANA, "Ana") == "Approval 1 of 2: it needs another approver."
        )
        assert (await _approve(engine, sid, ANA, "Ana")).startswith("You approved this version")
        card = await engine.plan_card(sid)
        assert card.approvals == ("Ana",) and card.approvals_needed == 2
        # A member's vote is refused by the role rule, not counted.
        assert "member" in await _approve(engine, sid, MAX, "Max")
        # The plan changes: a new revision starts from no approvals.
        md_path = await engine.plans.md_path(sid)
        md_path.write_text(md_path.read_text(encoding="utf-8") + MD_2, encoding="utf-8")
        assert (await engine.plans.md_written(sid)).ok
        assert (await engine.plan_card(sid)).approvals == ()
        assert (await _approve(engine, sid, BEN, "Ben")).startswith("Approval 1 of 2")
        assert await engine.plans.state(sid) == "post_init"

    # After a restart Ben's vote still counts; the owner (no override) is the second.
    async with engine_rig(tmp_path, _model(), owner_ids=owners, plan_approvals=2) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(GROUP))
        assert (await engine.plan_card(sid)).approvals == ("Ben",)
        assert (await _approve(engine, sid, OWNER, "Olga")).startswith("Approved")
        await settle(engine, sid)
        sidecar = await engine.plans.current(sid)
        assert sidecar is not None and sidecar.status == "Active"
        assert [(a.user_id, a.name) for a in sidecar.approved_by] == [(BEN, "Ben"), (OWNER, "Olga")]
        assert all(a.at for a in sidecar.approved_by)


async def test_an_owner_alone_approves_when_owners_override(tmp_path: Path) -> None:
    owners = frozenset({OWNER})
    async with engine_rig(
        tmp_path, _model(), owner_ids=owners, plan_approvals=2, owner_overrides=True
    ) as rig:
        engine = rig.engine
        await _team(engine)
        sid = await engine.session_for_chat(chat(GROUP))
        await post_init(rig, sid)
        # An approver still needs a second pair of eyes; the owner does not.
        assert (await _approve(engine, sid, ANA, "Ana")).startswith("Approval 1 of 2")
        assert (await _approve(engine, sid, OWNER, "Olga")).startswith("Approved")
        await settle(engine, sid)
        sidecar = await engine.plans.current(sid)
        assert sidecar is not None and sidecar.status == "Active"
        assert [a.user_id for a in sidecar.approved_by] == [ANA, OWNER]
