"""Stuck, not slow: the approved run stops for loops, never for honest work.

The real Engine over real SQLite and files, the real PTB Application on the fake Bot API, and
a scripted model that behaves like an agent: it lists, reads and greps thirty times before it
writes, runs commands, and sometimes loops. Every test goes from /plan to the owner's Approve
on the card, then watches the run and the card.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.telegram.app import parts
from engine.app import Engine
from engine.events import ProgressMade, RunPaused, SeedSource, UserMessage
from engine.model.script import ScriptStep, call, say
from engine.model.scripted import ScriptedProvider
from engine.progress.stuck import StuckLimits
from engine.usage.ledger import fmt_tokens
from engine.usage.meter import UsageConfig
from tests.engine.helpers import settle
from tests.fakebot.server import FakeBotApi, FakeMessage
from tests.keys import chat, person
from tests.telegram.app_support import GROUP, OWNER, eventually
from tests.telegram.live import Live, button, card, labels, live_bot, until

PLAN3_MD = """# Three modules

## Context
- **Problem:** The project lacks three small modules.
- **Target state:** a.py, b.py and c.py exist.
- **Intent:** The owner asked for them.

## Implementation steps
1. Module a — write a.py after reading the code.
   - Done when: a.py exists
2. Module b — write b.py after reading the code.
   - Done when: b.py exists
3. Module c — write c.py after reading the code.
   - Done when: c.py exists
"""

PLANNING3 = [
    call("plan", {"op": "init", "title": "Three modules", "mode": "design"}),
    call("write_file", {"path": "{plan_md}", "content": PLAN3_MD}, expect="Design plan created"),
    call("plan", {"op": "submit"}),
    say("The plan is ready for review."),
]

START = call("plan", {"op": "start"})


def complete(evidence: str) -> ScriptStep:
    return call("plan", {"op": "complete", "evidence": evidence})


def explore(count: int = 30) -> list[ScriptStep]:
    """``count`` read-only calls an agent makes before it writes: list, read, grep, each on
    different arguments (the workspace :func:`_seed` made)."""
    steps: list[ScriptStep] = []
    for k in range(count):
        kind = k % 3
        if kind == 0:
            steps.append(call("list_files", {"path": f"pkg{k // 3}"}))
        elif kind == 1:
            steps.append(call("read_file", {"path": f"pkg{k // 3}/mod.py"}))
        else:
            steps.append(call("grep", {"pattern": f"VALUE_{k // 3}"}))
    return steps


def _seed(workspace: Path, folders: int = 10) -> None:
    for k in range(folders):
        folder = workspace / f"pkg{k}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "mod.py").write_text(f"VALUE_{k} = {k}\n", encoding="utf-8")
    (workspace / "README.md").write_text("# A project\n", encoding="utf-8")
    (workspace / "a.txt").write_text("alpha\n", encoding="utf-8")
    (workspace / "b.txt").write_text("beta\n", encoding="utf-8")


async def _approve(fake_api: FakeBotApi, live: Live) -> str:
    """/plan, the planning turn, then the owner's Approve on the review card."""
    engine = live.engine
    fake_api.user_message(GROUP, OWNER, "/plan Three modules")
    await eventually(lambda: len(fake_api.bot_messages(GROUP)) >= 1)
    sid = await engine.session_for_chat(chat(GROUP))
    await settle(engine, sid)
    await parts(live.app).presenter.flush()
    review = await card(fake_api, live, sid)
    fake_api.press(GROUP, review.message_id, button(review, "✅ Approve"), user_id=OWNER)
    return sid


async def _paused(engine: Engine, sid: str) -> bool:
    return (await engine.plan_card(sid)).state == "paused" and engine.agents.is_idle(sid)


async def _stopped_card(fake_api: FakeBotApi, live: Live, sid: str, words: str) -> FakeMessage:
    """Wait for the run to stop; the card as the chat sees it once it shows ``words``."""
    await until(lambda: _paused(live.engine, sid))
    await settle(live.engine, sid)
    await parts(live.app).presenter.flush()
    shown = await card(fake_api, live, sid)
    await eventually(lambda: words in fake_api.message(GROUP, shown.message_id).text)
    return fake_api.message(GROUP, shown.message_id)


async def _pauses(live: Live, sid: str) -> list[RunPaused]:
    stored = await live.storage.log.read(sid, types=("run/paused",))
    return [s.event for s in stored if isinstance(s.event, RunPaused)]


async def _seeds(live: Live, sid: str) -> int:
    stored = await live.storage.log.read(sid, types=("user/message",))
    return sum(
        isinstance(s.event, UserMessage) and isinstance(s.event.source, SeedSource) for s in stored
    )


def _never_working_after(msg: FakeMessage, marker: str) -> None:
    """Every drawing of the card from the first that shows ``marker`` on says Paused."""
    drawings = [*msg.edits, msg.text]
    first = next(i for i, text in enumerate(drawings) if marker in text)
    for text in drawings[first:]:
        assert "Working" not in text and "Paused" in text, text


async def test_three_tasks_of_thirty_reads_each_run_to_done_with_the_defaults(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    execution: list[ScriptStep] = []
    for name in ("a", "b", "c"):
        execution += [
            START,
            *explore(30),
            call("write_file", {"path": f"{name}.py", "content": f"NAME = {name!r}\n"}),
            complete(f"{name}.py written"),
        ]
    execution.append(say("All three modules are written."))
    _seed(tmp_path / "work")
    # The real openai SDK against the fake chat-completions server, default settings.
    async with live_bot(fake_api, tmp_path, [*PLANNING3, *execution]) as live:
        sid = await _approve(fake_api, live)
        await until(lambda: _archived(live.engine, sid), timeout_s=60)
        await settle(live.engine, sid)
        await parts(live.app).presenter.flush()
        assert [(live.workspace / f"{n}.py").exists() for n in "abc"] == [True] * 3
        assert await _pauses(live, sid) == []
        assert any(m.text == "All three modules are written." for m in fake_api.bot_messages(GROUP))
        data = await live.engine.plan_card(sid)
        assert data.state == "done" and data.sidecar is not None
        assert data.sidecar.pauses == []
        # 99 steps: the per-turn cap (50) ended turns, the run went on by itself.
        assert await _seeds(live, sid) >= 2


async def _archived(engine: Engine, sid: str) -> bool:
    return await engine.plans.state(sid) == "none" and engine.agents.is_idle(sid)


FINISH_ALL = [
    call("write_file", {"path": "a.py", "content": "A = 1\n"}),
    complete("a.py written"),
    START,
    call("write_file", {"path": "b.py", "content": "B = 1\n"}),
    complete("b.py written"),
    START,
    call("write_file", {"path": "c.py", "content": "C = 1\n"}),
    complete("c.py written"),
    say("Done."),
]


def _big_reads(count: int) -> list[ScriptStep]:
    return [call("read_file", {"path": f"big{k}.txt"}) for k in range(count)]


# pattern -> (the loop the model falls into, the card's words, the steps after Resume that
# would trip the same pattern again if the count did not start afresh)
LOOPS: dict[str, tuple[list[ScriptStep], str, list[ScriptStep]]] = {
    "repeat": (
        [call("read_file", {"path": "README.md"})] * 4,
        "Stuck on task 1: `read_file README.md` 4 times with the same result",
        [call("read_file", {"path": "README.md"})] * 3,
    ),
    "error": (
        [call("read_file", {"path": "missing.txt"})] * 3,
        "Stuck on task 1: `read_file missing.txt` failed 3 times with the same error",
        [call("read_file", {"path": "missing.txt"})] * 2,
    ),
    "monologue": (
        [say("Let me think about this."), say("Still thinking."), say("Hm.")],
        "Stuck on task 1: 3 replies in a row without a tool call",
        [say("One more thought.")],
    ),
    "alternation": (
        [call("read_file", {"path": p}) for p in ("a.txt", "b.txt") * 3],
        "Stuck on task 1: `read_file a.txt` and `read_file b.txt` in turn for 6 steps",
        [call("read_file", {"path": p}) for p in ("a.txt", "b.txt")],
    ),
    "compaction": (
        _big_reads(40),
        "Stuck on task 1: the context overflowed 10 steps in a row with no progress",
        [],
    ),
    "no-progress": (
        [call("list_files", {"path": ".", "pattern": f"*never_{k}*"}) for k in range(60)],
        "Stuck on task 1: no task or workspace change in 60 steps",
        [call("list_files", {"path": ".", "pattern": f"*again_{k}*"}) for k in range(30)],
    ),
}


@pytest.mark.parametrize("pattern", list(LOOPS))
async def test_each_loop_stops_the_run_names_it_and_resume_counts_afresh(
    fake_api: FakeBotApi, tmp_path: Path, pattern: str
) -> None:
    loop, words, again = LOOPS[pattern]
    after_resume = [*again, *FINISH_ALL]
    # The loop's steps beyond where it must stop are never played: the script would
    # diverge after Resume if the run had gone on.
    script = [*PLANNING3, START, *loop, *after_resume]
    workspace = tmp_path / "work"
    _seed(workspace)
    if pattern == "compaction":
        for k in range(40):
            (workspace / f"big{k}.txt").write_text(f"{k}\n" + "x" * 20_000, encoding="utf-8")
    model = ScriptedProvider(script)
    async with live_bot(fake_api, tmp_path, [], model=model) as live:
        sid = await _approve(fake_api, live)
        shown = await _stopped_card(fake_api, live, sid, words)
        assert f"⏸ {words}" in shown.text
        assert labels(shown) == ["▶️ Resume", "🗑 Discard"]
        _never_working_after(shown, words)
        # Stopped within its bound: no step of the loop beyond it was played.
        end = len(PLANNING3) + 1 + len(loop)
        if pattern == "compaction":
            assert model.script.position < end
            model.script.position = end  # the reads it had left are not played
        else:
            assert model.script.position == end
        (paused,) = await _pauses(live, sid)
        assert (paused.kind, paused.pattern, paused.task_id) == ("stuck", pattern, "1")
        data = await live.engine.plan_card(sid)
        assert data.sidecar is not None
        assert [p.pattern for p in data.sidecar.pauses] == [pattern]
        status = await live.engine.command(sid, "status", "", actor=person(OWNER))
        assert status.reply is not None and words in status.reply
        fake_api.press(GROUP, shown.message_id, button(shown, "▶️ Resume"), user_id=OWNER)
        await until(lambda: _archived(live.engine, sid), timeout_s=30)
        assert len(await _pauses(live, sid)) == 1  # afresh: the same steps again did not trip it
        assert [(workspace / f"{n}.py").exists() for n in "abc"] == [True] * 3


async def test_bash_changing_files_for_eighty_steps_is_not_stopped(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    edits = [call("bash", {"command": f"touch out_{k}.txt"}) for k in range(80)]
    script = [
        *PLANNING3,
        START,
        *edits,
        complete("80 files written by bash"),
        START,
        call("write_file", {"path": "b.py", "content": "B = 1\n"}),
        complete("b.py written"),
        START,
        call("write_file", {"path": "c.py", "content": "C = 1\n"}),
        complete("c.py written"),
        say("Done."),
    ]
    _seed(tmp_path / "work")
    model = ScriptedProvider(script)
    async with live_bot(fake_api, tmp_path, [], model=model, allow_bash=(("touch",),)) as live:
        sid = await _approve(fake_api, live)
        await until(lambda: _archived(live.engine, sid), timeout_s=90)
        assert await _pauses(live, sid) == []
        assert len(list(live.workspace.glob("out_*.txt"))) == 80


async def test_the_daily_cap_pauses_the_run_with_that_reason_not_stalled(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    script = [*PLANNING3, START, *explore(6), *FINISH_ALL]
    _seed(tmp_path / "work")
    model = ScriptedProvider(script)
    async with live_bot(
        fake_api, tmp_path, [], model=model, usage=UsageConfig(daily_tokens=10_000_000)
    ) as live:
        engine = live.engine
        fake_api.user_message(GROUP, OWNER, "/plan Three modules")
        await eventually(lambda: len(fake_api.bot_messages(GROUP)) >= 1)
        sid = await engine.session_for_chat(chat(GROUP))
        await settle(engine, sid)
        # The day's tokens so far are what planning used: the cap now leaves no room.
        used = engine.usage.today().tokens
        fake_api.user_message(GROUP, OWNER, f"/usage cap {used + 1}")
        await until(lambda: _capped(engine, used + 1))
        await parts(live.app).presenter.flush()
        review = await card(fake_api, live, sid)
        fake_api.press(GROUP, review.message_id, button(review, "✅ Approve"), user_id=OWNER)
        words = "Paused: daily token cap reached (resets 00:00 UTC)"
        shown = await _stopped_card(fake_api, live, sid, words)
        assert f"⏸ {words}" in shown.text
        assert "Stalled" not in shown.text and "Stuck" not in shown.text
        raise_to = fmt_tokens(2 * (used + 1))
        assert labels(shown) == ["▶️ Resume", f"⬆️ Raise cap to {raise_to}", "🗑 Discard"]
        _never_working_after(shown, words)
        # One refused turn, not a dozen empty continuations.
        assert await _seeds(live, sid) == 1
        (paused,) = await _pauses(live, sid)
        assert paused.kind == "daily-cap" and paused.pattern is None
        assert any("Daily token cap reached" in m.text for m in fake_api.bot_messages(GROUP))
        assert model.script.position == len(PLANNING3)  # no call was made over the cap
        # Raise cap: the cap doubles (logged, so it holds after a restart) and the run goes on.
        raise_data = button(shown, f"⬆️ Raise cap to {raise_to}")
        qid = fake_api.press(GROUP, shown.message_id, raise_data, user_id=OWNER)
        await eventually(lambda: qid in fake_api.callback_answers)
        assert (fake_api.callback_answers[qid]["text"] or "").startswith(
            f"Daily token cap raised to {raise_to}."
        )
        assert engine.usage.daily_cap == 2 * (used + 1)
        # It went on (the doubled cap may run out again later: then it pauses again).
        await until(lambda: _went_on(engine, sid, model), timeout_s=30)


async def _went_on(engine: Engine, sid: str, model: ScriptedProvider) -> bool:
    return model.script.position > len(PLANNING3) + 1 and engine.agents.is_idle(sid)


async def _capped(engine: Engine, cap: int) -> bool:
    return engine.usage.daily_cap == cap


async def test_a_goal_round_in_a_loop_is_stopped_by_the_same_detector(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    # One rule for goals and checklists: a round that reads the same file over and over is
    # ended at the fourth read, and its goal is blocked no-progress with the detector's words.
    _seed(tmp_path / "work")
    script = [call("read_file", {"path": "README.md"})] * 4 + [say("never reached")]
    model = ScriptedProvider(script)
    async with live_bot(fake_api, tmp_path, [], model=model, max_goal_rounds=5) as live:
        engine = live.engine
        fake_api.user_message(GROUP, OWNER, "/goal document the project")
        await eventually(lambda: len(fake_api.bot_messages(GROUP)) >= 1)
        sid = await engine.session_for_chat(chat(GROUP))

        async def blocked() -> bool:
            goal = await engine.goals.get(sid)
            return goal is not None and goal.phase == "blocked" and engine.agents.is_idle(sid)

        await until(blocked)
        goal = await engine.goals.get(sid)
        assert goal is not None and goal.blocked is not None
        assert goal.blocked.code == "no-progress"
        assert goal.blocked.message.startswith(
            "stuck: `read_file README.md` 4 times with the same result"
        )
        assert goal.rounds_started == 1 and model.script.position == 4
        (paused,) = await _pauses(live, sid)
        assert (paused.pattern, paused.goal_id) == ("repeat", goal.id)


async def test_goal_rounds_whose_bash_changes_files_are_not_idle(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    # Three idle rounds in a row block a goal (the default); rounds whose only work is a bash
    # command that writes files are not idle: the goal runs to its round cap instead.
    _seed(tmp_path / "work")
    script = [
        step
        for n in range(1, 5)
        for step in (call("bash", {"command": f"touch round_{n}.txt"}), say(f"Round {n}."))
    ]
    model = ScriptedProvider(script)
    async with live_bot(
        fake_api, tmp_path, [], model=model, max_goal_rounds=4, allow_bash=(("touch",),)
    ) as live:
        engine = live.engine
        fake_api.user_message(GROUP, OWNER, "/goal make four files")
        await eventually(lambda: len(fake_api.bot_messages(GROUP)) >= 1)
        sid = await engine.session_for_chat(chat(GROUP))

        async def blocked() -> bool:
            goal = await engine.goals.get(sid)
            return goal is not None and goal.phase == "blocked" and engine.agents.is_idle(sid)

        await until(blocked, timeout_s=40)
        goal = await engine.goals.get(sid)
        assert goal is not None and goal.blocked is not None
        assert goal.blocked.code == "round-limit" and goal.rounds_started == 4
        assert len(list(live.workspace.glob("round_*.txt"))) == 4
        made = await live.storage.log.read(sid, types=("progress/made",))
        kinds = [s.event.kinds for s in made if isinstance(s.event, ProgressMade)]
        assert kinds == [["workspace"]] * 4


def _churn(count: int) -> list[ScriptStep]:
    """A model that looks busy: it rewrites its todo list (each time different) between
    varied reads and plan shows, and never changes a task or a file."""
    steps: list[ScriptStep] = []
    for k in range(count):
        todos = [
            {"content": f"look at pkg{k % 10} again ({k})", "status": "in_progress"},
            {"content": f"then decide ({k})", "status": "pending"},
        ]
        steps.append(call("todo_write", {"todos": todos}))
        if k % 4 == 3:
            steps.append(call("plan", {"op": "show"}))
        else:
            steps.append(call("read_file", {"path": f"pkg{k % 10}/mod.py"}))
    return steps


async def test_rewriting_the_todo_list_between_varied_reads_is_not_progress(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    # The outer bound (here 16 steps) counts only work: a task's status, a changed file, the
    # goal. Todo rewrites, reads and plan shows are none of these, so the run stops at the
    # bound, with the card naming it.
    bound = 16
    words = f"Stuck on task 1: no task or workspace change in {bound} steps"
    churn = _churn(30)
    script = [*PLANNING3, START, *churn, say("unreachable")]
    _seed(tmp_path / "work")
    model = ScriptedProvider(script)
    stuck = StuckLimits(progress_steps=bound)
    async with live_bot(fake_api, tmp_path, [], model=model, stuck=stuck) as live:
        sid = await _approve(fake_api, live)
        shown = await _stopped_card(fake_api, live, sid, words)
        assert f"⏸ {words}" in shown.text
        assert model.script.position == len(PLANNING3) + 1 + bound
        (paused,) = await _pauses(live, sid)
        assert (paused.kind, paused.pattern) == ("stuck", "no-progress")
        todos = await live.storage.log.read(sid, types=("todo/write",))
        assert len(todos) == bound // 2  # it did rewrite its list, every other step
