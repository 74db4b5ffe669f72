"""The command plane over every plan state, stale presses, /new and a restart (docs/commands.md).

The engine runs on real files and SQLite; the model is scripted and never reached unless a
test queues a turn.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from engine.api import Press
from engine.app import Engine
from engine.commands import HELP_TEXT, STALE_TEXT
from engine.events import CommandRun, TurnEnd, TurnStart, UserMessage
from engine.model.script import say
from engine.model.scripted import ScriptedProvider
from engine.plan.machine import TaskSpec
from tests.engine.helpers import OWNER, PROBE, Rig, engine_rig, faulty_rig, post_init, settle
from tests.keys import chat


async def _active_checklist(rig: Rig, sid: str) -> None:
    result = await rig.engine.plans.init(
        sid,
        title="Chores",
        mode="checklist",
        tasks=(TaskSpec(title="one"), TaskSpec(title="two")),
        workspace=rig.workspace,
    )
    assert result.ok, result.text


async def _commands(engine: Engine, sid: str) -> list[CommandRun]:
    return [e.event for e in await engine.log.read(sid) if isinstance(e.event, CommandRun)]


@pytest.fixture
def quiet_model() -> ScriptedProvider:
    return ScriptedProvider([say("ok")] * 20)


async def test_plan_from_noplan_enters_durable_pre_init_and_logs_the_target(
    tmp_path: Path, quiet_model: ScriptedProvider
) -> None:
    async with engine_rig(tmp_path, quiet_model) as rig:
        sid = await rig.engine.session_for_chat(chat(-1))
        outcome = await rig.engine.command(sid, "plan", "", actor=OWNER)
        assert outcome.plan_card == "restick"
        assert outcome.reply is not None and "What should it plan?" in outcome.reply
        assert await rig.engine.plans.state(sid) == "pre_init"
        assert (await rig.engine.plan_card(sid)).state == "planning"
        [run] = await _commands(rig.engine, sid)
        assert run.name == "plan" and run.data == {"target": True} and run.actor == OWNER


async def test_plan_while_planning_says_so_and_resticks(
    tmp_path: Path, quiet_model: ScriptedProvider
) -> None:
    async with engine_rig(tmp_path, quiet_model) as rig:
        sid = await rig.engine.session_for_chat(chat(-1))
        await post_init(rig, sid)
        outcome = await rig.engine.command(sid, "plan", "", actor=OWNER)
        assert outcome.reply == "Already planning."
        assert outcome.plan_card == "restick"
        assert await rig.engine.plans.state(sid) == "post_init"


async def test_plan_on_an_active_design_plan_offers_revise(
    tmp_path: Path, quiet_model: ScriptedProvider
) -> None:
    async with engine_rig(tmp_path, quiet_model) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-1))
        await post_init(rig, sid)
        assert (await engine.command(sid, "execute", "", actor=OWNER)).reply is not None
        await settle(engine, sid)
        assert await engine.plans.state(sid) == "active"
        outcome = await engine.command(sid, "plan", "", actor=OWNER)
        assert outcome.plan_card == "restick"
        assert (await engine.plan_card(sid)).state == "revise_offer"
        sidecar = await engine.plans.current(sid)
        assert sidecar is not None
        press = await engine.press(
            sid, Press("p", "revise", sidecar.id[:8], sidecar.revision), actor=OWNER
        )
        assert press.await_feedback
        revised = await engine.plans.current(sid)
        assert revised is not None and revised.revising is not None
        assert await engine.plans.state(sid) == "post_init"
        # Discard during a revision cancels only the revision.
        outcome = await engine.command(sid, "discard", "", actor=OWNER)
        assert outcome.reply == "The revision is discarded; the approved plan stands."
        assert await engine.plans.state(sid) == "active"


async def test_plan_on_a_checklist_cannot_be_revised(
    tmp_path: Path, quiet_model: ScriptedProvider
) -> None:
    async with engine_rig(tmp_path, quiet_model) as rig:
        sid = await rig.engine.session_for_chat(chat(-1))
        await _active_checklist(rig, sid)
        outcome = await rig.engine.command(sid, "plan", "", actor=OWNER)
        assert (await rig.engine.plan_card(sid)).state != "revise_offer"
        assert outcome.reply is not None and "/discard" in outcome.reply


@pytest.mark.parametrize(
    ("setup", "reply", "card"),
    [
        ("none", "No plan. Start one with /plan.", None),
        ("pre_init", "Planning; nothing written yet.", "restick"),
        ("post_init", None, "restick"),
        ("active", None, "restick"),
    ],
)
async def test_show_plan_in_every_state(
    tmp_path: Path, quiet_model: ScriptedProvider, setup: str, reply: str | None, card: str | None
) -> None:
    async with engine_rig(tmp_path, quiet_model) as rig:
        sid = await rig.engine.session_for_chat(chat(-1))
        if setup == "pre_init":
            await rig.engine.plans.enter_pre_init(sid)
        elif setup == "post_init":
            await post_init(rig, sid)
        elif setup == "active":
            await _active_checklist(rig, sid)
        outcome = await rig.engine.command(sid, "show_plan", "", actor=None)
        assert outcome.reply == reply
        assert outcome.plan_card == card


async def test_execute_is_refused_without_a_written_plan(
    tmp_path: Path, quiet_model: ScriptedProvider
) -> None:
    async with engine_rig(tmp_path, quiet_model) as rig:
        sid = await rig.engine.session_for_chat(chat(-1))
        none = await rig.engine.command(sid, "execute", "", actor=OWNER)
        assert none.reply == "No plan to execute. Start one with /plan."
        await rig.engine.plans.enter_pre_init(sid)
        pre = await rig.engine.command(sid, "execute", "", actor=OWNER)
        assert pre.reply is not None and pre.reply.startswith("No plan written yet")
        assert await rig.engine.plans.state(sid) == "pre_init"


async def test_execute_lists_what_template_b_misses_and_changes_nothing(
    tmp_path: Path, quiet_model: ScriptedProvider
) -> None:
    async with engine_rig(tmp_path, quiet_model) as rig:
        sid = await rig.engine.session_for_chat(chat(-1))
        await post_init(rig, sid, md="# Title only\n")
        assert (await rig.engine.plan_card(sid)).state == "written"
        outcome = await rig.engine.command(sid, "execute", "", actor=OWNER)
        assert outcome.reply is not None
        assert outcome.reply.startswith("The plan cannot be approved yet. Missing:")
        assert "Context" in outcome.reply
        assert await rig.engine.plans.state(sid) == "post_init"


async def test_execute_on_an_empty_active_plan_queues_a_seed_retry(tmp_path: Path) -> None:
    model = ScriptedProvider([say("ok")] * 5)
    async with engine_rig(tmp_path, model) as rig:
        sid = await rig.engine.session_for_chat(chat(-1))
        await post_init(rig, sid)
        await rig.engine.command(sid, "execute", "", actor=OWNER)
        await settle(rig.engine, sid)
        active = await rig.engine.plans.current(sid)
        assert active is not None and active.status == "Active"
        # A failed seed leaves Active with no tasks (valid template B always extracts steps,
        # so write that state to disk as an older process would have left it).
        await rig.storage.plan_store.save(sid, active.model_copy(update={"tasks": []}))
    async with engine_rig(tmp_path, ScriptedProvider([say("building")])) as rig:
        engine = rig.engine
        assert await engine.session_for_chat(chat(-1)) == sid
        outcome = await engine.command(sid, "execute", "", actor=OWNER)
        assert outcome.reply == "Building the checklist again."
        await settle(engine, sid)
        last = [e.event for e in await engine.log.read(sid) if isinstance(e.event, UserMessage)]
        assert last[-1].source.kind == "seed"
        assert "plan add_tasks" in last[-1].text
        assert await engine.plans.state(sid) == "active"  # kept, never archived


async def test_discard_in_every_state(tmp_path: Path, quiet_model: ScriptedProvider) -> None:
    async with engine_rig(tmp_path, quiet_model) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-1))
        assert (await engine.command(sid, "discard", "", actor=OWNER)).reply == (
            "Nothing to discard."
        )
        await engine.plans.enter_pre_init(sid)
        assert (await engine.command(sid, "discard", "", actor=OWNER)).reply == (
            "Planning cancelled."
        )
        assert await engine.plans.state(sid) == "none"
        await post_init(rig, sid)
        outcome = await engine.command(sid, "discard", "", actor=OWNER)
        assert outcome.reply == "Plan discarded. It is archived, not deleted."
        assert await engine.plans.state(sid) == "none"
        archive = (await engine.plans.md_path(sid)).parent / "archive"
        assert any(p.suffix == ".md" for p in archive.iterdir())
        card = await engine.plan_card(sid)
        assert card.ended == "discarded" and card.state == "none"


async def test_stale_and_misplaced_presses_change_nothing(
    tmp_path: Path, quiet_model: ScriptedProvider
) -> None:
    async with engine_rig(tmp_path, quiet_model) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-1))
        await post_init(rig, sid)
        sidecar = await engine.plans.current(sid)
        assert sidecar is not None
        short, rev = sidecar.id[:8], sidecar.revision
        before = await engine.plans.current(sid)
        for kind, action, sid8, revision in [
            ("p", "approve", short, rev - 1),  # an older card
            ("p", "approve", "deadbeef", rev),  # another plan's card
            ("p", "revise", short, rev),  # not allowed while Editing
            ("g", "pause", short, rev),  # no goal at all
        ]:
            outcome = await engine.press(sid, Press(kind, action, sid8, revision), actor=OWNER)  # type: ignore[arg-type]
            assert outcome.reply == STALE_TEXT and outcome.stale and outcome.alert
        assert await engine.plans.current(sid) == before
        assert await engine.plans.state(sid) == "post_init"
        # The confirmation is bound to the same revision; Cancel goes back.
        confirm = await engine.press(sid, Press("p", "discard", short, rev), actor=OWNER)
        assert confirm.plan_card == "refresh"
        assert (await engine.plan_card(sid)).state == "confirm_discard"
        cancel = await engine.press(sid, Press("p", "cancel", short, rev), actor=OWNER)
        assert cancel.plan_card == "refresh"
        assert (await engine.plan_card(sid)).state == "review"
        assert await engine.plans.state(sid) == "post_init"


async def test_keep_planning_asks_for_feedback_and_hides_the_review_keyboard(
    tmp_path: Path, quiet_model: ScriptedProvider
) -> None:
    async with engine_rig(tmp_path, quiet_model) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-1))
        await post_init(rig, sid)
        assert (await engine.plan_card(sid)).state == "review"
        sidecar = await engine.plans.current(sid)
        assert sidecar is not None
        outcome = await engine.press(
            sid, Press("p", "keep", sidecar.id[:8], sidecar.revision), actor=OWNER
        )
        assert outcome.await_feedback
        assert (await engine.plan_card(sid)).state == "written"
        await engine.user_message(
            sid, "Add a docstring step", actor=OWNER, message_id="5", feedback=True
        )
        await settle(engine, sid)
        messages = [e.event for e in await engine.log.read(sid) if isinstance(e.event, UserMessage)]
        assert messages[-1].source.kind == "feedback"


async def test_goal_buttons_pause_resume_and_stale_refs(
    tmp_path: Path, quiet_model: ScriptedProvider
) -> None:
    async with engine_rig(tmp_path, quiet_model) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-1))
        refused = await engine.command(sid, "goal", "rounds 5", actor=OWNER)
        assert refused.reply == "There is no goal."
        outcome = await engine.command(sid, "goal", "Keep it green", actor=OWNER)
        assert outcome.reply is not None and outcome.reply.startswith("Goal set.")
        await engine.command(sid, "stop", "", actor=OWNER)  # disarm so no round runs on
        goal = await engine.goals.get(sid)
        assert goal is not None
        paused = await engine.press(
            sid, Press("g", "pause", goal.id[:8], goal.revision), actor=OWNER
        )
        assert paused.reply == "Goal paused."  # every press is answered in words
        again = await engine.press(
            sid, Press("g", "pause", goal.id[:8], goal.revision), actor=OWNER
        )
        assert again.reply == STALE_TEXT
        now = await engine.goals.get(sid)
        assert now is not None and now.phase == "paused"


async def test_new_archives_the_plan_as_abandoned_and_binds_a_fresh_session(
    tmp_path: Path, quiet_model: ScriptedProvider
) -> None:
    async with engine_rig(tmp_path, quiet_model) as rig:
        engine = rig.engine
        old = await engine.session_for_chat(chat(-1, 4))
        await post_init(rig, old)
        outcome = await engine.new_session(chat(-1, 4), actor=OWNER)
        assert outcome.reply == "Started a new session."
        new = await engine.session_for_chat(chat(-1, 4))
        assert new != old
        assert await engine.plans.state(old) == "none"
        assert (await engine.plan_card(old)).ended == "abandoned"
        assert await engine.plans.state(new) == "none"
        assert await engine.session_for_chat(chat(-1)) not in (old, new)  # another key


async def test_help_and_status(tmp_path: Path, quiet_model: ScriptedProvider) -> None:
    async with engine_rig(tmp_path, quiet_model) as rig:
        sid = await rig.engine.session_for_chat(chat(-1))
        assert (await rig.engine.command(sid, "help", "", actor=None)).reply == HELP_TEXT
        await _active_checklist(rig, sid)
        status = (await rig.engine.command(sid, "status", "", actor=None)).reply
        assert status is not None
        assert "Plan: Chores (active, 0/2 done)" in status
        assert "Agent: idle" in status


async def test_read_only_commands_log_together_later_and_a_failed_log_loses_the_reply_not(
    tmp_path: Path, quiet_model: ScriptedProvider, caplog: pytest.LogCaptureFixture
) -> None:
    async with faulty_rig(tmp_path, quiet_model) as (rig, log):
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-1))
        for name in ("status", "help", "show_plan"):
            assert (await engine.command(sid, name, "", actor=OWNER)).reply
        await engine.commands.flush_logs()
        logged = [e.event for e in await rig.storage.log.read(sid, types=["command/run"])]
        assert [(e.name, e.actor) for e in logged if isinstance(e, CommandRun)] == [
            ("status", OWNER),
            ("help", OWNER),
            ("show_plan", OWNER),
        ]
        # A burst of read-only commands is one append, one commit, not one each.
        assert log.appends.count(["command/run"] * 3) == 1
        assert ["command/run"] not in log.appends
        # ... written in a context of its own, not the first command's (among replicas that
        # context names the update being processed, which an append marks done).
        token = PROBE.set("the first command's update")
        try:
            await engine.command(sid, "help", "", actor=OWNER)
            await engine.commands.flush_logs()
        finally:
            PROBE.reset(token)
        assert (log.appends[-1], log.contexts[-1]) == (["command/run"], "")
        log.full = True
        outcome = await engine.command(sid, "status", "", actor=OWNER)
        assert outcome.reply is not None and "Agent: idle" in outcome.reply
        await engine.commands.flush_logs()
        assert "log_failed" in caplog.text and "disk is full" in caplog.text
        log.full = False


async def test_a_restart_disarms_a_live_goal_and_closes_an_interrupted_turn(
    tmp_path: Path, quiet_model: ScriptedProvider
) -> None:
    async with engine_rig(tmp_path, quiet_model) as rig:
        sid = await rig.engine.session_for_chat(chat(-1))
        await rig.engine.goals.create(sid, "Keep it green", arm=False)
        # A turn that a dead process left open.
        await rig.storage.log.append(sid, [TurnStart(turn_id="t-dead")])
    async with engine_rig(tmp_path, quiet_model) as rig2:
        restored = await rig2.engine.start()
        assert [r.session_id for r in restored] == [sid]
        assert not rig2.engine.goals.is_armed(sid)
        assert await rig2.engine.session_for_chat(chat(-1)) == sid
        notices = [c.args["text"] for c in rig2.channel.of("notice")]
        assert len(notices) == 1 and "interrupted" in notices[0]
        events = [e.event for e in await rig2.storage.log.read(sid)]
        assert events[-1].type == "turn/end"
        # Loading again in the same process tells nothing twice.
        await rig2.engine.session_for_chat(chat(-1))
        assert len(rig2.channel.of("notice")) == 1


async def test_start_up_loads_only_the_sessions_with_something_to_announce(
    tmp_path: Path, quiet_model: ScriptedProvider
) -> None:
    async with engine_rig(tmp_path, quiet_model) as rig:
        sids = await asyncio.gather(
            *(rig.engine.session_for_chat(chat(-100 - i)) for i in range(200))
        )
        for sid in sids[:150]:  # sessions with a history, all closed
            await rig.engine.command(sid, "status", "", actor=OWNER)
            await rig.storage.log.append(
                sid, [TurnStart(turn_id="t"), TurnEnd(turn_id="t", outcome="completed")]
            )
        interrupted, goal_sid, quiet = sids[3], sids[170], sids[10]
        await rig.storage.log.append(interrupted, [TurnStart(turn_id="t-dead")])
        await rig.engine.goals.create(goal_sid, "Keep it green", arm=False)
    async with faulty_rig(tmp_path, quiet_model) as (rig2, log):  # start() has run
        engine = rig2.engine
        # Start-up read only the two marked sessions' logs.
        assert set(log.reads) == {interrupted, goal_sid}
        notices = rig2.channel.of("notice")
        assert [c.session_id for c in notices] == [interrupted]
    async with faulty_rig(tmp_path, quiet_model) as (rig3, log):
        engine = rig3.engine
        # Closed now, so only the goal is left to announce.
        assert set(log.reads) == {goal_sid}
        assert rig3.channel.of("notice") == []
        # Any other session loads when its chat speaks (the binding is already known).
        log.reads.clear()
        assert await engine.session_for_chat(chat(-110)) == quiet
        await engine.command(quiet, "status", "", actor=OWNER)
        assert set(log.reads) == {quiet}
        log.reads.clear()
        await engine.command(quiet, "status", "", actor=OWNER)
        assert log.reads == []  # loaded once


async def test_fork_copies_the_log_prefix_and_the_plan_but_not_the_card(
    tmp_path: Path, quiet_model: ScriptedProvider
) -> None:
    async with engine_rig(tmp_path, quiet_model) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-1))
        await post_init(rig, sid)
        await engine.set_plan_flow(sid, chat_id="tg:-1", thread_id=None, card_id="42")
        child = await engine.sessions.fork(sid)
        assert child != sid
        parent_events = [e.event for e in await engine.log.read(sid)]
        assert [e.event for e in await engine.log.read(child)] == parent_events
        copy = await engine.plans.current(child)
        original = await engine.plans.current(sid)
        assert copy is not None and original is not None
        assert copy.session_id == child and copy.title == original.title
        assert copy.flow.card_id is None and original.flow.card_id == "42"
        assert await engine.plans.md_text(child) == await engine.plans.md_text(sid)
        assert await engine.plans.state(child) == "post_init"


async def test_first_touches_of_one_chat_at_once_make_one_session(
    tmp_path: Path, quiet_model: ScriptedProvider
) -> None:
    async with engine_rig(tmp_path, quiet_model) as rig:
        sids = await asyncio.gather(*(rig.engine.session_for_chat(chat(-7)) for _ in range(5)))
        assert len(set(sids)) == 1
        [(count,)] = await rig.storage.db.fetch_all("SELECT count(*) FROM sessions")
        assert count == 1
        assert [b.session_id for b in await rig.storage.sessions.chat_bindings()] == sids[:1]


async def test_the_cards_carry_their_actions_from_the_one_table(
    tmp_path: Path, quiet_model: ScriptedProvider
) -> None:
    # engine.api's table decides the buttons; the card data carries them for any front end.
    async with engine_rig(tmp_path, quiet_model) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-1))
        await post_init(rig, sid)
        card = await engine.plan_card(sid)
        assert card.state == "review"
        assert card.actions == (("approve",), ("keep", "discard"))
        await engine.command(sid, "goal", "Keep it green", actor=OWNER)
        await engine.command(sid, "stop", "", actor=OWNER)  # disarmed: Resume, not Pause
        goal_card = await engine.goal_card(sid)
        assert goal_card.actions == (("resume", "clear"),)


async def test_a_press_counts_only_for_an_action_its_card_can_show(
    tmp_path: Path, quiet_model: ScriptedProvider
) -> None:
    # A paused goal's card offers Resume and Clear: a forged Pause, or Start (only a goal the
    # model proposed offers it), at the current revision is out of date and changes nothing.
    async with engine_rig(tmp_path, quiet_model) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-1))
        await engine.command(sid, "goal", "Keep it green", actor=OWNER)
        await engine.command(sid, "stop", "", actor=OWNER)
        goal = await engine.goals.get(sid)
        assert goal is not None
        start = await engine.press(
            sid, Press("g", "start", goal.id[:8], goal.revision), actor=OWNER
        )
        assert start.reply == STALE_TEXT and start.stale
        assert not engine.goals.is_armed(sid)
        paused = await engine.press(
            sid, Press("g", "pause", goal.id[:8], goal.revision), actor=OWNER
        )
        assert not paused.stale  # drawn disarmed it showed Resume, drawn armed Pause: both count
        goal = await engine.goals.get(sid)
        assert goal is not None and goal.phase == "paused"
        again = await engine.press(
            sid, Press("g", "pause", goal.id[:8], goal.revision), actor=OWNER
        )
        assert again.reply == STALE_TEXT and again.stale
        # A plan in review: Resume and Revise belong to an approved checklist's card.
        await post_init(rig, sid)
        sidecar = await engine.plans.current(sid)
        assert sidecar is not None
        for action in ("resume", "revise", "merge"):
            press = Press("p", action, sidecar.id[:8], sidecar.revision)
            assert (await engine.press(sid, press, actor=OWNER)).reply == STALE_TEXT
        assert await engine.plans.state(sid) == "post_init"
