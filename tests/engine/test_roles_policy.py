"""The one rule of who may do what (engine.roles.policy), as a table, and /team's parser."""

from __future__ import annotations

import pytest

from engine.roles.commands import TEAM_USAGE, TeamSpec, parse_team_args
from engine.roles.policy import PERMISSIONS, command_action, may, press_action

ROWS = [
    # (command or press, action, owner, approver, member)
    (("cmd", "status", ""), "read", True, True, True),
    (("cmd", "show_plan", ""), "read", True, True, True),
    (("cmd", "team", ""), "read", True, True, True),
    (("cmd", "team", "add @ana approver"), "settings", True, False, False),
    (("cmd", "team", "remove 12"), "settings", True, False, False),
    (("cmd", "execute", ""), "approve", True, True, False),
    (("cmd", "discard", ""), "review", True, True, False),
    (("cmd", "stop", ""), "stop", True, True, False),
    (("cmd", "goal", "pause"), "stop", True, True, False),
    (("cmd", "goal", " Pause "), "stop", True, True, False),
    # Words after /goal pause or /execute are words for the agent: the owner's.
    (("cmd", "goal", "pause and rewrite the repo"), "control", True, False, False),
    (("cmd", "execute", "and disable the tests"), "control", True, False, False),
    (("cmd", "start", ""), "read", True, True, True),
    (("press", "v", "send"), "control", True, False, False),
    (("press", "p", "drop_yes"), "control", True, False, False),
    (("cmd", "goal", "resume"), "control", True, False, False),
    (("cmd", "goal", "budget 500k"), "settings", True, False, False),
    (("cmd", "goal", "ship it --tokens 200k"), "settings", True, False, False),
    (("cmd", "usage", "cap 2m"), "settings", True, False, False),
    (("cmd", "project", "web"), "settings", True, False, False),
    (("cmd", "plan", "add login"), "control", True, False, False),
    (("cmd", "new", ""), "control", True, False, False),
    (("press", "p", "approve"), "approve", True, True, False),
    (("press", "p", "resume"), "approve", True, True, False),
    (("press", "p", "keep"), "review", True, True, False),
    (("press", "p", "revise"), "review", True, True, False),
    (("press", "p", "discard_yes"), "review", True, True, False),
    (("press", "p", "raise_cap"), "settings", True, False, False),
    (("press", "a", "once"), "approve", True, True, False),
    (("press", "a", "deny"), "approve", True, True, False),
    (("press", "q", ""), "answer", True, True, False),
    (("press", "g", "pause"), "stop", True, True, False),
    (("press", "g", "resume"), "control", True, False, False),
    (("press", "g", "clear_yes"), "control", True, False, False),
]


@pytest.mark.parametrize(("what", "action", "owner", "approver", "member"), ROWS)
def test_who_may_do_what(
    what: tuple[str, str, str], action: str, owner: bool, approver: bool, member: bool
) -> None:
    kind, a, b = what
    found = command_action(a, b) if kind == "cmd" else press_action(a, b)
    assert found == action
    assert (may("owner", found), may("approver", found), may("member", found)) == (
        owner,
        approver,
        member,
    )


def test_each_role_is_a_subset_of_the_one_above() -> None:
    assert PERMISSIONS["member"] < PERMISSIONS["approver"] < PERMISSIONS["owner"]


def test_team_args() -> None:
    assert parse_team_args("") == TeamSpec("list")
    assert parse_team_args("add @Ana approver") == TeamSpec("add", username="Ana")
    assert parse_team_args("add 3003") == TeamSpec("add", user_id="3003")
    assert parse_team_args("remove") == TeamSpec("remove")
    assert parse_team_args("add @ana owner").startswith(TEAM_USAGE)  # type: ignore[union-attr]
    assert parse_team_args("promote @ana") == TEAM_USAGE
    assert parse_team_args("list extra") == TEAM_USAGE


def test_last_decisions_name_who_and_keep_the_newest() -> None:
    from engine.events import ApprovalDecided, ApprovalRequested, CommandRun, StoredEvent
    from engine.roles.audit import last_decisions

    events = [
        ApprovalRequested(request_id="r1", call_id="c1", tool="bash", command="pytest -q"),
        ApprovalDecided(
            request_id="r1", call_id="c1", decision="once", actor="tg:5", actor_name="Ben"
        ),
        ApprovalDecided(request_id="r2", call_id="c2", decision="timeout"),  # nobody decided
        CommandRun(name="approval_vote", actor="tg:4", data={"revision": 3, "name": "Ana"}),
        CommandRun(name="approve", actor="tg:5", data={"revision": 3}),
        CommandRun(name="status", actor="tg:4"),
    ]
    stored = [StoredEvent("s", i + 1, 3600.0 * i, e) for i, e in enumerate(events)]
    assert last_decisions(stored, limit=10) == [
        "🔐 pytest -q: allowed once by Ben, 01:00 UTC",
        "👍 Plan approval by Ana, 03:00 UTC",
        "✅ Plan approved by 5, 04:00 UTC",
    ]
    assert len(last_decisions(stored, limit=2)) == 2
