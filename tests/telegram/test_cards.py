from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from bot import presses as cb
from bot.telegram.cards import (
    APPROVE,
    CANCEL,
    CLEAR,
    DISCARD,
    KEEP_PLANNING,
    PAUSE,
    RESUME,
    REVISE,
    START,
    YES_CLEAR,
    YES_DISCARD,
    CardView,
    build_goal_card,
    build_plan_card,
    progress_bar,
    to_markup,
)
from bot.telegram.render import utf16_len
from engine.goal.types import GoalBlocked, GoalSnapshot
from engine.plan.types import PlanSidecar, PlanTask
from tests.fakebot.tg_html import parse_html

PLAN_ID = "0123456789abcdef0123456789abcdef"


def plan(*, status: str = "Active", tasks: int = 0, done: int = 0, **kw: object) -> PlanSidecar:
    ts = [
        PlanTask(
            id=str(i + 1),
            order=i,
            title=f"Task {i + 1}",
            status="completed" if i < done else ("in_progress" if i == done else "pending"),
        )
        for i in range(tasks)
    ]
    return PlanSidecar(
        id=PLAN_ID,
        session_id="s",
        title="Ship <it> & go",
        status=status,
        tasks=ts,
        revision=7,
        **kw,
    )


def labels(view: CardView) -> list[list[str]]:
    return [[label for label, _ in row] for row in view.buttons]


def goal(**kw: object) -> GoalSnapshot:
    base: dict[str, object] = {
        "id": "feedbeefcafe0000",
        "revision": 3,
        "objective": "Make the tests pass & stay green",
        "phase": "active",
        "max_goal_rounds": 20,
        "rounds_started": 4,
    }
    base.update(kw)
    return GoalSnapshot.model_validate(base)


def test_plan_buttons_by_state_exactly_as_designed() -> None:
    p = plan(tasks=3, done=1)
    assert labels(build_plan_card(p, "review")) == [[APPROVE], [KEEP_PLANNING, DISCARD]]
    assert labels(build_plan_card(p, "active")) == [[DISCARD]]
    assert labels(build_plan_card(p, "revise_offer")) == [[REVISE, CANCEL]]
    assert labels(build_plan_card(p, "confirm_discard")) == [[YES_DISCARD, CANCEL]]
    # While a plan is live the card always offers Discard; Resume when paused.
    for live in ("planning", "written"):
        assert labels(build_plan_card(p, live)) == [[DISCARD]]  # type: ignore[arg-type]
    assert labels(build_plan_card(p, "paused")) == [[RESUME, DISCARD]]
    for state in ("none", "done"):
        assert build_plan_card(p, state).buttons == ()  # type: ignore[arg-type]
    assert APPROVE == "✅ Approve" and KEEP_PLANNING == "✏️ Keep planning" and DISCARD == "🗑 Discard"


def test_plan_buttons_are_bound_to_id_and_revision() -> None:
    view = build_plan_card(plan(status="Editing"), "review")
    decoded = [cb.decode(data) for row in view.buttons for _, data in row]
    assert [d.action for d in decoded if d] == [cb.PLAN_APPROVE, cb.PLAN_KEEP, cb.PLAN_DISCARD]
    assert all(d is not None and (d.short_id, d.revision) == (PLAN_ID[:8], 7) for d in decoded)
    assert all(d is not None and (d.short_id, d.revision) != (PLAN_ID[:8], 8) for d in decoded)


def test_plan_card_text_has_title_status_bar_and_window() -> None:
    view = build_plan_card(plan(tasks=30, done=12), "active")
    text = parse_html(view.text).text
    assert "Ship <it> & go" in text
    assert "In progress" in text
    assert progress_bar(12, 30) in text
    assert "… 10 earlier" in text and "… 11 more" in text
    assert "▶️ 13. Task 13" in text
    assert "Task 1\n" not in text


def test_plan_card_with_huge_titles_stays_within_limit() -> None:
    p = plan(tasks=50, done=5)
    for t in p.tasks:
        t.title = "&<>" * 500
    p.title = "&" * 5000
    view = build_plan_card(p, "active", note="&" * 5000)
    assert utf16_len(view.text) <= 4096
    parse_html(view.text)


def test_goal_card_buttons() -> None:
    assert labels(build_goal_card(goal(), armed=True)) == [[PAUSE, CLEAR]]
    assert labels(build_goal_card(goal(), armed=False)) == [[RESUME, CLEAR]]
    fresh_model_goal = goal(source="model", rounds_started=0)
    assert labels(build_goal_card(fresh_model_goal, armed=False)) == [[START, CLEAR]]
    assert labels(build_goal_card(goal(phase="paused"), armed=False)) == [[RESUME, CLEAR]]
    capped = goal(
        phase="blocked",
        rounds_started=20,
        blocked=GoalBlocked(code="round-limit", message="20 rounds used"),
    )
    assert labels(build_goal_card(capped, armed=False)) == [[CLEAR]]
    assert labels(build_goal_card(goal(phase="complete"), armed=False)) == [[CLEAR]]
    assert labels(build_goal_card(goal(), armed=True, confirm_clear=True)) == [[YES_CLEAR, CANCEL]]
    assert build_goal_card(goal(source="task"), armed=False).buttons == ()
    view = build_goal_card(goal(), armed=True)
    d = cb.decode(view.buttons[0][0][1])
    assert d is not None and d.kind == "g" and d.action == cb.GOAL_PAUSE
    assert (d.short_id, d.revision) == ("feedbeefcafe0000"[:8], 3)


def test_goal_card_text() -> None:
    text = parse_html(build_goal_card(goal(schedule_s=1800), armed=True).text).text
    assert "Make the tests pass & stay green" in text
    assert "Active — running" in text and "4/20" in text and "every 30m" in text


def test_to_markup() -> None:
    view = build_plan_card(plan(status="Editing"), "review")
    markup = to_markup(view)
    assert markup is not None
    assert markup.inline_keyboard[0][0].text == APPROVE
    assert to_markup(view.without_buttons()) is None


@settings(max_examples=40, deadline=None)
@given(
    title=st.text(max_size=400),
    titles=st.lists(st.text(min_size=1, max_size=300), max_size=40),
    done=st.integers(min_value=0, max_value=40),
    note=st.one_of(st.none(), st.text(max_size=800)),
)
def test_any_plan_card_fits_and_parses(
    title: str, titles: list[str], done: int, note: str | None
) -> None:
    p = PlanSidecar(
        id=PLAN_ID,
        session_id="s",
        title=title,
        status="Active",
        revision=1,
        tasks=[
            PlanTask(id=str(i + 1), order=i, title=t, status="completed" if i < done else "pending")
            for i, t in enumerate(titles)
        ],
    )
    view = build_plan_card(p, "active", note=note)
    assert utf16_len(view.text) <= 4096
    assert parse_html(view.text).text.strip()


def test_an_approval_without_a_name_shows_no_id() -> None:
    from bot.telegram.cards import approval_line
    from engine.plan.types import PlanApproval

    sidecar = plan(approved_by=[PlanApproval(user_id="tg:1001", name="", at="2026-12-06T04:00Z")])
    line = approval_line(sidecar, "active", approvals=[], needed=1)
    assert line == "✅ Approved by someone"
