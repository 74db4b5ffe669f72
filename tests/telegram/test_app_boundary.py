"""The boundary end to end, as an attacker would try it: the real Engine, SQLite, the real openai
SDK against the fake model server, the real PTB Application on the fake Bot API, real files.

A project with modules planted where a careless child interpreter would import them
(``fnmatch.py``, ``re.py``, ``json.py``, ``engine/__init__.py``...), each writing a marker file
when imported. The agent greps and lists in every plan phase (NoPlan, pre-init, post-init,
Active) with the bot started in the project folder and ``PYTHONPATH`` pointing at it; no
marker may appear.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.app import parts
from engine.model.script import ScriptStep, call, say
from tests.engine.helpers import PLAN_MD, settle
from tests.fakebot.server import FakeBotApi
from tests.telegram.app_support import GROUP, OWNER, eventually
from tests.telegram.live import button, card, live_bot, until

# Modules a Python started in (or with a path to) the project would import before its own.
PLANTED = (
    "fnmatch.py",
    "re.py",
    "json.py",
    "os.py",
    "stat.py",
    "pathlib.py",
    "typing.py",
    "sitecustomize.py",
    "usercustomize.py",
    "engine/__init__.py",
    "engine/tools/__init__.py",
    "engine/tools/search.py",
)
BOT = "@plangate_test_bot "


def plant(workspace: Path, markers: Path) -> None:
    """Each planted module writes ``markers/<its path>`` when it is imported (no imports of its
    own, so it works even as ``os.py``)."""
    markers.mkdir()
    for rel in PLANTED:
        path = workspace / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        marker = markers / rel.replace("/", "__")
        path.write_text(f"open({str(marker)!r}, 'w').write('ran')\nNEEDLE = 'planted'\n")


def explore(note: str | None = None) -> list[ScriptStep]:
    """What an agent does before it writes: greps and listings, a read."""
    return [
        call("grep", {"pattern": "NEEDLE"}, expect=note),
        call("grep", {"pattern": "open", "glob": "*.py"}),
        call("list_files", {"pattern": "**/*.py"}),
        call("grep", {"pattern": "planted", "path": "engine"}),
        call("read_file", {"path": "re.py"}),
    ]


PLAN_STEPS = [
    *explore(),
    call("plan", {"op": "init", "title": "Greeting module", "mode": "design"}),
    *explore("Design plan created"),
    call("write_file", {"path": "{plan_md}", "content": PLAN_MD}),
    call("plan", {"op": "submit"}),
    say("The plan is ready for review."),
]
RUN_STEPS = [
    call("plan", {"op": "start"}),
    *explore(),
    call("write_file", {"path": "greet.py", "content": "def hello(name):\n    return name\n"}),
    call("plan", {"op": "complete", "evidence": "greet.py written"}),
    call("plan", {"op": "start"}),
    call("grep", {"pattern": "def hello"}),
    call("write_file", {"path": "test_greet.py", "content": "import greet\n"}),
    call("plan", {"op": "complete", "evidence": "test written"}),
    say("All done."),
]


async def test_planted_modules_never_run_during_grep_in_any_phase(
    fake_api: FakeBotApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    markers = tmp_path / "markers"
    script = [*explore("look"), say("Looked around."), *PLAN_STEPS, *RUN_STEPS]
    async with live_bot(fake_api, tmp_path, script) as live:
        ws = live.workspace
        plant(ws, markers)
        # The bot as the image starts it: in the project folder, which Python would put
        # first on the import path, and a PYTHONPATH that names it as well.
        monkeypatch.chdir(ws)
        monkeypatch.setenv("PYTHONPATH", str(ws))
        monkeypatch.setenv("PYTHONSTARTUP", str(ws / "re.py"))
        engine = live.engine

        fake_api.user_message(GROUP, OWNER, BOT + "look around")  # NoPlan
        await eventually(lambda: any(m.text == "Looked around." for m in _sent(fake_api)))
        sid = await engine.session_for_chat(GROUP, 0)
        await settle(engine, sid)

        fake_api.user_message(GROUP, OWNER, "/plan Add a greeting module")  # pre- and post-init
        await until(lambda: _state_is(live, sid, "post_init"))
        await settle(engine, sid)
        await parts(live.app).presenter.flush()
        review = await card(fake_api, live, sid)
        fake_api.press(GROUP, review.message_id, button(review, "✅ Approve"), user_id=OWNER)
        await until(lambda: _state_is(live, sid, "none"))  # Active, run to done, archived
        await settle(engine, sid)

        stored = await live.storage.log.read(sid, types=("tool/result",))
        greps = [s.event for s in stored if "NEEDLE = 'planted'" in getattr(s.event, "content", "")]
    # Each phase's grep found the planted text (so the search really ran over them)...
    assert len(greps) >= 3
    # ...and not one planted module was imported by anything plangate started.
    assert sorted(p.name for p in markers.iterdir()) == []


def _sent(api: FakeBotApi) -> list:  # type: ignore[type-arg]
    return api.bot_messages(GROUP)


async def _state_is(live, sid: str, state: str) -> bool:  # type: ignore[no-untyped-def]
    return await live.engine.plans.state(sid) == state
