"""The whole plan flow through the engine, with the real openai SDK on loopback.

The fake chat-completions server plays a script of tool calls; the files are really written
in a temporary workspace, the log is a real SQLite file.
"""

from __future__ import annotations

from pathlib import Path

from engine.api import Press
from engine.events import CommandRun, PlanChanged, UserMessage
from engine.model.openai_provider import OpenAIProvider
from tests.engine.helpers import (
    EXECUTION,
    GREET_PY,
    PLAN_MD,
    PLANNING,
    TEST_PY,
    engine_rig,
    settle,
)
from tests.fakes.openai_server import FAKE_MODEL, FakeOpenAIServer
from tests.keys import chat


async def test_plan_approve_execute_archive_over_the_openai_sdk(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.play([*PLANNING, *EXECUTION])
    model = OpenAIProvider(FAKE_MODEL, base_url=fake_openai.base_url, api_key="test-key")
    async with engine_rig(tmp_path, model) as rig:
        engine = rig.engine
        sid = await engine.session_for_chat(chat(-100))

        outcome = await engine.command(sid, "plan", "Add a greeting module", actor="tg:1")
        assert outcome.plan_card == "restick"
        await settle(engine, sid)

        # Post-init Editing: only the .md was written, the card is in review.
        assert await engine.plans.state(sid) == "post_init"
        assert not (rig.workspace / "greet.py").exists()
        card = await engine.plan_card(sid)
        assert card.state == "review"
        assert card.sidecar is not None
        md_path = await engine.plans.md_path(sid)
        assert md_path.read_text() == PLAN_MD

        outcome = await engine.press(
            sid, Press("p", "approve", card.sidecar.id[:8], card.sidecar.revision), actor="tg:1"
        )
        assert outcome.reply is not None and outcome.reply.startswith("Approved")
        await settle(engine, sid)

        assert (rig.workspace / "greet.py").read_text() == GREET_PY
        assert (rig.workspace / "test_greet.py").read_text() == TEST_PY
        assert await engine.plans.state(sid) == "none"
        done = await engine.plan_card(sid)
        assert done.state == "done" and done.ended == "completed"
        assert done.sidecar is not None
        assert [t.status for t in done.sidecar.tasks] == ["completed", "completed"]
        assert [t.evidence for t in done.sidecar.tasks] == [
            "greet.py written",
            "test_greet.py prints ok",
        ]
        archive = list((md_path.parent / "archive").iterdir())
        assert any(p.suffix == ".json" for p in archive)
        assert any(p.suffix == ".md" for p in archive)

        replies = [c.args["text"] for c in rig.channel.of("reply")]
        assert replies == ["The plan is ready for review.", "All done: greet.py and its test."]

        events = [e.event for e in await rig.storage.log.read(sid)]
        commands = [e.name for e in events if isinstance(e, CommandRun)]
        assert commands[:2] == ["plan", "approve"]
        statuses = [e.status for e in events if isinstance(e, PlanChanged)]
        assert statuses[0] == "pre_init" and "active" in statuses and statuses[-1] == "none"
        sources = [e.source.kind for e in events if isinstance(e, UserMessage)]
        assert sources == ["human", "seed"]
        await model.aclose()
