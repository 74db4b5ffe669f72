"""The plan text's size limit (PLANGATE_MAX_PLAN_KB) and the per-revision digest of the card.

Through the engine with a scripted agent, real files and SQLite: a 2 MB plan is refused where
it is written, and one that reaches the disk some other way cannot be submitted or approved.
"""

from __future__ import annotations

import threading
from pathlib import Path

from engine.events import ToolResult
from engine.model.script import Script, call, say
from engine.model.scripted import ScriptedProvider
from engine.plan.digest import PlanDigests
from engine.plan.extract import extract_work_items, validate_template_b
from tests.engine.helpers import OWNER, PLAN_MD, engine_rig, post_init, settle
from tests.keys import chat

# About 2 MB of plan: a real template B with a very long step list.
HUGE_MD = PLAN_MD + "".join(
    f"{n}. Step {n} — {'change the module carefully ' * 40}\n" for n in range(3, 1900)
)


async def test_a_2_mb_plan_is_refused_by_write_file_and_edit_file_with_its_size(
    tmp_path: Path,
) -> None:
    assert len(HUGE_MD.encode()) > 2 * 1024 * 1024
    model = ScriptedProvider([])
    async with engine_rig(tmp_path, model) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-100))
        # The path itself: a 2 MB call pushes the init result out of the context window.
        md_path = str(await engine.plans.md_path(sid))
        model.script = Script(
            [
                call("plan", {"op": "init", "title": "Greeting module", "mode": "design"}),
                call("write_file", {"path": md_path, "content": HUGE_MD}),
                call("write_file", {"path": md_path, "content": PLAN_MD}),
                call(
                    "edit_file",
                    {"path": md_path, "old_text": "## Context", "new_text": HUGE_MD},
                ),
                call("plan", {"op": "submit"}),
                say("The plan is ready for review."),
            ]
        )
        await engine.command(sid, "plan", "Add a greeting module", actor=OWNER)
        await settle(engine, sid)
        results = [
            s.event.content
            for s in await rig.storage.log.read(sid, types={"tool/result"})
            if isinstance(s.event, ToolResult)
        ]
        _init, huge, small, edit, submit = results
        assert huge.startswith("Denied (gate-plan-too-big)")
        assert "would be 2," in huge and "the limit is 512 KB (PLANGATE_MAX_PLAN_KB)" in huge
        assert small.startswith("wrote")
        assert edit.startswith("Denied (gate-plan-too-big)")
        assert "review" in submit.lower(), submit
        # Nothing of the refused texts reached the disk or the sidecar.
        md = (await engine.plans.md_path(sid)).read_text(encoding="utf-8")
        assert md == PLAN_MD
        sidecar = await engine.plans.current(sid)
        assert sidecar is not None and sidecar.description == PLAN_MD
        assert (await engine.plan_card(sid)).state == "review"


async def test_a_plan_over_the_limit_on_disk_cannot_be_submitted_or_approved(
    tmp_path: Path,
) -> None:
    async with engine_rig(tmp_path, ScriptedProvider([])) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-100))
        await post_init(rig, sid)
        revision = await engine.plans.revision(sid)
        # Written around the tools (a restored backup, another process): too big all the same.
        (await engine.plans.md_path(sid)).write_text(HUGE_MD, encoding="utf-8")
        written = await engine.plans.md_written(sid)
        assert written.code == "plan-too-big"
        sidecar = await engine.plans.current(sid)
        assert sidecar is not None and sidecar.description == PLAN_MD  # not mirrored
        submitted = await engine.plans.submit(sid)
        assert submitted.code == "plan-too-big" and "the limit is 512 KB" in submitted.text
        approved = await engine.plans.approve(sid, revision=revision, actor=OWNER)
        assert approved.code == "plan-too-big"
        reply = (await engine.command(sid, "execute", "", actor=OWNER)).reply or ""
        assert reply.startswith("The plan cannot be approved: the plan .md would be 2,")
        card = await engine.plan_card(sid)
        assert card.state != "review" and card.steps is None
        assert await engine.plans.state(sid) == "post_init"


async def test_the_review_card_parses_its_plan_once_per_revision(tmp_path: Path) -> None:
    async with engine_rig(tmp_path, ScriptedProvider([])) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-100))
        await post_init(rig, sid)
        digests = engine.plans.digests
        before = digests.computed
        for _ in range(20):
            card = await engine.plan_card(sid)
            assert card.state == "review"
        assert digests.computed == before + 1
        assert card.steps is not None
        assert [title for title, _ in card.steps] == [
            item.title for item in extract_work_items(PLAN_MD)
        ]
        # A new revision is parsed again, once.
        path = await engine.plans.md_path(sid)
        path.write_text(PLAN_MD + "3. Docs — say so in the README.\n", encoding="utf-8")
        assert (await engine.plans.md_written(sid)).ok
        for _ in range(5):
            card = await engine.plan_card(sid)
        assert digests.computed == before + 2
        assert card.steps is not None and card.steps[-1][0].startswith("Docs")


async def test_digests_are_made_off_the_event_loop_thread() -> None:
    seen: list[int] = []

    def validate(text: str) -> list[str]:
        seen.append(threading.get_ident())
        return validate_template_b(text)

    digests = PlanDigests(max_bytes=512 * 1024, validate=validate, extract=extract_work_items)
    first = await digests.of("p1", 1, PLAN_MD)
    again = await digests.of("p1", 1, PLAN_MD)
    assert first is again and first.approvable and len(seen) == 1
    assert seen[0] != threading.get_ident()
    big = await digests.of("p1", 2, HUGE_MD)
    assert big.too_big and big.steps == () and len(seen) == 1  # never parsed
