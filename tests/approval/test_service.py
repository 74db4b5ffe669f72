"""The approval gate over a real SQLite log: waiting, presses, unattended denials, replay."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from engine.agent.testing import RecordingChannel
from engine.approval.policy import ApprovalView
from engine.approval.service import (
    DENIED_TEXT,
    REPEAT_TEXT,
    TIMEOUT_TEXT,
    UNATTENDED_TEXT,
    ToolApprovals,
)
from engine.events import (
    ApprovalDecided,
    ApprovalRequested,
    ApprovalRule,
    GoalRoundSource,
    HumanSource,
    MessageSource,
    SeedSource,
)
from engine.tools.base import ToolContext
from engine.tools.runtime import ToolCallRequest
from storage.open import Storage, open_storage
from tests.engine.helpers import FaultyLog


@pytest.fixture
async def storage(tmp_path: Path) -> AsyncIterator[Storage]:
    # The real stores; the gates under test are built on their log (no engine needed).
    storage = await open_storage(tmp_path / "home")
    try:
        yield storage
    finally:
        await storage.close()


async def new_session(storage: Storage, tmp_path: Path) -> str:
    return (await storage.sessions.create_session(workspace=str(tmp_path))).id


def ctx(sid: str, source: MessageSource) -> ToolContext:
    return ToolContext(session_id=sid, workspace=Path("/w"), turn_id="t", source=source)


def bash(command: str, call_id: str = "call_1_0") -> ToolCallRequest:
    return ToolCallRequest(call_id=call_id, name="bash", arguments={"command": command})


async def decided(storage: Storage, sid: str) -> list[str]:
    stored = await storage.log.read(sid, types=("approval/decided",))
    return [s.event.decision for s in stored if isinstance(s.event, ApprovalDecided)]


async def test_a_waiting_call_is_answered_once_and_only_by_its_own_id(
    storage: Storage, tmp_path: Path
) -> None:
    sid = await new_session(storage, tmp_path)
    channel = RecordingChannel()
    gate = ToolApprovals(storage.log, channel)
    waiting = asyncio.create_task(
        gate.check(bash("rm -rf build"), ctx(sid, HumanSource()), phase="active")
    )
    [asked] = await asyncio.wait_for(channel.wait_for("approval_asked"), 5)
    view = asked.args["view"]
    assert isinstance(view, ApprovalView) and view.command == "rm -rf build"
    assert gate.pending(sid) == view
    assert (await gate.answer(sid, "once", "zzzzzzzz", actor="tg:1")).stale  # another request
    assert (
        await gate.answer("other", "once", view.short_id, actor="tg:1")
    ).stale  # another session
    assert not waiting.done()
    assert (await gate.answer(sid, "deny", view.short_id, actor="tg:1")).text == "Denied."
    assert await asyncio.wait_for(waiting, 5) == DENIED_TEXT
    assert (await gate.answer(sid, "once", view.short_id, actor="tg:1")).stale  # repeated press
    assert await decided(storage, sid) == ["deny"]
    [closed] = channel.of("approval_closed")
    assert closed.args["decision"] == "deny"


async def test_a_compound_command_offers_no_session_rule(storage: Storage, tmp_path: Path) -> None:
    sid = await new_session(storage, tmp_path)
    channel = RecordingChannel()
    gate = ToolApprovals(storage.log, channel, rules=[("ls",)])
    waiting = asyncio.create_task(
        gate.check(bash("ls; rm -rf x"), ctx(sid, HumanSource()), phase="none")
    )
    [asked] = await asyncio.wait_for(channel.wait_for("approval_asked"), 5)
    view = asked.args["view"]
    assert view.rule is None
    assert (await gate.answer(sid, "session", view.short_id, actor="tg:1")).stale
    assert (await gate.answer(sid, "once", view.short_id, actor="tg:1")).text == "Allowed once."
    assert await asyncio.wait_for(waiting, 5) is None
    assert gate.rules(sid) == (("ls",),)


async def test_unattended_turns_never_wait_and_their_allow_adds_the_rule_once(
    storage: Storage, tmp_path: Path
) -> None:
    sid = await new_session(storage, tmp_path)
    channel = RecordingChannel()
    hooked: list[tuple[str, str]] = []

    async def hook(session_id: str, source: MessageSource, view: ApprovalView) -> None:
        hooked.append((session_id, view.command))

    gate = ToolApprovals(storage.log, channel, on_unattended=hook)
    rounds = GoalRoundSource(goal_id="g", revision=1, round=1)
    for source in (rounds, GoalRoundSource(goal_id="g", revision=1, round=2)):
        denied = await gate.check(bash("git status -s"), ctx(sid, source), phase="active")
        assert denied == UNATTENDED_TEXT
    assert hooked == [(sid, "git status -s")] * 2
    assert gate.pending(sid) is None
    assert await decided(storage, sid) == ["unattended", "unattended"]
    first, second = (c.args["view"] for c in channel.of("approval_asked"))
    assert first.unattended and first.rule == ("git", "status")

    # The offer survives a restart (replay), and counts once: the rule covers both offers.
    again = ToolApprovals(storage.log, RecordingChannel())
    await again.load(sid)
    assert (await again.answer(sid, "rule", first.short_id, actor="tg:1")).rule == ("git", "status")
    assert (await again.answer(sid, "rule", second.short_id, actor="tg:1")).stale
    assert await again.check(bash("git status"), ctx(sid, rounds), phase="active") is None


async def test_a_restart_closes_a_pending_request_as_denied_and_keeps_the_rules(
    storage: Storage, tmp_path: Path
) -> None:
    sid = await new_session(storage, tmp_path)
    gate = ToolApprovals(storage.log, RecordingChannel())
    await gate.add_rule(sid, ("pytest",), actor="tg:1")
    # What a process that died while the owner had not answered leaves in the log.
    await storage.log.append(
        sid,
        [ApprovalRequested(request_id="r" * 32, call_id="call_1_0", tool="bash", command="make")],
    )
    fresh = ToolApprovals(storage.log, RecordingChannel())
    await fresh.load(sid)
    assert await decided(storage, sid) == ["interrupted"]
    assert fresh.pending(sid) is None
    assert (await fresh.answer(sid, "once", "rrrrrrrr", actor="tg:1")).stale  # never an allow
    assert fresh.rules(sid) == (("pytest",),)
    await fresh.load(sid)  # loading again closes nothing twice
    assert await decided(storage, sid) == ["interrupted"]


async def test_a_rule_is_logged_once_however_often_it_is_granted(
    storage: Storage, tmp_path: Path
) -> None:
    sid = await new_session(storage, tmp_path)
    gate = ToolApprovals(storage.log, RecordingChannel())
    for _ in range(2):
        await gate.add_rule(sid, ("pytest",), actor="tg:1")
        await gate.add_rule(sid, ("src/app.py",), actor="tg:1", family="files")
        await gate.add_rule(sid, (), actor="tg:1")
    logged = [s.event for s in await storage.log.read(sid, types=("approval/rule",))]
    assert [(e.tool, e.words) for e in logged if isinstance(e, ApprovalRule)] == [
        ("bash", ["pytest"]),
        ("files", ["src/app.py"]),
    ]
    # Replayed, the rules are held again: granting them anew logs nothing more.
    fresh = ToolApprovals(storage.log, RecordingChannel())
    await fresh.load(sid)
    assert fresh.rules(sid) == (("pytest",),)
    await fresh.add_rule(sid, ("pytest",), actor="tg:1")
    await fresh.add_rule(sid, ("src/app.py",), actor="tg:1", family="files")
    assert len(await storage.log.read(sid, types=("approval/rule",))) == 2


class SlowPost(RecordingChannel):
    """Posting the approval message takes a while (a loaded machine, a slow Bot API)."""

    def __init__(self) -> None:
        super().__init__()
        self.posting = asyncio.Event()

    async def approval_asked(self, session_id: str, view: ApprovalView) -> None:
        self.posting.set()
        await asyncio.Event().wait()


async def test_a_stop_while_the_request_is_posted_closes_it_stopped(
    storage: Storage, tmp_path: Path
) -> None:
    sid = await new_session(storage, tmp_path)
    channel = SlowPost()
    gate = ToolApprovals(storage.log, channel)
    waiting = asyncio.create_task(
        gate.check(bash("rm -rf build"), ctx(sid, HumanSource()), phase="active")
    )
    await asyncio.wait_for(channel.posting.wait(), 30)
    waiting.cancel()  # /stop while the message with the buttons is still being posted
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert gate.pending(sid) is None  # nothing waits for the owner any more
    assert await decided(storage, sid) == ["stopped"]


async def test_a_request_that_cannot_be_logged_fails_the_call_and_leaves_nothing_waiting(
    storage: Storage, tmp_path: Path
) -> None:
    sid = await new_session(storage, tmp_path)
    log = FaultyLog(storage.log)
    channel = RecordingChannel()
    gate = ToolApprovals(log, channel)
    log.full = True  # the disk is full when the request is to be logged
    with pytest.raises(OSError, match="disk is full"):
        await gate.check(bash("rm -rf build"), ctx(sid, HumanSource()), phase="active")
    assert gate.pending(sid) is None  # no "waiting for you", no buttons
    assert channel.of("approval_asked") == []
    log.full = False
    # The next request is asked normally, with no stale one denied before it.
    waiting = asyncio.create_task(
        gate.check(bash("rm -rf build"), ctx(sid, HumanSource()), phase="active")
    )
    await asyncio.wait_for(_until(lambda: gate.pending(sid) is not None), 30)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert await decided(storage, sid) == ["stopped"]


async def _until(predicate: Callable[[], bool]) -> None:
    while not predicate():
        await asyncio.sleep(0.01)


ROUND = GoalRoundSource(goal_id="g", revision=1, round=1)


async def test_an_unattended_turn_posts_one_notice_listing_what_it_could_not_run(
    storage: Storage, tmp_path: Path
) -> None:
    sid = await new_session(storage, tmp_path)
    channel = RecordingChannel()
    hooked: list[str] = []

    async def hook(session_id: str, source: MessageSource, view: ApprovalView) -> None:
        hooked.append(view.command)

    gate = ToolApprovals(storage.log, channel, on_unattended=hook)
    commands = [f"touch f{i}" for i in range(30)] + ["touch f0"]  # the last one repeats
    for i, command in enumerate(commands):
        denied = await gate.check(bash(command, f"c{i}"), ctx(sid, ROUND), phase="active")
        assert denied == UNATTENDED_TEXT
    assert hooked == ["touch f0"]  # the goal blocks once, on the first
    views = [c.args["view"] for c in channel.of("approval_asked")]
    # One notice: posted once, then the same request grows (the channel edits it in place).
    assert {v.request_id for v in views} == {views[0].request_id}
    assert views[-1].command == "touch f0"
    assert views[-1].also == tuple(f"touch f{i}" for i in range(1, 30))
    assert await decided(storage, sid) == ["unattended"] * 31
    # The next round is another turn: its own notice.
    await gate.check(bash("touch g"), ctx(sid, ROUND.model_copy(update={"round": 2})), phase="none")
    assert channel.of("approval_asked")[-1].args["view"].request_id != views[0].request_id


async def test_a_request_denied_in_a_run_is_not_asked_again_until_a_person_acts(
    storage: Storage, tmp_path: Path
) -> None:
    sid = await new_session(storage, tmp_path)
    channel = RecordingChannel()
    gate = ToolApprovals(storage.log, channel, timeout_s=0.05)
    human = ctx(sid, SeedSource())  # a checklist run the owner armed: attended
    assert await gate.check(bash("make deploy"), human, phase="active") == TIMEOUT_TEXT.format(
        timeout="0.05s"
    )
    timed_out = gate.take_timeout(sid)
    assert timed_out is not None and timed_out.command == "make deploy"
    assert gate.take_timeout(sid) is None  # told once
    for _ in range(3):  # the model retries: no new message, the same denial
        assert await gate.check(bash("make deploy"), human, phase="active") == REPEAT_TEXT
    assert len(channel.of("approval_asked")) == 1
    gate.new_run(sid)  # Resume, a message: asked again
    again = asyncio.create_task(gate.check(bash("make deploy"), human, phase="active"))
    await asyncio.wait_for(_until(lambda: len(channel.of("approval_asked")) == 2), 5)
    view = gate.pending(sid)
    assert view is not None
    await gate.answer(sid, "once", view.short_id, actor="tg:1")
    assert await again is None


async def test_session_rules_for_interpreters_allow_the_exact_command_only(
    storage: Storage, tmp_path: Path
) -> None:
    sid = await new_session(storage, tmp_path)
    channel = RecordingChannel()
    gate = ToolApprovals(storage.log, channel)
    human = ctx(sid, HumanSource())

    async def ask_and(command: str, action: str) -> ApprovalView:
        waiting = asyncio.create_task(gate.check(bash(command), human, phase="active"))
        await asyncio.wait_for(_until(lambda: gate.pending(sid) is not None), 5)
        view = gate.pending(sid)
        assert view is not None
        await gate.answer(sid, action, view.short_id, actor="tg:1")
        await waiting
        return view

    view = await ask_and("python3 x.py", "session")
    assert view.exact and view.rule == ("python3", "x.py")
    assert await gate.check(bash("python3 x.py"), human, phase="active") is None
    view = await ask_and("python3 -c 'print(1)'", "deny")  # asks: not the same command
    assert view.rule == ("python3", "-c", "print(1)")
    # The exact rule replays as exact: a longer command still asks after a restart.
    fresh = ToolApprovals(storage.log, RecordingChannel())
    await fresh.load(sid)
    assert await fresh.check(bash("python3 x.py"), human, phase="active") is None
    assert fresh.rules(sid) == ()  # no prefix rule was added


async def test_allow_for_the_session_and_a_deny_at_once_act_once(
    storage: Storage, tmp_path: Path
) -> None:
    sid = await new_session(storage, tmp_path)
    channel = RecordingChannel()
    gate = ToolApprovals(storage.log, channel)
    waiting = asyncio.create_task(
        gate.check(bash("rm -rf build"), ctx(sid, HumanSource()), phase="active")
    )
    [asked] = await asyncio.wait_for(channel.wait_for("approval_asked"), 5)
    view = asked.args["view"]
    assert view.rule is not None
    # Two approvers press at once: the session grant logs its rule first, and the Deny that
    # lands meanwhile must not also act (it is out of date).
    allow, deny = await asyncio.gather(
        gate.answer(sid, "session", view.short_id, actor="tg:1"),
        gate.answer(sid, "deny", view.short_id, actor="tg:2"),
    )
    assert not allow.stale and deny.stale
    assert await asyncio.wait_for(waiting, 5) is None  # allowed: the call runs
    assert await decided(storage, sid) == ["session"]
    assert gate.rules(sid) == (view.rule,)
