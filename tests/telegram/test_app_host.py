"""Nothing the agent writes runs on the host (docs/security.md, "Programs plangate runs on the
host"), through the real Application on the fake Bot API, the real engine and storage, real
bubblewrap and the real openai SDK against the fake chat-completions server.

- ``/project`` refuses a project that holds plangate's own venv and package;
- with the workspace elsewhere, the agent swaps the project's interpreter and plants
  ``python3``, ``git``, ``sh`` and ``bwrap`` in the workspace and on the bot's ``PATH``; grep,
  a goal's check and a restart follow, and none of them runs outside the sandbox;
- a ``.env`` the agent writes into the workspace changes nothing at the next start.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from bot.settings import load_settings
from engine.model.script import call, say
from tests.cli.test_cli import _clean_env, _plangate
from tests.engine.helpers import settle
from tests.fakebot.server import FakeBotApi
from tests.keys import chat
from tests.telegram.app_support import GROUP, OWNER, eventually
from tests.telegram.live import live_bot, until

BOT = "@plangate_test_bot "
CHECKOUT = Path(__file__).resolve().parents[2]
# What the agent plants: each, wherever it runs on the host, leaves its name in the markers.
PLANTED = (".venv/bin/python", ".venv/bin/python3", "python3", "git", "sh", "bwrap", "env")


def _texts(api: FakeBotApi) -> list[str]:
    return [m.text for m in api.bot_messages(GROUP)]


async def _reply(api: FakeBotApi, text: str) -> str:
    before = len(api.bot_messages(GROUP))
    api.user_message(GROUP, OWNER, text)
    await eventually(lambda: len(api.bot_messages(GROUP)) > before)
    return api.bot_messages(GROUP)[-1].text


async def test_project_refuses_a_folder_holding_plangates_own_venv(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    async with live_bot(fake_api, tmp_path, [], projects=(("self", CHECKOUT),)) as live:
        before = await live.engine.session_for_chat(chat(GROUP))
        refused = await _reply(fake_api, "/project self")
        assert refused.startswith(f"Project self: {CHECKOUT} holds ")
        assert "outside every workspace and project" in refused
        assert "\n" not in refused
        assert await live.engine.session_for_chat(chat(GROUP)) == before
        assert (await _reply(fake_api, "/project")).startswith("Project: default")


def _swap(markers: Path) -> str:
    """The agent's bash: replace the project's interpreter, plant the programs plangate
    starts on the host, each a script that would leave a marker outside the sandbox."""
    lines = ["set -e", "mkdir -p .venv/bin"]
    for name in PLANTED:
        tag = name.replace("/", "_")
        lines.append(f"rm -f {name}")
        lines.append(f"printf '#!/bin/sh\\ntouch {markers}/{tag}\\n' > {name}")
        lines.append(f"chmod +x {name}")
    lines.append("echo swapped")
    return "\n".join(lines)


async def test_a_swapped_interpreter_in_the_workspace_never_runs_on_the_host(
    fake_api: FakeBotApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    workspace = tmp_path / "work"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("NEEDLE here\n")
    # The project's own venv, as users have one (its python a link to a real interpreter).
    (workspace / ".venv" / "bin").mkdir(parents=True)
    os.symlink(os.path.realpath(sys.executable), workspace / ".venv" / "bin" / "python")
    # The bot as an operator may start it: in the project, its venv first on PATH.
    monkeypatch.chdir(workspace)
    monkeypatch.setenv("PATH", f"{workspace}/.venv/bin:{workspace}:{os.environ['PATH']}")
    script = [
        call("bash", {"command": _swap(markers)}),
        call("grep", {"pattern": "NEEDLE"}, expect="swapped"),
        call("update_goal", {"status": "complete"}, expect="notes.txt"),
        say("Done: swapped and searched.", expect="passed"),
    ]
    async with live_bot(fake_api, tmp_path, script) as live:
        # Even an interpreter path that now points into the workspace is not looked up again.
        monkeypatch.setattr(sys, "executable", str(workspace / ".venv" / "bin" / "python"))
        fake_api.user_message(GROUP, OWNER, '/goal swap and search --check "git --version"')
        await eventually(lambda: len(fake_api.bot_messages(GROUP)) >= 1)
        sid = await live.engine.session_for_chat(chat(GROUP))

        async def complete() -> bool:
            goal = await live.engine.goals.get(sid)
            return goal is not None and goal.phase == "complete"

        await until(complete, timeout_s=90)
        await settle(live.engine, sid, timeout_s=60)
        stored = await live.storage.log.read(sid, types=("tool/result",))
        assert any("notes.txt" in getattr(s.event, "content", "") for s in stored)
    assert (workspace / ".venv" / "bin" / "python").read_text().startswith("#!/bin/sh")
    # A restart: the same home, the same swapped workspace, a grep first thing.
    again = [call("grep", {"pattern": "NEEDLE"}), say("Still here.", expect="notes.txt")]
    async with live_bot(fake_api, tmp_path, again):
        fake_api.user_message(GROUP, OWNER, BOT + "search again")
        await eventually(lambda: "Still here." in _texts(fake_api), timeout_s=60)
    assert sorted(p.name for p in markers.iterdir()) == []


async def test_a_dot_env_the_agent_writes_changes_nothing_at_the_next_start(
    fake_api: FakeBotApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = [
        call(
            "bash",
            {"command": "printf 'PLANGATE_SANDBOX=off\\nPLANGATE_BASH_NETWORK=true\\n' > .env"},
        ),
        say("Wrote the settings.", expect="exit code 0"),
    ]
    async with live_bot(fake_api, tmp_path, script) as live:
        fake_api.user_message(GROUP, OWNER, BOT + "write a .env")
        await eventually(lambda: "Wrote the settings." in _texts(fake_api), timeout_s=60)
        workspace = live.workspace
    assert (workspace / ".env").is_file()
    env = _clean_env(
        PLANGATE_TELEGRAM_TOKEN="999:not-the-token",
        PLANGATE_TELEGRAM_API_URL=fake_api.base_url,
        PLANGATE_OWNER_IDS=str(OWNER),
        PLANGATE_HOME=str(tmp_path / "home"),
        PLANGATE_MODEL_BASE_URL="http://127.0.0.1:9/v1",
    )
    # Started from the workspace (its default): refused with one line, nothing runs.
    code, _, err = await _plangate("run", cwd=workspace, env=env)
    assert code == 2
    [line] = err.strip().splitlines()
    assert f"{workspace / '.env'}: a settings file inside the workspace" in line
    # Started from elsewhere with the workspace named: the file is not read at all.
    monkeypatch.chdir(tmp_path)
    started = load_settings({"PLANGATE_WORKSPACE": str(workspace)}, env_file=".env")
    assert (started.sandbox, started.bash_network) == ("on", False)


async def test_a_dot_env_fifo_in_the_starting_folder_is_refused_not_waited_on(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    """One NoPlan bash call (``mkfifo .env``) in the folder plangate starts from: the next
    start opened it to check its lines and waited for a writer for good, before the refusal
    of a workspace's ``.env`` (which only looked at regular files) was reached."""
    import asyncio

    workspace = tmp_path / "work"
    workspace.mkdir()
    os.mkfifo(workspace / ".env")
    env = _clean_env(
        PLANGATE_TELEGRAM_TOKEN="999:not-the-token",
        PLANGATE_TELEGRAM_API_URL=fake_api.base_url,
        PLANGATE_OWNER_IDS=str(OWNER),
        PLANGATE_HOME=str(tmp_path / "home"),
        PLANGATE_MODEL_BASE_URL="http://127.0.0.1:9/v1",
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot.cli",
        "run",
        cwd=workspace,
        env={**env, "PYTHONPATH": str(CHECKOUT)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        _, err = await asyncio.wait_for(proc.communicate(), 30)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        pytest.fail("plangate run waited on the .env FIFO")
    assert proc.returncode == 2
    [line] = err.decode().strip().splitlines()
    assert str(workspace / ".env") in line
