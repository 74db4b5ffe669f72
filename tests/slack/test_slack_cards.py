"""Slack's cards are written from the engine's card data through the channel-neutral card
view (bot.cardview), never from another channel's presentation."""

from __future__ import annotations

from bot import presses as cb
from bot.cardview import (
    APPROVE,
    CLEAR,
    DISCARD,
    KEEP_PLANNING,
    PAUSE,
    goal_card_text,
    plan_card_text,
)
from bot.slack.cards import blocks_of
from engine.api import GoalCardData, PlanCardData, Press, goal_actions, plan_actions
from engine.goal.types import GoalSnapshot
from engine.plan.types import PlanSidecar, PlanTask

PLAN_ID = "0123456789abcdef0123456789abcdef"


def sidecar(*, status: str = "Editing", tasks: int = 0, done: int = 0) -> PlanSidecar:
    return PlanSidecar(
        id=PLAN_ID,
        session_id="s",
        title="Ship <!channel> & *go*",
        status=status,
        tasks=[
            PlanTask(
                id=str(i + 1),
                order=i,
                title=f"Task {i + 1}",
                status="completed" if i < done else ("in_progress" if i == done else "pending"),
            )
            for i in range(tasks)
        ],
        revision=7,
    )


def buttons(blocks: list[dict[str, object]]) -> list[tuple[str, str, str | None]]:
    return [
        (str(e["text"]["text"]), str(e["value"]), e.get("style"))  # type: ignore[index]
        for b in blocks
        if b["type"] == "actions"
        for e in b["elements"]  # type: ignore[attr-defined]
    ]


def text(blocks: list[dict[str, object]]) -> str:
    return "\n".join(
        str(b["text"]["text"])  # type: ignore[index]
        for b in blocks
        if b["type"] == "section"
    )


def test_the_review_card_says_the_plan_in_mrkdwn_and_carries_the_engines_actions() -> None:
    data = PlanCardData(
        state="review",
        sidecar=sidecar(),
        markdown="# Ship\n\n## Steps\n1. Do **it** — `make`.\n   - Done when: it works\n",
        actions=plan_actions("review"),
    )
    fallback, blocks = blocks_of(plan_card_text(data, now=0.0))
    shown = text(blocks)
    # The title is plain text: no mention, no markup can come through it.
    assert "Ship &lt;!channel&gt; &amp; *go*" in shown and "<!channel>" not in shown
    assert "*Ship &lt;!channel&gt;" in shown  # the title is set in bold, escaped
    assert "_Ready for review_" in shown
    assert "*it*" in shown and "`make`" in shown  # the plan's Markdown, as mrkdwn
    assert fallback.startswith("📋 Ship")
    assert buttons(blocks) == [
        (APPROVE, cb.plan_data("approve", PLAN_ID, 7), "primary"),
        (KEEP_PLANNING, cb.plan_data("keep", PLAN_ID, 7), None),
        (DISCARD, cb.plan_data("discard", PLAN_ID, 7), None),
    ]
    # What a button carries is the press the engine judges.
    assert cb.decode(buttons(blocks)[0][1]) == Press("p", "approve", PLAN_ID[:8], 7)


def test_the_checklist_card_shows_progress_and_a_stale_copy_has_no_buttons() -> None:
    data = PlanCardData(
        state="active",
        sidecar=sidecar(status="Active", tasks=4, done=2),
        actions=plan_actions("active"),
    )
    card = plan_card_text(data, now=0.0)
    _, blocks = blocks_of(card)
    assert "▓▓▓▓▓░░░░░ 2/4" in text(blocks)
    assert "*▶️ 3. Task 3*" in text(blocks)  # the current task in bold
    assert [label for label, _, _ in buttons(blocks)] == [DISCARD]
    assert buttons(blocks_of(card.without_buttons())[1]) == []


def test_the_goal_card_from_its_data() -> None:
    goal = GoalSnapshot.model_validate(
        {
            "id": "feedbeefcafe0000",
            "revision": 3,
            "objective": "Keep <it> green",
            "phase": "active",
            "max_goal_rounds": 20,
            "rounds_started": 4,
        }
    )
    data = GoalCardData(
        state="live",
        goal=goal,
        armed=True,
        actions=goal_actions(goal, armed=True, confirm_clear=False),
    )
    _, blocks = blocks_of(goal_card_text(data))
    assert "Keep &lt;it&gt; green" in text(blocks)
    assert "Rounds ▓▓░░░░░░░░ 4/20" in text(blocks)
    assert [label for label, _, _ in buttons(blocks)] == [PAUSE, CLEAR]
