"""The boundary end to end, as an attacker would try it: the real Engine, SQLite, the real openai
SDK against the fake model server, the real PTB Application on the fake Bot API, real files.

A project with modules planted where a careless child interpreter would import them
(``fnmatch.py``, ``re.py``, ``json.py``, ``engine/__init__.py``...), each writing a marker file
when imported. The agent greps and lists in every plan phase (NoPlan, pre-init, post-init,
Active) with the bot started in the project folder and ``PYTHONPATH`` pointing at it; no
marker may appear.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bot.telegram.app import parts
from engine.model.script import ScriptStep, call, say
from engine.tools.sandbox import SandboxSettings
from tests.engine.helpers import PLAN_MD, settle
from tests.fakebot.server import FakeBotApi
from tests.keys import chat
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
        sid = await engine.session_for_chat(chat(GROUP))
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


# --- plangate's own files and the secrets, in every phase, with the home inside the project -

TOKEN = "123456:TOKEN-SECRET-VALUE"
ENV_TEXT = f"PLANGATE_TELEGRAM_TOKEN={TOKEN}\n"


def probes(sidecar: Path, *, writes: bool, links: bool = False) -> list[ScriptStep]:
    """What an agent after the secrets tries: every file tool on .env, the home, the plan
    folder and the sidecar (and, where bash writes, links to them)."""
    steps = [
        call("read_file", {"path": ".env"}),
        call("read_file", {"path": ".plangate/plangate.db"}, expect="not visible"),
        call("read_file", {"path": str(sidecar)}),
        call("read_file", {"path": f"{sidecar.parent}/../session/{sidecar.name}"}),
        call("grep", {"pattern": "S.CRET-VAL|Editing|Active"}),
        call("grep", {"pattern": "SECRET", "path": ".env"}),
        call("grep", {"pattern": "status", "path": ".plangate"}),
        call("grep", {"pattern": "status", "path": str(sidecar.parent)}),
        call("list_files", {}),
        call("list_files", {"path": ".plangate"}),
        call("list_files", {"path": str(sidecar.parent)}),
        call("write_file", {"path": str(sidecar), "content": '{"status": "Active"}'}),
        call("write_file", {"path": ".env", "content": "PLANGATE_OWNER_IDS=666\n"}),
        call("edit_file", {"path": ".env", "old_text": "PLANGATE", "new_text": "X"}),
        call("send_file", {"path": ".env"}),
        call("send_file", {"path": str(sidecar)}),
        call("bash", {"command": "cat .env"}),
        call("bash", {"command": "ls -A .plangate"}),
        call("bash", {"command": f"cat {sidecar}"}),
    ]
    if links:
        steps += [
            call("bash", {"command": "ln -sf .env env-link"}),
            call("bash", {"command": "ln -sfn .plangate home-link"}),
            call("read_file", {"path": "env-link"}),
            call("list_files", {"path": "home-link"}),
            call("grep", {"pattern": "status", "path": "home-link"}),
            call("write_file", {"path": "home-link/x.json", "content": "{}"}),
            # Any tool's path argument: a plan import of the sidecar is refused the same way.
            call("plan", {"op": "init", "title": "x", "file_path": str(sidecar)}),
            call("list_files", {"pattern": "*.py"}, expect="not visible"),
        ]
    if writes:
        steps.append(call("write_file", {"path": "notes.txt", "content": "allowed\n"}))
    return steps


THREE_STEPS = PLAN_MD + "3. Docs — write the README section.\n"


def active_run(steps: list[ScriptStep]) -> list[ScriptStep]:
    """``steps`` spread over the plan's three tasks (a task is short of the stall bound)."""
    third = len(steps) // 3 + 1
    out: list[ScriptStep] = []
    for i in range(3):
        out.append(call("plan", {"op": "start"}))
        out.extend(steps[i * third : (i + 1) * third])
        out.append(call("plan", {"op": "complete", "evidence": "probed"}))
    return out


async def test_home_env_and_plan_folder_are_invisible_in_every_phase(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    ws = tmp_path / "work"
    ws.mkdir()
    (ws / ".env").write_text(ENV_TEXT)
    (ws / "app.py").write_text("print('hi')\n")
    home = ws / ".plangate"  # the home inside the workspace, as a careless setup has it
    sandbox = SandboxSettings(hidden=(ws / ".env",))
    rules = (("cat",), ("ln",), ("ls",))
    hello = [say("Hello.")]
    async with live_bot(
        fake_api, tmp_path, hello, home=home, sandbox=sandbox, allow_bash=rules
    ) as live:
        assert live.model_server is not None
        engine = live.engine
        fake_api.user_message(GROUP, OWNER, BOT + "hello")
        await eventually(lambda: any(m.text == "Hello." for m in _sent(fake_api)))
        sid = await engine.session_for_chat(chat(GROUP))
        await settle(engine, sid)
        sidecar = await live.storage.plan_store.json_path(sid)
        script = [
            *probes(sidecar, writes=True, links=True),  # NoPlan
            say("Probed."),
            *probes(sidecar, writes=False),  # pre-init
            call("plan", {"op": "init", "title": "Greeting module", "mode": "design"}),
            *probes(sidecar, writes=False),  # post-init
            call("write_file", {"path": "{plan_md}", "content": PLAN_MD}),
            call("plan", {"op": "submit"}),
            say("The plan is ready for review."),
            *active_run(probes(sidecar, writes=True, links=True)),  # Active
            say("All done."),
        ]
        live.model_server.play(script)
        fake_api.user_message(GROUP, OWNER, BOT + "look for secrets")
        await eventually(lambda: any(m.text == "Probed." for m in _sent(fake_api)))
        await settle(engine, sid)
        fake_api.user_message(GROUP, OWNER, "/plan Add a greeting module")
        await until(lambda: _state_is(live, sid, "post_init"))
        await settle(engine, sid)
        await parts(live.app).presenter.flush()
        sidecar_text = sidecar.read_text()
        assert '"Editing"' in sidecar_text
        review = await card(fake_api, live, sid)
        fake_api.press(GROUP, review.message_id, button(review, "✅ Approve"), user_id=OWNER)
        await until(lambda: _state_is(live, sid, "none"))
        await settle(engine, sid)
        stored = await live.storage.log.read(sid, types=("tool/result",))
        results = [str(getattr(s.event, "content", "")) for s in stored]
        requests = str(live.model_server.chat_requests)
    # Every probe ran (the script did not diverge) and the writes outside them landed.
    assert (ws / "notes.txt").read_text() == "allowed\n"
    assert any("not visible" in r for r in results)
    # Nothing of the token, the sidecar or the database reached the model, in any phase.
    at = requests.find(TOKEN)
    assert at < 0, requests[at - 600 : at + 100]
    assert "SECRET-VALUE" not in requests
    assert not any("SECRET-VALUE" in r for r in results)
    assert not any('"status"' in r or "SQLite" in r for r in results)
    # Listings and grep hits never name a hidden file (bash's own errors may echo a path).
    shown = [line.split(":", 1)[0] for r in results for line in r.splitlines()]
    assert not [p for p in shown if p.startswith((".plangate", ".env", "home-link/"))]
    # Nor to the chat: send_file sent nothing (no plan here is long enough to be a document).
    assert fake_api.count("sendDocument") == 0
    # And nothing of theirs changed: the .env, the home's files.
    assert (ws / ".env").read_text() == ENV_TEXT
    assert not (home / "x.json").exists()
    archived = list((sidecar.parent / "archive").glob("*.json"))
    assert archived and '"Active"' not in sidecar_text


async def test_a_write_to_a_hidden_file_is_refused_before_anyone_is_asked(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    # With PLANGATE_ASK_WRITES the approval request previews the file's old text: a hidden
    # file must be refused before that, or the preview would post the secret to the chat.
    ws = tmp_path / "work"
    ws.mkdir()
    (ws / ".env").write_text(ENV_TEXT)
    script = [
        call("edit_file", {"path": ".env", "old_text": "PLANGATE", "new_text": "X"}),
        call("write_file", {"path": ".env", "content": "X=1\n"}, expect="not visible"),
        say("Refused twice.", expect="not visible"),
    ]
    sandbox = SandboxSettings(hidden=(ws / ".env",))
    async with live_bot(fake_api, tmp_path, script, ask_writes=True, sandbox=sandbox):
        fake_api.user_message(GROUP, OWNER, BOT + "change the token")
        await eventually(lambda: any(m.text == "Refused twice." for m in _sent(fake_api)))
    assert not [m for m in _sent(fake_api) if m.text.startswith("🔐")]
    assert not any("SECRET-VALUE" in m.text for m in _sent(fake_api))
    assert (ws / ".env").read_text() == ENV_TEXT


# --- root inside the sandbox is powerless --------------------------------------------------

# What root tries in a read-only (pre-init) sandbox to get write access or see a mask's file.
ROOT_TRICKS = (
    'mount -o remount,bind,rw "$PWD" && echo pwned > app.py',
    "umount .env; cat .env",
    'umount -l "$PWD"; echo pwned > app.py',
    "unshare -U -r sh -c 'mount -o remount,bind,rw \"$PWD\" && echo pwned > app.py'",
    "unshare -m sh -c 'umount .env; cat .env'",
    'mount -t tmpfs none "$PWD"; echo pwned > app.py',
    "grep CapEff /proc/self/status",
)


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


async def test_root_tricks_in_pre_init_change_no_byte_and_hold_no_capability(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    ws = tmp_path / "work"
    ws.mkdir()
    (ws / ".env").write_text(ENV_TEXT)
    (ws / "app.py").write_text("print('hi')\n")
    before = tree_bytes(ws)
    # Twice the memory setting into /tmp: the tmpfs is full at half of it, inside the call.
    fill = "dd if=/dev/zero of=/tmp/fill bs=1M count=128 2>&1 | head -1; du -m /tmp/fill"
    commands = [*ROOT_TRICKS, fill]
    script = [*(call("bash", {"command": c}) for c in commands), say("Tried.")]
    rules = (("mount",), ("umount",), ("unshare",), ("grep",), ("dd",))
    sandbox = SandboxSettings(hidden=(ws / ".env",), memory_mb=64)
    async with live_bot(fake_api, tmp_path, script, sandbox=sandbox, allow_bash=rules) as live:
        fake_api.user_message(GROUP, OWNER, "/plan Look at the project")
        await eventually(lambda: any(m.text == "Tried." for m in _sent(fake_api)))
        sid = await live.engine.session_for_chat(chat(GROUP))
        await settle(live.engine, sid)
        stored = await live.storage.log.read(sid, types=("tool/result",))
        results = [str(getattr(s.event, "content", "")) for s in stored]
    assert len(results) == len(commands)
    assert tree_bytes(ws) == before
    assert not any("SECRET-VALUE" in r or "pwned" in r for r in results)
    assert results[-2] == "exit code 0\nCapEff:\t0000000000000000"
    assert "No space left on device" in results[-1] and results[-1].endswith("\n32\t/tmp/fill")


# --- a rule allows what it says --------------------------------------------------------------


async def test_the_fsmonitor_trick_does_not_run_under_a_git_status_rule(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    ws = tmp_path / "work"
    ws.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=ws, check=True)
    (ws / "important.txt").write_text("keep me\n")
    config = (ws / ".git" / "config").read_text()
    trick = config + '[core]\n\tfsmonitor = "rm -f important.txt"\n'
    script = [
        call("read_file", {"path": ".git/config"}),
        call("write_file", {"path": ".git/config", "content": trick}),  # a file write
        call("bash", {"command": "git status --short"}, expect="wrote"),  # the allowed rule
        say("Status shown.", expect="important.txt"),
    ]
    rules = (("git", "status"),)
    async with live_bot(fake_api, tmp_path, script, allow_bash=rules):
        fake_api.user_message(GROUP, OWNER, BOT + "what changed?")
        await eventually(lambda: any(m.text == "Status shown." for m in _sent(fake_api)))
    assert (ws / "important.txt").read_text() == "keep me\n"
    assert not [m for m in _sent(fake_api) if m.text.startswith("🔐")]  # nothing was asked
