"""Projects per chat and per forum topic, through the real Application and the real engine.

The fake Bot API on loopback, real SQLite and plan files, the real openai SDK against the fake
chat-completions server; each project is a real folder, and the agent's tools are asked what
they see there.
"""

from __future__ import annotations

from pathlib import Path

from engine.events import CommandRun
from engine.model.script import call, say
from tests.fakebot.server import FakeBotApi, FakeMessage
from tests.keys import chat, person
from tests.telegram.app_support import GROUP, OWNER, STRANGER, eventually
from tests.telegram.live import live_bot


def _in_topic(api: FakeBotApi, topic: int) -> list[FakeMessage]:
    return [m for m in api.bot_messages(GROUP) if m.thread_id == topic]


async def _reply(api: FakeBotApi, text: str, *, topic: int, user: int = OWNER) -> str:
    before = len(_in_topic(api, topic))
    api.user_message(GROUP, user, text, thread_id=topic)
    await eventually(lambda: len(_in_topic(api, topic)) > before)
    return _in_topic(api, topic)[-1].text


async def test_a_topic_bound_to_another_project_works_there_and_keeps_it(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "only_in_other.txt").write_text("x\n", encoding="utf-8")
    script = [
        call("list_files", {"path": "."}),
        say("I see only_in_other.txt.", expect="only_in_other.txt"),
    ]
    projects = (("other", other),)
    async with live_bot(fake_api, tmp_path, script, projects=projects) as live:
        engine = live.engine
        shown = await _reply(fake_api, "/project", topic=7)
        assert shown.startswith(f"Project: default ({live.workspace.resolve()})")
        assert "Others: other." in shown
        refused = await _reply(fake_api, "/project nowhere", topic=7)
        assert refused == "No project named 'nowhere'. Projects: default, other."
        # A path is not a name: nothing outside the list can be bound.
        refused = await _reply(fake_api, f"/project {tmp_path}", topic=7)
        assert refused.startswith("No project named")
        before = await engine.session_for_chat(chat(GROUP, 7))
        # A member's /project is refused by the gate and binds nothing.
        await _reply(fake_api, "/project other", topic=7, user=STRANGER)
        assert await engine.session_for_chat(chat(GROUP, 7)) == before
        bound = await _reply(fake_api, "/project other", topic=7)
        assert bound.startswith(f"Now working in project other ({other.resolve()})")
        fresh = await engine.session_for_chat(chat(GROUP, 7))
        assert fresh != before
        # The agent in that topic sees the other project's files...
        said = await _reply(fake_api, "@plangate_test_bot what is here?", topic=7)
        assert said.startswith("I see only_in_other.txt.")
        # ...and the topic next to it is still in the default project.
        assert (await _reply(fake_api, "/project", topic=9)).startswith("Project: default")
        events = [e.event for e in await live.storage.log.read(fresh)]
        logged = [e for e in events if isinstance(e, CommandRun) and e.name == "project"]
        assert [(e.args, e.actor, e.data["path"]) for e in logged] == [
            ("other", person(OWNER), str(other.resolve()))
        ]
        # /new in the topic stays in its project.
        await _reply(fake_api, "/new", topic=7)
        assert (await _reply(fake_api, "/project", topic=7)).startswith("Project: other")
    # The binding survives a restart: a new process, the same home.
    async with live_bot(fake_api, tmp_path, [], projects=projects):
        assert (await _reply(fake_api, "/project", topic=7)).startswith("Project: other")
        assert (await _reply(fake_api, "/project", topic=9)).startswith("Project: default")
    # A project dropped from the settings is never used again: the topic is back in default.
    async with live_bot(fake_api, tmp_path, []):
        assert (await _reply(fake_api, "/project", topic=7)).startswith("Project: default")


async def test_project_is_refused_while_a_plan_is_live(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    script = [say("Exploring first.")]
    async with live_bot(fake_api, tmp_path, script, projects=(("other", other),)) as live:
        await _reply(fake_api, "/plan look around", topic=3)
        sid = await live.engine.session_for_chat(chat(GROUP, 3))
        await eventually(lambda: any("Exploring" in m.text for m in _in_topic(fake_api, 3)))
        refused = await _reply(fake_api, "/project other", topic=3)
        assert refused.startswith("A plan is live in project default")
        assert await live.engine.session_for_chat(chat(GROUP, 3)) == sid
        assert await live.engine.plans.state(sid) == "pre_init"


async def test_a_new_topic_starts_in_its_groups_project(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    async with live_bot(fake_api, tmp_path, [], projects=(("other", other),)):
        fake_api.user_message(GROUP, OWNER, "/project other")
        await eventually(
            lambda: any(m.text.startswith("Now working") for m in fake_api.bot_messages(GROUP))
        )
        assert (await _reply(fake_api, "/project", topic=11)).startswith("Project: other")
