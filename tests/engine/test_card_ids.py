"""A card id Telegram returns is kept for the plan it was sent for, even when that plan ends
while the card is in flight (the id must not be lost to the window in which the plan service
has archived the plan but is still delivering the change)."""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Sequence
from pathlib import Path

from engine.events import SessionEvent, StoredEvent
from engine.model.scripted import ScriptedProvider
from engine.plan.machine import TaskSpec
from engine.ports import EventLog
from tests.engine.helpers import engine_rig
from tests.keys import chat


class GoalAppendGate:
    """The real log; once armed, the next append of a ``goal/change`` waits for ``release``
    (the task goal being cleared after the last task completed)."""

    def __init__(self, inner: EventLog) -> None:
        self.inner = inner
        self.armed = False
        self.held = asyncio.Event()
        self.release = asyncio.Event()

    async def append(self, session_id: str, events: Sequence[SessionEvent]) -> list[StoredEvent]:
        if self.armed and any(e.type == "goal/change" for e in events):
            self.armed = False
            self.held.set()
            await self.release.wait()
        return await self.inner.append(session_id, events)

    async def read(
        self, session_id: str, *, after_seq: int = 0, types: Collection[str] | None = None
    ) -> list[StoredEvent]:
        return await self.inner.read(session_id, after_seq=after_seq, types=types)

    async def needs_attention(self) -> list[str]:
        return await self.inner.needs_attention()


async def test_a_plan_archived_while_its_card_is_sent_keeps_the_new_card_id(
    tmp_path: Path,
) -> None:
    gates: list[GoalAppendGate] = []

    def wrap(inner: EventLog) -> EventLog:
        gates.append(GoalAppendGate(inner))
        return gates[-1]

    async with engine_rig(tmp_path, ScriptedProvider([]), wrap_log=wrap) as rig:
        engine, gate = rig.engine, gates[-1]
        sid = await engine.session_for_chat(chat(-100))
        plans = engine.plans
        task = TaskSpec(title="Only task", acceptance_criteria=("it works",))
        made = await plans.init(sid, title="One", tasks=[task], workspace=rig.workspace)
        assert made.ok and made.plan_id is not None
        assert (await plans.start(sid, None)).ok
        goal = await engine.goals.get(sid)
        assert goal is not None and goal.source == "task"  # cleared when the plan ends
        await engine.set_plan_flow(
            sid, chat_id="tg:-100", thread_id=None, card_id="10", plan_id=made.plan_id
        )

        gate.armed = True
        finishing = asyncio.create_task(plans.complete(sid, None, "done"))
        await asyncio.wait_for(gate.held.wait(), 10)
        # The plan is archived; its change is not delivered yet. The card sent meanwhile
        # comes back with its id now.
        assert await plans.current(sid) is None
        await engine.set_plan_flow(
            sid, chat_id="tg:-100", thread_id=None, card_id="20", plan_id=made.plan_id
        )
        gate.release.set()
        assert (await asyncio.wait_for(finishing, 10)).ok

        card = await engine.plan_card(sid)
        assert card.state == "done" and card.sidecar is not None
        assert card.sidecar.id == made.plan_id
        assert card.sidecar.flow.card_id == "20"  # the final drawing edits the card on screen
        # A later, unrelated plan does not inherit it.
        again = await plans.init(sid, title="Two", tasks=[task], workspace=rig.workspace)
        assert again.ok
        fresh = (await engine.plan_card(sid)).sidecar
        assert fresh is not None and fresh.id != made.plan_id and fresh.flow.card_id is None
