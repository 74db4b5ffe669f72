"""Table tests over every goal transition and refusal (pure; no event loop)."""

from __future__ import annotations

import pytest

from engine.errors import CorruptState
from engine.events import GoalChange, GoalRoundSource, SessionEvent, UserMessage
from engine.goal.fold import (
    REFUSAL_TEXT,
    BlockGoal,
    ClearGoal,
    ClearTaskGoal,
    CompleteGoal,
    CreateGoal,
    EditGoal,
    GoalRefusal,
    GoalState,
    GoalStep,
    PauseGoal,
    ResumeGoal,
    SetTaskGoal,
    decide,
    fold_goal,
    goal_id_for,
)
from engine.goal.types import GoalBlocked, GoalRef, GoalSnapshot, GoalTombstone
from engine.projections import fold_session

SID = "s1"


def snap(phase: str = "active", **kw: object) -> GoalSnapshot:
    data: dict[str, object] = {
        "id": "g1",
        "revision": 3,
        "objective": "ship it",
        "phase": phase,
        "max_goal_rounds": 5,
        "rounds_started": 2,
    }
    if phase == "blocked":
        data["blocked"] = GoalBlocked(code="user", message="why")
    data.update(kw)
    return GoalSnapshot.model_validate(data)


def state_of(goal: GoalSnapshot | None, created: int = 1) -> GoalState:
    return GoalState(goal=goal, created=created)


def run(state: GoalState, command: object) -> GoalStep | GoalRefusal:
    return decide(state, command, session_id=SID, now=100.0, default_max_rounds=20)  # type: ignore[arg-type]


REF = GoalRef(id="g1", revision=3)
STALE = GoalRef(id="g1", revision=2)
OTHER = GoalRef(id="g0", revision=3)

# (start phase, command, expected phase after, or refusal code)
TABLE: list[tuple[str, object, str]] = [
    ("active", EditGoal(ref=REF, objective="new"), "active"),
    ("paused", EditGoal(ref=REF, objective="new"), "paused"),
    ("blocked", EditGoal(ref=REF, max_rounds=9), "blocked"),
    ("complete", EditGoal(ref=REF, objective="new"), "goal-complete"),
    ("active", PauseGoal(ref=REF), "paused"),
    ("paused", PauseGoal(ref=REF), "wrong-phase"),
    ("blocked", PauseGoal(ref=REF), "wrong-phase"),
    ("complete", PauseGoal(ref=REF), "goal-complete"),
    ("active", BlockGoal(ref=REF, code="model-reported", message="stuck"), "blocked"),
    ("paused", BlockGoal(ref=REF, code="user", message="x"), "wrong-phase"),
    ("blocked", BlockGoal(ref=REF, code="user", message="x"), "wrong-phase"),
    ("complete", BlockGoal(ref=REF, code="user", message="x"), "goal-complete"),
    ("active", CompleteGoal(ref=REF), "complete"),
    ("paused", CompleteGoal(ref=REF), "complete"),
    ("blocked", CompleteGoal(ref=REF), "complete"),
    ("complete", CompleteGoal(ref=REF), "goal-complete"),
    ("active", ResumeGoal(ref=REF), "active"),
    ("paused", ResumeGoal(ref=REF), "active"),
    ("blocked", ResumeGoal(ref=REF), "active"),
    ("complete", ResumeGoal(ref=REF), "goal-complete"),
    ("active", ClearGoal(ref=REF), "cleared"),
    ("paused", ClearGoal(ref=REF), "cleared"),
    ("blocked", ClearGoal(ref=REF), "cleared"),
    ("complete", ClearGoal(ref=REF), "cleared"),
]


@pytest.mark.parametrize(("phase", "command", "expected"), TABLE)
def test_transition_table(phase: str, command: object, expected: str) -> None:
    goal = snap(phase)
    result = run(state_of(goal), command)
    if expected in REFUSAL_TEXT:
        assert isinstance(result, GoalRefusal)
        assert result.code == expected
        return
    assert isinstance(result, GoalStep)
    assert len(result.events) == 1
    event = result.events[0]
    assert isinstance(event, GoalChange)
    if expected == "cleared":
        assert event.snapshot is None
        assert event.tombstone == GoalTombstone(id="g1", revision=4)
        assert result.goal is None
        return
    new = event.snapshot
    assert new is not None
    assert new.id == "g1" and new.revision == 4
    assert new.phase == expected
    assert (new.blocked is not None) == (expected == "blocked")
    assert new.rounds_started == 2
    assert new.updated_at == 100.0


@pytest.mark.parametrize("phase", ["active", "paused", "blocked", "complete"])
@pytest.mark.parametrize(
    "make",
    [
        lambda r: EditGoal(ref=r, objective="x"),
        lambda r: PauseGoal(ref=r),
        lambda r: BlockGoal(ref=r, code="user", message="m"),
        lambda r: CompleteGoal(ref=r),
        lambda r: ResumeGoal(ref=r),
        lambda r: ClearGoal(ref=r),
    ],
)
@pytest.mark.parametrize("ref", [STALE, OTHER, GoalRef(id="g1", revision=4)])
def test_stale_ref_is_refused_in_every_phase(phase: str, make: object, ref: GoalRef) -> None:
    result = run(state_of(snap(phase)), make(ref))  # type: ignore[operator]
    assert isinstance(result, GoalRefusal)
    assert result.code == "stale-revision"


def test_mutation_without_goal_is_stale() -> None:
    result = run(state_of(None, created=0), PauseGoal(ref=REF))
    assert isinstance(result, GoalRefusal) and result.code == "stale-revision"


def test_edit_keeps_blocked_reason_and_sets_fields() -> None:
    result = run(
        state_of(snap("blocked")),
        EditGoal(ref=REF, objective="  better  ", max_rounds=9, schedule_s=1800),
    )
    assert isinstance(result, GoalStep) and result.goal is not None
    assert result.goal.objective == "better"
    assert result.goal.max_goal_rounds == 9
    assert result.goal.schedule_s == 1800
    assert result.goal.blocked == GoalBlocked(code="user", message="why")


def test_edit_schedule_off_and_unchanged() -> None:
    goal = snap(schedule_s=60)
    kept = run(state_of(goal), EditGoal(ref=REF, objective="y"))
    assert isinstance(kept, GoalStep) and kept.goal is not None and kept.goal.schedule_s == 60
    off = run(state_of(goal), EditGoal(ref=REF, schedule_s=None))
    assert isinstance(off, GoalStep) and off.goal is not None and off.goal.schedule_s is None


@pytest.mark.parametrize(
    ("command", "code"),
    [
        (EditGoal(ref=REF, objective="   "), "empty-objective"),
        (EditGoal(ref=REF, max_rounds=0), "invalid-max-rounds"),
        (EditGoal(ref=REF, schedule_s=0), "invalid-schedule"),
        (CreateGoal(objective=""), "empty-objective"),
        (CreateGoal(objective="x", max_rounds=-1), "invalid-max-rounds"),
        (CreateGoal(objective="x", schedule_s=0), "invalid-schedule"),
    ],
)
def test_invalid_inputs(command: object, code: str) -> None:
    result = run(state_of(snap("active") if isinstance(command, EditGoal) else None), command)
    assert isinstance(result, GoalRefusal) and result.code == code


def test_resume_at_cap_says_raise_the_cap_first() -> None:
    for phase in ("active", "paused", "blocked"):
        result = run(state_of(snap(phase, rounds_started=5)), ResumeGoal(ref=REF))
        assert isinstance(result, GoalRefusal)
        assert result.code == "no-capacity"
        assert "raise the cap first" in result.message


def test_resume_clears_blocked() -> None:
    result = run(state_of(snap("blocked")), ResumeGoal(ref=REF))
    assert isinstance(result, GoalStep) and result.goal is not None
    assert result.goal.phase == "active" and result.goal.blocked is None


def test_create_on_empty_session_is_active_r1() -> None:
    result = run(GoalState(), CreateGoal(objective=" do it ", max_rounds=None))
    assert isinstance(result, GoalStep)
    goal = result.goal
    assert goal is not None
    assert (goal.id, goal.revision, goal.phase) == (goal_id_for(SID, 0), 1, "active")
    assert goal.objective == "do it"
    assert goal.max_goal_rounds == 20
    assert goal.rounds_started == 0 and goal.blocked is None
    assert result.state.created == 1


@pytest.mark.parametrize("phase", ["active", "paused", "blocked"])
@pytest.mark.parametrize("source", ["user", "model"])
def test_create_refused_while_user_goal_is_live(phase: str, source: str) -> None:
    result = run(state_of(snap(phase, source=source)), CreateGoal(objective="another"))
    assert isinstance(result, GoalRefusal) and result.code == "goal-exists"


def test_create_after_complete_gets_fresh_id_and_tombstones_old() -> None:
    result = run(state_of(snap("complete"), created=1), CreateGoal(objective="next"))
    assert isinstance(result, GoalStep)
    assert [type(e) for e in result.events] == [GoalChange, GoalChange]
    first, second = result.events
    assert isinstance(first, GoalChange) and first.tombstone == GoalTombstone(id="g1", revision=4)
    assert isinstance(second, GoalChange) and second.snapshot is not None
    assert second.snapshot.id == goal_id_for(SID, 1) != "g1"
    assert second.snapshot.revision == 1


def test_create_after_clear_gets_fresh_id() -> None:
    state = fold_goal(
        [
            GoalChange(snapshot=snap(id=goal_id_for(SID, 0), revision=1)),
            GoalChange(tombstone=GoalTombstone(id=goal_id_for(SID, 0), revision=2)),
        ]
    )
    result = run(state, CreateGoal(objective="again"))
    assert isinstance(result, GoalStep) and result.goal is not None
    assert result.goal.id == goal_id_for(SID, 1)
    assert len(result.events) == 1


def test_task_goal_set_replace_and_clear() -> None:
    set_ = run(GoalState(), SetTaskGoal(task_id="3", title="Add X", criteria=("a", " b ")))
    assert isinstance(set_, GoalStep) and set_.goal is not None
    assert set_.goal.source == "task"
    assert set_.goal.objective == "Add X\n- a\n- b"
    # A new task edits the label in place.
    again = run(set_.state, SetTaskGoal(task_id="4", title="Add Y", criteria=()))
    assert isinstance(again, GoalStep) and again.goal is not None
    assert again.goal.id == set_.goal.id and again.goal.revision == 2
    # A user goal replaces it.
    user = run(again.state, CreateGoal(objective="mine"))
    assert isinstance(user, GoalStep) and user.goal is not None
    assert user.goal.source == "user" and user.goal.id != set_.goal.id
    # No task label while a user goal is live, and clearing the task leaves the user goal.
    blocked = run(user.state, SetTaskGoal(task_id="5", title="Z", criteria=()))
    assert isinstance(blocked, GoalStep) and blocked.events == []
    cleared = run(user.state, ClearTaskGoal())
    assert isinstance(cleared, GoalStep) and cleared.events == [] and cleared.goal == user.goal
    tomb = run(again.state, ClearTaskGoal())
    assert isinstance(tomb, GoalStep) and tomb.goal is None


def test_task_goal_cannot_resume() -> None:
    task = snap(source="task")
    result = run(state_of(task), ResumeGoal(ref=REF))
    assert isinstance(result, GoalRefusal) and result.code == "task-goal"


def test_fold_counts_admitted_rounds_of_current_goal_only() -> None:
    g = snap(revision=1, rounds_started=0)
    events: list[SessionEvent] = [
        GoalChange(snapshot=g),
        UserMessage(text="r1", source=GoalRoundSource(goal_id="g1", revision=1, round=1)),
        UserMessage(text="other", source=GoalRoundSource(goal_id="gX", revision=1, round=1)),
        UserMessage(text="human"),
        UserMessage(text="r2", source=GoalRoundSource(goal_id="g1", revision=1, round=2)),
    ]
    state = fold_goal(events)
    assert state.goal is not None
    assert state.goal.rounds_started == 2
    assert state.goal.revision == 1  # admission does not bump the revision
    assert fold_session(events).goal == state.goal


def test_fold_never_takes_a_round_back() -> None:
    # A snapshot written from a fold that missed the latest admission keeps the higher count.
    events: list[SessionEvent] = [
        GoalChange(snapshot=snap(revision=1, rounds_started=0)),
        UserMessage(text="r1", source=GoalRoundSource(goal_id="g1", revision=1, round=1)),
        GoalChange(snapshot=snap(revision=2, rounds_started=0, objective="edited")),
    ]
    goal = fold_goal(events).goal
    assert goal is not None and goal.rounds_started == 1 and goal.objective == "edited"


def test_fold_rejects_corrupt_goal_events() -> None:
    with pytest.raises(CorruptState):
        fold_goal([GoalChange()])
    bad = snap("active").model_copy(update={"blocked": GoalBlocked(code="x", message="y")})
    with pytest.raises(CorruptState):
        fold_goal([GoalChange(snapshot=bad)])


def test_tombstone_of_another_goal_does_not_clear_current() -> None:
    state = fold_goal(
        [GoalChange(snapshot=snap()), GoalChange(tombstone=GoalTombstone(id="old", revision=9))]
    )
    assert state.goal is not None and state.goal.id == "g1"
