"""Budgets that hold with many chats at once and with a server whose usage figures are wrong.

Real openai SDK against the fake chat-completions server on loopback, real SQLite log. The
fake bills what each request really sent (a quarter of its characters, as the estimate
counts) and, unless told otherwise, a completion of every ``max_tokens`` the call allowed: the
worst case a reservation must cover.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from engine.events import ModelUsageRecord, UserMessage
from engine.goal.driver import round_prompt
from engine.goal.types import GoalSnapshot
from engine.model.script import say
from engine.usage.ledger import MAX_PLAUSIBLE_TOKENS, chars_to_tokens, request_chars
from engine.usage.meter import UsageConfig
from tests.engine.helpers import OWNER, Rig, settle
from tests.fakes.openai_server import FakeOpenAIServer, FakeUsage
from tests.keys import chat
from tests.usage.test_usage_engine import Clock, records, rig_over, until_goal, write

# What the fake bills as the completion of a call that sent no max_tokens (an unbounded call).
UNBOUNDED_COMPLETION = 20_000


def billed(completion: int | None = None) -> Any:
    """The fake's usage rule: the request's prompt as the estimate counts it, and
    ``completion`` tokens (default: all the call's ``max_tokens``)."""

    def usage_of(body: dict[str, Any]) -> FakeUsage:
        chars = request_chars(body["messages"], body.get("tools") or [])
        out = completion if completion is not None else body.get("max_tokens")
        return FakeUsage(chars_to_tokens(chars), UNBOUNDED_COMPLETION if out is None else int(out))

    return usage_of


def replies(rig: Rig, sid: str) -> list[str]:
    return [c.args["text"] for c in rig.channel.of("reply") if c.session_id == sid]


async def test_six_chats_at_once_pass_the_cap_by_at_most_one_reservation(
    tmp_path: Any, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.usage_of = billed()
    fake_openai.play([say("hello") for _ in range(7)])
    config = UsageConfig(max_output_tokens=1000)
    async with rig_over(tmp_path, fake_openai, Clock(), usage=config) as rig:
        engine = rig.engine
        warm = await engine.session_for_chat(chat(-99))
        await engine.user_message(warm, "hi", actor=OWNER, message_id="1")
        await settle(engine, warm)
        (first,) = await records(rig, warm)
        one_call = first.prompt_tokens + 1000
        # Room for two and a half such calls.
        cap = engine.usage.today().tokens + int(2.5 * one_call)
        engine.usage.set_daily_cap(cap)

        # Every call that goes out waits at the server: all six are under way together.
        holds = [fake_openai.hold_next() for _ in range(6)]
        sids = [await engine.session_for_chat(chat(-100 - n)) for n in range(6)]
        for n, sid in enumerate(sids):
            await engine.user_message(sid, "hi", actor=OWNER, message_id=str(10 + n))

        def refused() -> int:
            return sum(1 for sid in sids for text in replies(rig, sid) if "Daily token cap" in text)

        async def all_decided() -> None:
            while len(fake_openai.chat_requests) - 1 + refused() < 6:
                await asyncio.sleep(0.01)

        await asyncio.wait_for(all_decided(), 30)
        for hold in holds:
            hold.set()
        for sid in sids:
            await settle(engine, sid)

        sent = fake_openai.chat_requests[1:]
        assert sent and refused() == 6 - len(sent) >= 1
        made = [r for sid in sids for r in await records(rig, sid)]
        assert len(made) == len(sent)
        allowed = [int(body.get("max_tokens", UNBOUNDED_COMPLETION)) for body in sent]
        largest = max(r.prompt_estimate + n for r, n in zip(made, allowed, strict=False))
        assert all(n <= 1000 for n in allowed)
        assert engine.usage.today().tokens <= cap + largest
        assert engine.usage.held_today() == 0  # every hold was settled
        # Each refused chat was told, with the held tokens of the calls under way.
        assert any("held by calls under way" in t for sid in sids for t in replies(rig, sid))


async def test_a_goal_call_sends_no_more_max_tokens_than_its_budget_leaves(
    tmp_path: Any, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.usage_of = billed()
    fake_openai.play([say("ready"), *[write(f"f{n}.txt") for n in range(10)], say("done")])
    async with rig_over(tmp_path, fake_openai, Clock()) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-100))
        await engine.user_message(sid, "get ready", actor=OWNER, message_id="1")
        await settle(engine, sid)
        await engine.command(sid, "goal", "write files --tokens 10k", actor=OWNER)
        goal = await until_goal(rig, sid, lambda g: g.phase == "blocked")
        assert goal.blocked is not None and goal.blocked.code == "budget-limit"
        spent = await engine.usage.goal_tokens(sid, goal.id)
        goal_calls = [r for r in await records(rig, sid) if r.goal_id == goal.id]
        assert goal_calls and not any(r.estimated for r in goal_calls)
        # Each call's completion was bounded by what the budget left after its prompt, so
        # the goal ends within its budget although the server used every token it was allowed.
        assert spent <= 10_000
        for body in fake_openai.chat_requests[1:]:
            assert 1 <= int(body["max_tokens"]) <= 4096


async def test_an_admitted_goal_round_always_makes_its_call(
    tmp_path: Any, fake_openai: FakeOpenAIServer
) -> None:
    """The round's request is bigger than its admission estimate (the objective is in the
    system prompt too); a cap between the two used to count the round and make no call."""
    fake_openai.usage_of = billed(completion=10)
    fake_openai.play([say("ready"), say("working on it"), say("more")])
    objective = "keep the docs in step with the code " * 60  # about 2,000 characters
    async with rig_over(tmp_path, fake_openai, Clock(), max_goal_rounds=5) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-100))
        await engine.user_message(sid, "get ready", actor=OWNER, message_id="1")
        await settle(engine, sid)
        (last,) = await records(rig, sid)
        # What the meter estimates before the round's message is logged.
        shape = GoalSnapshot(
            id="estimate",
            revision=1,
            objective=objective.strip(),
            phase="active",
            max_goal_rounds=5,
        )
        admission = last.prompt_tokens + chars_to_tokens(len(round_prompt(shape, 1)))
        engine.usage.set_daily_cap(engine.usage.today().tokens + admission + 300)
        await engine.command(sid, "goal", objective, actor=OWNER)
        goal = await until_goal(rig, sid, lambda g: g.phase == "blocked")
        assert goal.blocked is not None and goal.blocked.code == "budget-limit"

        rounds = [
            s
            for s in await rig.storage.log.read(sid, types={"user/message"})
            if isinstance(s.event, UserMessage) and s.event.source.kind == "goal"
        ]
        calls = [r for r in await records(rig, sid) if r.goal_id == goal.id]
        assert goal.rounds_started == len(rounds) == 1
        assert len(calls) == 1  # the counted round made its call


@pytest.mark.parametrize("figures", [(10**400, 5), (5, 10**400), (-3, 5)])
async def test_absurd_usage_figures_are_counted_by_the_estimate_and_lose_nothing(
    tmp_path: Any,
    fake_openai: FakeOpenAIServer,
    caplog: pytest.LogCaptureFixture,
    figures: tuple[int, int],
) -> None:
    fake_openai.usage = FakeUsage(*figures)
    fake_openai.play([say("the answer is 42"), say("still here")])
    prices = UsageConfig(price_input=2.5, price_output=10.0, footer="on")
    caplog.set_level(logging.INFO, logger="plangate")
    async with rig_over(tmp_path, fake_openai, Clock(), usage=prices) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-100))
        await engine.user_message(sid, "question", actor=OWNER, message_id="1")
        await settle(engine, sid)
        (first,) = replies(rig, sid)
        assert first.startswith("the answer is 42") and "\n\n— " in first and "$" in first
        (rec,) = await records(rig, sid)
        assert rec.estimated and 0 < rec.prompt_tokens <= MAX_PLAUSIBLE_TOKENS
        report = (await engine.command(sid, "usage", "", actor=OWNER)).reply or ""
        assert "1 estimated" in report and "$" in report
        if figures[0] >= 0:  # a negative count never parses as usage at all
            assert any("implausible" in r.getMessage() for r in caplog.records)
        # The next turn works as well: nothing stays broken for the day.
        await engine.user_message(sid, "again", actor=OWNER, message_id="2")
        await settle(engine, sid)
        assert replies(rig, sid)[-1].startswith("still here")


async def test_a_server_reporting_zero_usage_cannot_switch_a_goal_budget_off(
    tmp_path: Any, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.usage = FakeUsage(0, 0)
    fake_openai.play(
        [say("ready"), *[s for n in range(40) for s in (write(f"r{n}.txt"), say(f"round {n}"))]]
    )
    async with rig_over(tmp_path, fake_openai, Clock(), max_goal_rounds=40) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-100))
        await engine.user_message(sid, "get ready", actor=OWNER, message_id="1")
        await settle(engine, sid)
        await engine.command(sid, "goal", "write files --tokens 12k", actor=OWNER)
        goal = await until_goal(rig, sid, lambda g: g.phase == "blocked")
        assert goal.blocked is not None and goal.blocked.code == "budget-limit"
        recs = [r for r in await records(rig, sid) if r.goal_id == goal.id]
        assert recs and all(r.estimated and r.prompt_tokens > 0 for r in recs)
        assert goal.rounds_started < 40
        assert 0 < await engine.usage.goal_tokens(sid, goal.id) <= 12_000 + 4096


def test_a_stored_absurd_record_counts_by_its_estimate() -> None:
    """A record logged before figures were checked cannot wreck the day's sums or /usage."""
    from engine.usage.ledger import Totals, cost, summary_line

    totals = Totals()
    totals.add(
        ModelUsageRecord(
            turn_id="t", prompt_tokens=10**400, completion_tokens=7, prompt_estimate=1200
        )
    )
    assert (totals.prompt, totals.completion) == (1200, 7)
    assert cost(totals, 2.5, 10.0) is not None
    huge = Totals(prompt=10**400)
    assert cost(huge, 2.5, 10.0) is None and "tokens" in summary_line(huge, 2.5, 10.0)


async def test_figures_below_a_tenth_of_the_estimate_are_replaced_and_logged_once_per_server(
    tmp_path: Any, fake_openai: FakeOpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    fake_openai.usage = FakeUsage(1, 1)
    fake_openai.play([write("a.txt"), say("wrote it " * 20), say("and again " * 20)])
    caplog.set_level(logging.INFO, logger="plangate")
    async with rig_over(tmp_path, fake_openai, Clock()) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-100))
        await engine.user_message(sid, "write a", actor=OWNER, message_id="1")
        await settle(engine, sid)
        await engine.user_message(sid, "again", actor=OWNER, message_id="2")
        await settle(engine, sid)
        recs = await records(rig, sid)
        assert len(recs) == 3 and all(r.estimated for r in recs)
        for rec, body in zip(recs, fake_openai.chat_requests, strict=True):
            sent = chars_to_tokens(request_chars(body["messages"], body.get("tools") or []))
            assert rec.prompt_tokens >= sent and rec.completion_tokens > 1
        doubted = [r for r in caplog.records if "underreported" in r.getMessage()]
        assert len(doubted) == 1 and fake_openai.base_url in doubted[0].getMessage()


async def test_an_honest_server_is_believed(
    tmp_path: Any, fake_openai: FakeOpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    # A tokenizer denser than the quarter rule (a third less) is well within a tenth.
    def honest(body: dict[str, Any]) -> FakeUsage:
        chars = request_chars(body["messages"], body.get("tools") or [])
        return FakeUsage(chars // 6, 3)

    fake_openai.usage_of = honest
    fake_openai.play([say("ok")])
    caplog.set_level(logging.INFO, logger="plangate")
    async with rig_over(tmp_path, fake_openai, Clock()) as rig:
        sid = await rig.engine.session_for_chat(chat(-100))
        await rig.engine.user_message(sid, "hi", actor=OWNER, message_id="1")
        await settle(rig.engine, sid)
        (rec,) = await records(rig, sid)
        assert not rec.estimated and rec.completion_tokens == 3
        assert not any("underreported" in r.getMessage() for r in caplog.records)
