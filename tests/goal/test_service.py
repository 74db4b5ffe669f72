"""GoalService: CAS through the log, arming, task criteria, races and a stale-ref property."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.events import GoalChange, GoalRoundSource, UserMessage
from engine.goal.fold import GoalRefusal, goal_id_for
from engine.goal.service import GoalService
from engine.goal.types import GoalRef, GoalSnapshot, GoalTombstone
from engine.projections import fold_session
from engine.testing import InMemoryEventLog

SID = "s1"


def make(log: InMemoryEventLog | None = None, **kw: int) -> tuple[GoalService, InMemoryEventLog]:
    log = log or InMemoryEventLog(clock=lambda: 1.0)
    return GoalService(log, clock=lambda: 5.0, **kw), log


async def goal_events(log: InMemoryEventLog) -> list[GoalChange]:
    return [e.event for e in await log.read(SID) if isinstance(e.event, GoalChange)]


async def test_create_writes_full_snapshot_and_default_cap() -> None:
    goals, log = make(default_max_rounds=7)
    goal = await goals.create(SID, "ship v1")
    assert isinstance(goal, GoalSnapshot)
    events = await goal_events(log)
    assert len(events) == 1 and events[0].snapshot == goal
    assert goal.max_goal_rounds == 7 and goal.created_at == 5.0
    assert fold_session(e.event for e in await log.read(SID)).goal == goal


async def test_stale_ref_fails_and_changes_nothing() -> None:
    goals, log = make()
    goal = await goals.create(SID, "x")
    assert isinstance(goal, GoalSnapshot)
    paused = await goals.pause(SID, goal.ref)
    assert isinstance(paused, GoalSnapshot) and paused.revision == 2
    before = await log.read(SID)
    again = await goals.edit(SID, goal.ref, objective="overwrite")
    assert isinstance(again, GoalRefusal) and again.code == "stale-revision"
    assert await log.read(SID) == before
    assert await goals.get(SID) == paused


async def test_new_service_starts_disarmed_and_arming_rules() -> None:
    goals, log = make()
    goal = await goals.create(SID, "by the owner", arm=True)
    assert isinstance(goal, GoalSnapshot)
    assert goals.is_armed(SID)
    # A second process (or a restart) folds the same goal but is not armed.
    other, _ = make(log)
    assert await other.get(SID) == goal
    assert not other.is_armed(SID)
    # Resume arms with a new revision; disarm writes nothing.
    resumed = await other.resume(SID, goal.ref)
    assert isinstance(resumed, GoalSnapshot) and resumed.revision == 2
    assert other.is_armed(SID)
    n = len(await log.read(SID))
    await other.on_session_start(SID)
    assert not other.is_armed(SID)
    assert len(await log.read(SID)) == n


async def test_model_created_goal_starts_disarmed_then_start_arms() -> None:
    goals, _ = make()
    goal = await goals.create(SID, "model idea", source="model")
    assert isinstance(goal, GoalSnapshot) and goal.source == "model"
    assert not goals.is_armed(SID)
    stale = await goals.arm(SID, GoalRef(id=goal.id, revision=9))
    assert isinstance(stale, GoalRefusal) and stale.code == "stale-revision"
    armed = await goals.arm(SID, goal.ref)
    assert armed == goal and goals.is_armed(SID)
    # Pausing disarms; the revision is the one pause wrote.
    paused = await goals.pause(SID, goal.ref)
    assert isinstance(paused, GoalSnapshot)
    assert not goals.is_armed(SID)


async def test_clear_tombstones_and_create_gets_fresh_id() -> None:
    goals, _ = make()
    goal = await goals.create(SID, "one")
    assert isinstance(goal, GoalSnapshot)
    refused = await goals.create(SID, "two")
    assert isinstance(refused, GoalRefusal) and refused.code == "goal-exists"
    tomb = await goals.clear(SID, goal.ref)
    assert tomb == GoalTombstone(id=goal.id, revision=2)
    assert await goals.get(SID) is None
    fresh = await goals.create(SID, "two")
    assert isinstance(fresh, GoalSnapshot) and fresh.id != goal.id and fresh.revision == 1


async def test_task_criteria_sink() -> None:
    goals, _ = make()
    await goals.set_task_criteria(SID, task_id="1", title="Parser", criteria=["parses a"])
    task = await goals.get(SID)
    assert task is not None and task.source == "task" and "- parses a" in task.objective
    assert not goals.is_armed(SID)
    refused = await goals.arm(SID, task.ref)
    assert isinstance(refused, GoalRefusal) and refused.code == "task-goal"
    user = await goals.create(SID, "the real goal", arm=True)
    assert isinstance(user, GoalSnapshot)
    await goals.set_task_criteria(SID, task_id="2", title="Other", criteria=[])
    await goals.clear_task_criteria(SID)
    assert await goals.get(SID) == user  # a live user goal is never replaced by a task label
    done = await goals.complete(SID, user.ref)
    assert isinstance(done, GoalSnapshot)
    await goals.set_task_criteria(SID, task_id="3", title="Next", criteria=["c"])
    after = await goals.get(SID)
    assert after is not None and after.source == "task"
    await goals.clear_task_criteria(SID)
    assert await goals.get(SID) is None


async def test_validate_round() -> None:
    goals, log = make()
    goal = await goals.create(SID, "loop", max_rounds=2, arm=True)
    assert isinstance(goal, GoalSnapshot)
    src = GoalRoundSource(goal_id=goal.id, revision=1, round=1)
    assert await goals.validate_round(SID, src)  # reserved, not yet admitted
    await log.append(SID, [UserMessage(text="round", source=src)])
    assert await goals.validate_round(SID, src)  # admitted
    assert not await goals.validate_round(SID, src.model_copy(update={"round": 3}))
    edited = await goals.edit(SID, goal.ref, objective="loop better")
    assert isinstance(edited, GoalSnapshot) and edited.rounds_started == 1
    assert not await goals.validate_round(SID, src)  # revision moved on
    new_src = GoalRoundSource(goal_id=goal.id, revision=2, round=2)
    assert await goals.validate_round(SID, new_src)
    await goals.disarm(SID)
    assert not await goals.validate_round(SID, new_src)


async def test_listeners_hear_changes_and_arming() -> None:
    goals, _ = make()
    heard: list[tuple[str, int | None]] = []

    def listener(session_id: str, goal: GoalSnapshot | None) -> None:
        heard.append((session_id, goal.revision if goal else None))

    goals.add_listener(listener)
    goal = await goals.create(SID, "x", source="model")
    assert isinstance(goal, GoalSnapshot)
    await goals.arm(SID, goal.ref)
    await goals.clear(SID, goal.ref)
    assert heard == [(SID, 1), (SID, 1), (SID, None)]


async def test_hundred_concurrent_mutations_one_wins_in_memory() -> None:
    goals, log = make()
    goal = await goals.create(SID, "race")
    assert isinstance(goal, GoalSnapshot)
    ref = goal.ref

    async def mutate(i: int) -> GoalSnapshot | GoalRefusal | GoalTombstone:
        match i % 4:
            case 0:
                return await goals.edit(SID, ref, objective=f"edit {i}")
            case 1:
                return await goals.pause(SID, ref)
            case 2:
                return await goals.complete(SID, ref)
            case _:
                return await goals.clear(SID, ref)

    results = await asyncio.gather(*(mutate(i) for i in range(100)))
    wins = [r for r in results if not isinstance(r, GoalRefusal)]
    assert len(wins) == 1
    assert all(r.code == "stale-revision" for r in results if isinstance(r, GoalRefusal))
    assert len(await goal_events(log)) == 2


async def test_append_conflict_from_another_service_is_stale() -> None:
    # Two services on one log: each passes its own lock, the log's CAS decides.
    log = InMemoryEventLog()
    a, _ = make(log)
    b, _ = make(log)
    goal = await a.create(SID, "shared")
    assert isinstance(goal, GoalSnapshot)
    await b.get(SID)
    results = await asyncio.gather(
        *(svc.edit(SID, goal.ref, objective=f"by {n}") for n, svc in enumerate([a, b] * 50))
    )
    assert sum(not isinstance(r, GoalRefusal) for r in results) == 1
    # Racing creates from two services mint the same id, so one of them loses too.
    log2 = InMemoryEventLog()
    c, _ = make(log2)
    d, _ = make(log2)
    made = await asyncio.gather(c.create(SID, "c"), d.create(SID, "d"))
    assert sum(isinstance(r, GoalSnapshot) for r in made) == 1
    assert {r.code for r in made if isinstance(r, GoalRefusal)} <= {"stale-revision", "goal-exists"}
    assert (await c.get(SID)) is not None
    assert (await c.get(SID)).id == goal_id_for(SID, 0)  # type: ignore[union-attr]


# --- property: stale refs never overwrite ------------------------------------------------

OPS = ["edit", "pause", "block", "complete", "resume", "clear", "create"]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(OPS), st.booleans(), st.integers(min_value=1, max_value=6)),
        min_size=1,
        max_size=25,
    )
)
def test_stale_refs_never_overwrite(steps: list[tuple[str, bool, int]]) -> None:
    asyncio.run(_run_steps(steps))


async def _run_steps(steps: list[tuple[str, bool, int]]) -> None:
    goals, log = make()
    await goals.create(SID, "start")
    seen_refs: list[GoalRef] = []
    for op, use_current, pick in steps:
        current = await goals.get(SID)
        if current is not None:
            seen_refs.append(current.ref)
        if op == "create":
            await goals.create(SID, f"new {pick}")
            continue
        stale_choices = [r for r in seen_refs if current is None or r != current.ref]
        stale_choices.append(GoalRef(id="nope", revision=pick))
        if current is not None:
            stale_choices.append(GoalRef(id=current.id, revision=current.revision + pick))
        if use_current and current is not None:
            ref = current.ref
        else:
            ref = stale_choices[pick % len(stale_choices)]
        before = await log.read(SID)
        result: object
        match op:
            case "edit":
                result = await goals.edit(SID, ref, objective=f"e{pick}", max_rounds=pick)
            case "pause":
                result = await goals.pause(SID, ref)
            case "block":
                result = await goals.block(SID, ref, code="user", message="m")
            case "complete":
                result = await goals.complete(SID, ref)
            case "resume":
                result = await goals.resume(SID, ref)
            case _:
                result = await goals.clear(SID, ref)
        stale = current is None or ref != current.ref
        if stale:
            assert isinstance(result, GoalRefusal) and result.code == "stale-revision"
            assert await log.read(SID) == before
            assert await goals.get(SID) == current
    # Every goal's revisions in the log go 1, 2, 3... with no overwrite and no gap.
    revisions: dict[str, list[int]] = {}
    for stored in await log.read(SID):
        event = stored.event
        assert isinstance(event, GoalChange)
        ref_ = event.snapshot or event.tombstone
        assert ref_ is not None
        revisions.setdefault(ref_.id, []).append(ref_.revision)
    for revs in revisions.values():
        assert revs == list(range(1, len(revs) + 1))
