"""An approved checklist runs to its end by itself, stalls without progress, and never
restarts by itself: the real engine over real files and SQLite, the scripted model."""

from __future__ import annotations

import asyncio
from pathlib import Path

from engine.agent.controller import CHECKLIST_DONE_TEXT
from engine.api import Press
from engine.events import RunPaused, SeedSource, TurnOutcome, TurnStart, UserMessage
from engine.model.script import call, say
from engine.model.scripted import ScriptedProvider
from tests.engine.helpers import OWNER, engine_rig, post_init, settle
from tests.keys import chat

TASK_1 = [
    call("plan", {"op": "start"}),
    call("plan", {"op": "complete", "evidence": "greet.py written"}),
]
TASK_2 = [
    call("plan", {"op": "start"}),
    call("plan", {"op": "complete", "evidence": "the test prints ok"}),
]


async def _seeds(rig: object, sid: str) -> int:
    events = [s.event for s in await rig.storage.log.read(sid)]  # type: ignore[attr-defined]
    return sum(isinstance(e, UserMessage) and isinstance(e.source, SeedSource) for e in events)


async def _press(rig: object, sid: str, action: str) -> str | None:
    engine = rig.engine  # type: ignore[attr-defined]
    sidecar = await engine.plans.current(sid)
    outcome = await engine.press(
        sid, Press("p", action, sidecar.id[:8], sidecar.revision), actor=OWNER
    )
    return outcome.reply


async def test_a_run_that_only_talks_is_stuck_and_resume_runs_it_to_the_end(
    tmp_path: Path,
) -> None:
    # Three steps that change nothing, then (after Resume) the two tasks.
    model = ScriptedProvider([say("Thinking."), say("Still thinking."), say("Hm."), *TASK_1,
                              *TASK_2, say("All done.")])  # fmt: skip
    async with engine_rig(tmp_path, model) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-1))
        await post_init(rig, sid)
        await engine.command(sid, "execute", "", actor=OWNER)
        await settle(engine, sid)
        card = await engine.plan_card(sid)
        assert card.state == "paused"
        assert card.halted == "Stuck on task 1: 3 replies in a row without a tool call"
        assert await _seeds(rig, sid) == 3  # the execution turn and two continuations
        assert await _press(rig, sid, "resume") == "Continuing with the checklist."
        await settle(engine, sid)
        assert await engine.plans.state(sid) == "none"  # archived: both tasks done
        assert (await engine.plan_card(sid)).state == "done"


async def test_progress_keeps_the_run_going_across_the_step_cap(tmp_path: Path) -> None:
    model = ScriptedProvider([*TASK_1, *TASK_2])
    async with engine_rig(tmp_path, model, max_steps=1) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-1))
        await post_init(rig, sid)
        await engine.command(sid, "execute", "", actor=OWNER)
        await settle(engine, sid)
        # One step per turn: each continuation made progress, so the next one followed,
        # until the last task archived the plan.
        assert await engine.plans.state(sid) == "none"
        assert await _seeds(rig, sid) == 4
        replies = [c.args["text"] for c in rig.channel.calls if c.method == "reply"]
        # The last turn ended at the cap with no words: the chat still hears the end, once.
        assert replies == [CHECKLIST_DONE_TEXT]


async def test_stop_pauses_the_run_and_a_restart_never_resumes_it(tmp_path: Path) -> None:
    model = ScriptedProvider([*TASK_1, say("Task 1 is done.")])
    async with engine_rig(tmp_path, model) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-1))
        await post_init(rig, sid)
        await engine.command(sid, "execute", "", actor=OWNER)
        await settle(engine, sid)
        # The script ran out after task 1: the failed continuation ends the run.
        assert (await engine.plan_card(sid)).state == "paused"
        await engine.command(sid, "stop", "", actor=OWNER)
        assert (await engine.plan_card(sid)).state == "paused"
        seeds = await _seeds(rig, sid)
    async with engine_rig(tmp_path, ScriptedProvider([])) as again:
        sid2 = await again.engine.session_for_chat(chat(-1))
        assert sid2 == sid
        await settle(again.engine, sid)
        card = await again.engine.plan_card(sid)
        assert card.state == "paused" and card.halted is not None
        assert await _seeds(again, sid) == seeds  # nothing ran by itself


async def test_a_run_a_dead_process_left_comes_back_paused_and_its_card_is_redrawn(
    tmp_path: Path,
) -> None:
    async with engine_rig(tmp_path, ScriptedProvider([])) as rig:
        sid = await rig.engine.session_for_chat(chat(-1))
        await post_init(rig, sid)
        revision = await rig.engine.plans.revision(sid)
        assert (await rig.engine.plans.approve(sid, revision=revision, actor=OWNER)).ok
        # A turn of the run was open when the process died (no turn/end).
        await rig.storage.log.append(sid, [TurnStart(turn_id="t-dead")])
    async with engine_rig(tmp_path, ScriptedProvider([])) as again:
        await settle(again.engine, sid)
        redraws = [c for c in again.channel.calls if c.method == "plan_changed"]
        assert [c.session_id for c in redraws] == [sid]
        card = await again.engine.plan_card(sid)
        assert card.state == "paused" and not card.busy
        assert await _seeds(again, sid) == 0  # nothing ran by itself


async def test_a_run_says_its_closing_words_once_not_after_every_continuation(
    tmp_path: Path,
) -> None:
    script = [*TASK_1, say("Task 1 is done."), *TASK_2, say("All done: both tasks.")]
    async with engine_rig(tmp_path, ScriptedProvider(script)) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-1))
        await post_init(rig, sid)
        await engine.command(sid, "execute", "", actor=OWNER)
        await settle(engine, sid)
        assert await engine.plans.state(sid) == "none"
        assert await _seeds(rig, sid) == 2  # the execution turn and one continuation
        replies = [c.args["text"] for c in rig.channel.calls if c.method == "reply"]
        # In a group each reply is a message: the card shows the progress, the chat hears
        # the run's last words once.
        assert replies == ["All done: both tasks."]


async def test_a_question_holds_the_run_and_goal_rounds_until_the_owner_answers(
    tmp_path: Path,
) -> None:
    script = [
        call("ask_user", {"question": "Which greeting?"}),
        say("I asked which greeting to use."),
        *TASK_1,
        *TASK_2,
        say("Done with both."),
    ]
    async with engine_rig(tmp_path, ScriptedProvider(script)) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-1))
        await post_init(rig, sid)
        await engine.command(sid, "execute", "", actor=OWNER)
        await asyncio.wait_for(engine.agents.wait_idle(sid), 10)  # the turn's task ended
        # The run waits for the answer: no continuation, and not idle for a goal round.
        assert await _seeds(rig, sid) == 1
        assert not engine.agents.is_idle(sid)
        assert (await engine.plan_card(sid)).waiting == "a question"
        await engine.user_message(sid, "Hello, name!", actor=OWNER, message_id=None)
        await settle(engine, sid)
        assert await engine.plans.state(sid) == "none"
        assert engine.agents.is_idle(sid)


async def test_an_owner_turn_that_ends_the_run_says_its_own_words_and_no_more(
    tmp_path: Path,
) -> None:
    # /execute with text: the execution turn does task 1, then the owner's turn does task 2
    # and answers; that answer is the run's last word (no "checklist is done" after it).
    script = [*TASK_1, say("Task 1 is done."), *TASK_2, say("Both are done, as you asked.")]
    async with engine_rig(tmp_path, ScriptedProvider(script)) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-1))
        await post_init(rig, sid)
        await engine.command(sid, "execute", "then finish the test too", actor=OWNER)
        await settle(engine, sid)
        assert await engine.plans.state(sid) == "none"
        replies = [c.args["text"] for c in rig.channel.calls if c.method == "reply"]
        assert replies[-1] == "Both are done, as you asked."
        assert CHECKLIST_DONE_TEXT not in replies


async def test_the_card_drawn_as_the_stuck_turn_ends_is_paused_not_working(
    tmp_path: Path,
) -> None:
    # The turn-end redraw runs while the drain task still exists (busy): the card drawn then
    # must already say why the run stopped, and a redraw follows once the turn is closed.
    looping = [call("read_file", {"path": "README.md"})] * 4
    model = ScriptedProvider([TASK_1[0], *looping])
    async with engine_rig(tmp_path, model) as rig:
        engine = rig.engine
        (rig.workspace / "README.md").write_text("# hi\n", encoding="utf-8")
        sid = await engine.session_for_chat(chat(-1))
        await post_init(rig, sid)
        drawn: list[tuple[str, bool, str | None]] = []
        channel = rig.channel
        recorded = channel.turn_ended

        async def turn_ended(session_id: str, outcome: TurnOutcome) -> None:
            data = await engine.plan_card(session_id)
            drawn.append((data.state, engine.agents.is_busy(session_id), data.halted))
            await recorded(session_id, outcome)

        channel.turn_ended = turn_ended  # type: ignore[method-assign]
        await engine.command(sid, "execute", "", actor=OWNER)
        await settle(engine, sid)
        words = "Stuck on task 1: `read_file README.md` 4 times with the same result"
        assert drawn == [("paused", True, words)]
        assert [c.method for c in channel.calls][-1] == "plan_changed"
        card = await engine.plan_card(sid)
        assert (card.state, card.busy, card.halted) == ("paused", False, words)


async def test_a_failed_turn_pauses_the_run_and_the_card_says_why(tmp_path: Path) -> None:
    # The model call fails (a script that diverged stands for a provider's error).
    model = ScriptedProvider([TASK_1[0], say("never", expect="a line nobody sends")])
    async with engine_rig(tmp_path, model) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-1))
        await post_init(rig, sid)
        await engine.command(sid, "execute", "", actor=OWNER)
        await settle(engine, sid)
        card = await engine.plan_card(sid)
        assert card.state == "paused" and card.halted is not None
        assert card.halted.startswith("Paused: the turn failed (ScriptDivergence: script step 2")
        paused = [
            s.event for s in await rig.storage.log.read(sid) if isinstance(s.event, RunPaused)
        ]
        assert [p.kind for p in paused] == ["failed"]
