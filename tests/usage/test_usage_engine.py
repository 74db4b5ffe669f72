"""Usage accounting and budgets through the engine, over the real openai SDK on loopback.

The fake chat-completions server reports known usage figures for every call; the log is a real
SQLite file and a restart is a second engine over the same home.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from engine.api import Press
from engine.events import CommandRun, ModelUsageRecord, UserMessage
from engine.goal.types import GoalSnapshot
from engine.model.openai_provider import OpenAIProvider
from engine.model.script import ScriptStep, call, say
from engine.usage.ledger import chars_to_tokens, request_chars
from engine.usage.meter import UsageConfig
from tests.engine.helpers import OWNER, Rig, engine_rig, settle
from tests.fakes.openai_server import FAKE_MODEL, FakeOpenAIServer, FakeUsage
from tests.keys import chat

# 2026-03-10 12:00 UTC: far from a day boundary, so the day of every record is known.
NOON = 1_773_144_000.0


class Clock:
    def __init__(self, now: float = NOON) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@asynccontextmanager
async def rig_over(
    tmp_path: Path,
    server: FakeOpenAIServer,
    clock: Clock,
    *,
    usage: UsageConfig | None = None,
    max_goal_rounds: int = 20,
    goal_idle_rounds: int = 3,
) -> AsyncIterator[Rig]:
    model = OpenAIProvider(FAKE_MODEL, base_url=server.base_url, api_key="test-key")
    try:
        async with engine_rig(
            tmp_path,
            model,
            usage=usage,
            clock=clock,
            max_goal_rounds=max_goal_rounds,
            goal_idle_rounds=goal_idle_rounds,
        ) as rig:
            yield rig
    finally:
        await model.aclose()


async def records(rig: Rig, sid: str) -> list[ModelUsageRecord]:
    stored = await rig.storage.log.read(sid, types={"model/usage"})
    return [s.event for s in stored if isinstance(s.event, ModelUsageRecord)]


async def until_goal(rig: Rig, sid: str, done: Callable[[GoalSnapshot], bool]) -> GoalSnapshot:
    async def wait() -> GoalSnapshot:
        while True:
            goal = await rig.engine.goals.get(sid)
            if goal is not None and done(goal):
                return goal
            await asyncio.sleep(0.01)

    goal = await asyncio.wait_for(wait(), 20)
    await settle(rig.engine, sid)
    return goal


def write(name: str) -> ScriptStep:
    return call("write_file", {"path": name, "content": f"{name}\n"})


async def test_sums_per_turn_session_goal_and_day_are_exact_and_survive_a_restart(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.usage = FakeUsage(prompt_tokens=1200, completion_tokens=30, cached_tokens=200)
    fake_openai.play(
        [
            write("a.txt"),
            say("wrote a"),  # human turn: 2 calls
            say("hello there"),  # the second chat: 1 call
            write("b.txt"),
            say("round 1"),  # goal round 1: 2 calls
            # Goal round 2: 1 call (a round that completes its goal ends at the next step).
            call("update_goal", {"status": "complete"}),
        ]
    )
    clock = Clock()
    async with rig_over(tmp_path, fake_openai, clock, max_goal_rounds=2) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-100))
        other = await engine.session_for_chat(chat(-200))
        await engine.user_message(sid, "write a", actor=OWNER, message_id="1")
        await settle(engine, sid)
        await engine.user_message(other, "hi", actor=OWNER, message_id="2")
        await settle(engine, other)
        await engine.command(sid, "goal", "write b", actor=OWNER)
        goal = await until_goal(rig, sid, lambda g: g.phase == "complete")

        recs = await records(rig, sid)
        assert len(recs) == 5 and not any(r.estimated for r in recs)
        assert all(
            (r.prompt_tokens, r.completion_tokens, r.cached_tokens) == (1200, 30, 200) for r in recs
        )
        usage = await engine.usage.session(sid)
        turns = [t.tokens for t in usage.turns.values()]
        assert turns == [2460, 2460, 1230]  # the human turn, round 1, round 2
        assert usage.total.tokens == 6150 and usage.total.calls == 5 and usage.total.cached == 1000
        assert usage.goal_tokens(goal.id) == 3690
        assert engine.usage.today().tokens == 7380 and engine.usage.today().calls == 6
        report = (await engine.command(sid, "usage", "", actor=OWNER)).reply or ""
        before = report
    assert "Today (UTC): 7,380 tokens (7,200 in, 180 out, 1,200 cached) in 6 calls" in before
    assert "This session: 6,150 tokens (6,000 in, 150 out, 1,000 cached) in 5 calls" in before
    assert "Goal (complete): 3,690 tokens, 3 calls, rounds 2/2" in before

    # A restart: the sums come back from the log, the same to the token.
    async with rig_over(tmp_path, fake_openai, clock) as rig:
        sid = await rig.engine.session_for_chat(chat(-100))
        assert rig.engine.usage.today().tokens == 7380
        usage = await rig.engine.usage.session(sid)
        assert usage.total.tokens == 6150 and usage.goal_tokens(goal.id) == 3690
        assert (await rig.engine.command(sid, "usage", "", actor=OWNER)).reply == before
        card = await rig.engine.goal_card(sid)
        assert card.tokens_used == 3690

    # The next UTC day starts from zero; the session's own sums stay.
    clock.now += 86_400
    async with rig_over(tmp_path, fake_openai, clock) as rig:
        sid = await rig.engine.session_for_chat(chat(-100))
        assert rig.engine.usage.today().tokens == 0
        assert (await rig.engine.usage.session(sid)).total.tokens == 6150


async def test_a_server_without_usage_gets_estimates_marked_as_such(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.usage = None
    fake_openai.play([write("a.txt"), say("wrote it")])
    async with rig_over(tmp_path, fake_openai, Clock()) as rig:
        sid = await rig.engine.session_for_chat(chat(-100))
        await rig.engine.user_message(sid, "write a", actor=OWNER, message_id="1")
        await settle(rig.engine, sid)
        first, second = await records(rig, sid)
        assert first.estimated and second.estimated
        # The first call of a session: a quarter of the request's characters.
        body = fake_openai.chat_requests[0]
        chars = request_chars(body["messages"], body["tools"])
        assert first.prompt_tokens == chars_to_tokens(chars) == first.prompt_estimate
        # The second: the first's prompt plus what the request grew by.
        assert second.prompt_tokens == first.prompt_tokens + chars_to_tokens(
            second.request_chars - first.request_chars
        )
        assert first.completion_tokens > 0 and second.completion_tokens == chars_to_tokens(8)
        report = (await rig.engine.command(sid, "usage", "", actor=OWNER)).reply or ""
        assert "in 2 calls, 2 estimated" in report
        assert "No prices set" in report


async def test_prices_give_the_cost(tmp_path: Path, fake_openai: FakeOpenAIServer) -> None:
    fake_openai.usage = FakeUsage(prompt_tokens=1_000_000, completion_tokens=500_000)
    fake_openai.play([say("expensive")])
    prices = UsageConfig(price_input=0.15, price_output=0.6)
    async with rig_over(tmp_path, fake_openai, Clock(), usage=prices) as rig:
        sid = await rig.engine.session_for_chat(chat(-100))
        await rig.engine.user_message(sid, "hi", actor=OWNER, message_id="1")
        await settle(rig.engine, sid)
        report = (await rig.engine.command(sid, "usage", "", actor=OWNER)).reply or ""
        assert "1,500,000 tokens (1,000,000 in, 500,000 out) in 1 call, $0.4500" in report


_NUMBERS = re.compile(r"used: ([\d,]+) of ([\d,]+), the next call needs about ([\d,]+)")


async def test_a_goal_budget_stops_before_the_call_that_would_cross_it_and_resumes(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.usage = FakeUsage(prompt_tokens=300, completion_tokens=50)
    fake_openai.play(
        [
            say("ready"),  # a human turn first: the session's calls have a known size
            *[step for n in range(1, 9) for step in (write(f"r{n}.txt"), say(f"round {n}"))],
        ]
    )
    async with rig_over(tmp_path, fake_openai, Clock()) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-100))
        await engine.user_message(sid, "get ready", actor=OWNER, message_id="1")
        await settle(engine, sid)
        reply = (await engine.command(sid, "goal", "write files --tokens 1k", actor=OWNER)).reply
        assert reply is not None and "budget 1,000 tokens" in reply
        goal = await until_goal(rig, sid, lambda g: g.phase == "blocked")
        assert goal.blocked is not None and goal.blocked.code == "budget-limit"
        assert goal.token_budget == 1000

        # Every call made started within the budget; the refused one would have crossed it.
        spent = 0
        for rec in [r for r in await records(rig, sid) if r.goal_id == goal.id]:
            assert spent + rec.prompt_estimate <= 1000
            spent += rec.prompt_tokens + rec.completion_tokens
        match = _NUMBERS.search(goal.blocked.message)
        assert match is not None, goal.blocked.message
        used, limit, estimate = (int(g.replace(",", "")) for g in match.groups())
        assert (used, limit) == (spent, 1000) and used + estimate > limit
        assert spent == 700  # round 1's two calls; round 2 was never admitted
        assert goal.rounds_started == 1
        calls_before = len(fake_openai.chat_requests)
        card = await engine.goal_card(sid)
        assert card.tokens_used == 700

        # Raise the budget, press Resume: the goal goes on.
        raised = await engine.command(sid, "goal", "budget 2k", actor=OWNER)
        assert raised.reply is not None and "Press Resume" in raised.reply
        goal = await engine.goals.get(sid)
        assert goal is not None and goal.phase == "blocked" and goal.token_budget == 2000
        outcome = await engine.press(
            sid, Press("g", "resume", goal.id[:8], goal.revision), actor="tg:1"
        )
        assert outcome.reply == "Goal resumed."  # every press is answered in words
        goal = await until_goal(rig, sid, lambda g: g.phase == "blocked" and g.rounds_started > 1)
        assert goal.blocked is not None and goal.blocked.code == "budget-limit"
        assert len(fake_openai.chat_requests) > calls_before
        # The same rule against the raised budget: every call started within 2,000.
        spent = 0
        for rec in [r for r in await records(rig, sid) if r.goal_id == goal.id]:
            assert spent + rec.prompt_estimate <= 2000
            spent += rec.prompt_tokens + rec.completion_tokens
        match = _NUMBERS.search(goal.blocked.message)
        assert match is not None, goal.blocked.message
        used, limit, estimate = (int(g.replace(",", "")) for g in match.groups())
        assert (used, limit) == (spent, 2000) and used + estimate > limit


async def test_the_daily_cap_refuses_the_next_turn_with_the_reset_time(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.usage = FakeUsage(prompt_tokens=3000, completion_tokens=50)
    fake_openai.play([say("one"), say("two")])
    clock = Clock()
    capped = UsageConfig(daily_tokens=5000)
    async with rig_over(tmp_path, fake_openai, clock, usage=capped) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-100))
        await engine.user_message(sid, "first", actor=OWNER, message_id="1")
        await settle(engine, sid)
        assert engine.usage.today().tokens == 3050
        await engine.user_message(sid, "second", actor=OWNER, message_id="2")
        await settle(engine, sid)
        assert len(fake_openai.chat_requests) == 1  # the second call was never made
        refused = rig.channel.of("reply")[-1].args["text"]
        assert refused.startswith("Daily token cap reached: 3,050 of 5,000 used today")
        assert "resets at 00:00 UTC (in 12h 00m)" in refused and "/usage cap" in refused
        # The message itself is in the log: nothing the owner said is lost.
        texts = [
            s.event.text
            for s in await rig.storage.log.read(sid, types={"user/message"})
            if isinstance(s.event, UserMessage)
        ]
        assert texts == ["first", "second"]

        bad = await engine.command(sid, "usage", "cap lots", actor=OWNER)
        assert bad.reply is not None and bad.reply.startswith("usage: /usage")
        raised = await engine.command(sid, "usage", "cap 2m", actor=OWNER)
        assert raised.reply is not None and "2,000,000" in raised.reply
        await engine.user_message(sid, "third", actor=OWNER, message_id="3")
        await settle(engine, sid)
        assert len(fake_openai.chat_requests) == 2
        assert rig.channel.of("reply")[-1].args["text"].startswith("two")

    async with rig_over(tmp_path, fake_openai, clock, usage=capped) as rig:
        assert rig.engine.usage.daily_cap == 2_000_000  # the raised cap was logged


async def test_the_daily_cap_blocks_a_goal_round_before_it_is_admitted(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.usage = FakeUsage(prompt_tokens=3000, completion_tokens=50)
    fake_openai.play([say("one")])
    async with rig_over(
        tmp_path, fake_openai, Clock(), usage=UsageConfig(daily_tokens=5000)
    ) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-100))
        await engine.user_message(sid, "first", actor=OWNER, message_id="1")
        await settle(engine, sid)
        await engine.command(sid, "goal", "keep going", actor=OWNER)
        goal = await until_goal(rig, sid, lambda g: g.phase == "blocked")
        assert goal.blocked is not None and goal.blocked.code == "budget-limit"
        assert "daily token cap (5,000) is reached" in goal.blocked.message
        assert goal.rounds_started == 0 and len(fake_openai.chat_requests) == 1


async def test_the_last_of_several_caps_stands_after_a_restart(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    clock = Clock()
    capped = UsageConfig(daily_tokens=5000)
    async with rig_over(tmp_path, fake_openai, clock, usage=capped) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-100))
        other = await engine.session_for_chat(chat(-200))
        for session, cap in ((sid, "1m"), (other, "3m"), (sid, "2m")):
            clock.now += 1
            assert "Daily token cap set" in (
                (await engine.command(session, "usage", f"cap {cap}", actor=OWNER)).reply or ""
            )
        clock.now += 1
        # Later commands of other names, one even carrying a cap: none of them is a cap.
        await rig.storage.log.append(
            other,
            [
                CommandRun(name="usage", args="cap 9m", data={"cap": 9_000_000}),
                CommandRun(name="note", data={"name": "usage_cap", "cap": 8_000_000}),
            ],
        )
        await engine.command(other, "usage", "", actor=OWNER)
        assert engine.usage.daily_cap == 2_000_000
    async with rig_over(tmp_path, fake_openai, clock, usage=capped) as rig:
        assert rig.engine.usage.daily_cap == 2_000_000


async def test_without_a_cap_logged_the_configured_one_stands_after_a_restart(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    clock = Clock()
    capped = UsageConfig(daily_tokens=5000)
    async with rig_over(tmp_path, fake_openai, clock, usage=capped) as rig:
        sid = await rig.engine.session_for_chat(chat(-100))
        await rig.engine.command(sid, "usage", "", actor=OWNER)
        await rig.engine.command(sid, "usage", "cap lots", actor=OWNER)  # refused, not logged
        await rig.storage.log.append(sid, [CommandRun(name="usage", data={"cap": 9_000_000})])
    async with rig_over(tmp_path, fake_openai, clock, usage=capped) as rig:
        assert rig.engine.usage.daily_cap == 5000
    async with rig_over(tmp_path, fake_openai, clock) as rig:
        assert rig.engine.usage.daily_cap is None
