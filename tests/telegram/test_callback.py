from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot import presses as cb
from engine.api import PRESS_ACTIONS


def test_round_trip_and_binding() -> None:
    data = cb.plan_data(cb.PLAN_APPROVE, "0123456789abcdef", 12)
    assert data == "p:approve:01234567:12"
    d = cb.decode(data)
    assert d == cb.CallbackData("p", "approve", "01234567", 12)
    assert (d.short_id, d.revision) == ("0123456789abcdef"[:8], 12)
    assert (d.short_id, d.revision) != ("0123456789abcdef"[:8], 13)
    assert (d.short_id, d.revision) != ("1123456789abcdef"[:8], 12)
    g = cb.decode(cb.goal_data(cb.GOAL_CLEAR_YES, "feedbeef-0000", 0))
    assert g == cb.CallbackData("g", "clear_yes", "feedbeef", 0)


@pytest.mark.parametrize(
    "data",
    [
        None,
        "",
        "p:approve:01234567",  # no revision
        "x:approve:01234567:1",  # unknown kind
        "p:pause:01234567:1",  # a goal action on a plan card
        "g:approve:01234567:1",  # a plan action on a goal card
        "p:approve:012345678:1",  # id too long
        "p:approve:0123 567:1",
        "p:approve:01234567:-1",
        "p:approve:01234567:01",  # leading zero: two encodings of one revision
        "p:approve:01234567:1:extra",
        "p:APPROVE:01234567:1",
        "p:approve:01234567:" + "9" * 19,
        "p:approve:01234567:1\n",
        "é" * 40,
    ],
)
def test_forged_or_malformed_decodes_to_none(data: str | None) -> None:
    assert cb.decode(data) is None


def test_encode_refuses_what_decode_would_reject() -> None:
    with pytest.raises(ValueError):
        cb.plan_data("explode", "0123456789", 1)
    with pytest.raises(ValueError):
        cb.plan_data(cb.PLAN_APPROVE, "0123456789", -5)


def test_every_action_fits_64_bytes_at_the_largest_revision() -> None:
    for kind, actions in (("p", PRESS_ACTIONS["p"]), ("g", PRESS_ACTIONS["g"])):
        for action in actions:
            data = cb.encode(kind, action, "f" * 32, 10**18 - 1)  # type: ignore[arg-type]
            assert len(data.encode()) <= cb.MAX_CALLBACK_BYTES
            assert cb.decode(data) is not None


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80))
def test_decode_never_raises_and_accepts_only_canonical_strings(data: str) -> None:
    d = cb.decode(data)
    if d is not None:
        assert cb.encode(d.kind, d.action, d.short_id, d.revision) == data
        assert len(data.encode()) <= cb.MAX_CALLBACK_BYTES


@settings(max_examples=100, deadline=None)
@given(
    action=st.sampled_from(sorted(PRESS_ACTIONS["p"])),
    plan_id=st.text(alphabet="0123456789abcdef-", min_size=1, max_size=36),
    revision=st.integers(min_value=0, max_value=10**12),
)
def test_plan_round_trip(action: str, plan_id: str, revision: int) -> None:
    d = cb.decode(cb.plan_data(action, plan_id, revision))
    assert (
        d is not None and d.action == action and (d.short_id, d.revision) == (plan_id[:8], revision)
    )


def test_approval_buttons_round_trip_bound_to_the_request() -> None:
    data = cb.approval_data(cb.APPROVAL_SESSION, "3f2a9c10deadbeef" * 2)
    assert data == "a:session:3f2a9c10:0"
    assert cb.decode(data) == cb.CallbackData("a", "session", "3f2a9c10", 0)
    for action in ("once", "deny", "rule"):
        assert cb.decode(f"a:{action}:3f2a9c10:0") is not None
    # A request has no revisions; plan or goal actions are not approval actions.
    for bad in ("a:once:3f2a9c10:1", "a:approve:3f2a9c10:0", "a:pause:3f2a9c10:0", "a:once::0"):
        assert cb.decode(bad) is None
    with pytest.raises(ValueError):
        cb.encode("a", "approve", "3f2a9c10", 0)
