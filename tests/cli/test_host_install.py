"""plangate never runs what the agent can write: `run` and `doctor` refuse a workspace or
project that holds plangate's own interpreter, venv, package or home, and a `.env` inside a
workspace (docs/security.md, "Programs plangate runs on the host").

`plangate run` and `plangate doctor` are real processes here (`python -m bot.cli`, the test
venv's interpreter, this checkout as its package), as the README's old layout started them:
from the clone, with the venv and the package inside the folder named as the workspace.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from bot.doctor import run_doctor
from bot.runner import install_problems
from bot.settings import Settings, load_settings
from engine.errors import ConfigError
from tests.cli.test_cli import _clean_env, _plangate
from tests.fakebot.server import FakeBotApi
from tests.fakes.openai_server import FAKE_MODEL, FakeOpenAIServer

CHECKOUT = Path(__file__).resolve().parents[2]


def _run_env(api: FakeBotApi, home: Path, workspace: Path, **extra: str) -> dict[str, str]:
    return _clean_env(
        # The token is refused by the fake API: a run that got past the checks ends there.
        PLANGATE_TELEGRAM_TOKEN="999:not-the-token",
        PLANGATE_TELEGRAM_API_URL=api.base_url,
        PLANGATE_OWNER_IDS="1",
        PLANGATE_HOME=str(home),
        PLANGATE_WORKSPACE=str(workspace),
        PLANGATE_MODEL_BASE_URL="http://127.0.0.1:9/v1",
        **extra,
    )


async def test_run_refuses_a_workspace_holding_its_own_venv_with_one_line(
    tmp_path: Path, fake_api: FakeBotApi
) -> None:
    # The README's old Quick start: the clone is the workspace, its .venv inside it.
    env = _run_env(fake_api, tmp_path / "home", CHECKOUT)
    code, out, err = await _plangate("run", cwd=tmp_path, env=env)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"plangate: PLANGATE_WORKSPACE: {CHECKOUT} holds ")
    assert "outside every workspace and project" in lines[0]
    assert not (tmp_path / "home").exists()  # refused before anything was opened


async def test_run_refuses_a_workspace_holding_its_home_and_a_project_holding_its_package(
    tmp_path: Path, fake_api: FakeBotApi
) -> None:
    workspace = tmp_path / "work"
    workspace.mkdir()
    env = _run_env(fake_api, workspace / "var" / "plangate", workspace)
    code, _, err = await _plangate("run", cwd=tmp_path, env=env)
    assert code == 2
    assert err.strip().splitlines() == [
        f"plangate: PLANGATE_WORKSPACE: {workspace} holds plangate's home (PLANGATE_HOME) "
        f"({workspace / 'var' / 'plangate'}): the agent writes its workspace, so plangate "
        "would run what it wrote outside the sandbox; keep plangate's venv, its installed "
        "package and its home outside every workspace and project (install it elsewhere, or "
        "set the workspace to your project's own folder)"
    ]
    # A listed project holding plangate's package: the same check run makes, in this process.
    env = {
        "PLANGATE_HOME": str(tmp_path / "home"),
        "PLANGATE_WORKSPACE": str(workspace),
        "PLANGATE_PROJECTS": f"self={CHECKOUT / 'engine'}",
    }
    [line] = install_problems(load_settings(env, env_file=None))
    assert line.startswith(f"PLANGATE_PROJECTS self: {CHECKOUT / 'engine'} holds ")


async def test_doctor_names_the_folder_and_fails(
    tmp_path: Path, fake_api: FakeBotApi, fake_openai: FakeOpenAIServer
) -> None:
    settings = load_settings(
        {
            "PLANGATE_TELEGRAM_TOKEN": fake_api.token,
            "PLANGATE_TELEGRAM_API_URL": fake_api.base_url,
            "PLANGATE_OWNER_IDS": "1",
            "PLANGATE_HOME": str(tmp_path / "home"),
            "PLANGATE_WORKSPACE": str(CHECKOUT),
            "PLANGATE_MODEL": FAKE_MODEL,
            "PLANGATE_MODEL_BASE_URL": fake_openai.base_url,
        },
        env_file=None,
    )
    out = io.StringIO()
    assert await run_doctor(out, load=lambda: settings) == 1
    lines = out.getvalue().splitlines()
    held = [line for line in lines if line.startswith(f"PLANGATE_WORKSPACE: {CHECKOUT} holds")]
    assert len(held) == 1
    assert not any(line.startswith("workspace ") and "ok" in line for line in lines)
    assert lines[-1] == "1 problem(s) found"


async def test_a_dot_env_in_the_workspace_is_refused_at_start(
    tmp_path: Path, fake_api: FakeBotApi
) -> None:
    # Started from the project folder (the old Docker image's working folder): the agent
    # wrote .env there, turning its sandbox off. plangate does not start on it.
    workspace = tmp_path / "work"
    workspace.mkdir()
    (workspace / ".env").write_text("PLANGATE_SANDBOX=off\n")
    env = _run_env(fake_api, tmp_path / "home", workspace)
    del env["PLANGATE_WORKSPACE"]  # the default: the current folder
    code, out, err = await _plangate("run", cwd=workspace, env=env)
    assert code == 2
    assert out == ""
    [line] = err.strip().splitlines()
    assert line.startswith(
        f"plangate: {workspace / '.env'}: a settings file inside the workspace "
        f"(PLANGATE_WORKSPACE) {workspace} is refused"
    )
    # A .env that moves the workspace away from itself is refused all the same (the same
    # settings loader as run's, in this process).
    (workspace / ".env").write_text(f"PLANGATE_SANDBOX=off\nPLANGATE_WORKSPACE={tmp_path}\n")
    with pytest.raises(ConfigError, match="a settings file inside the workspace"):
        load_settings({}, env_file=str(workspace / ".env"))
    # doctor says the same line and fails.
    out = io.StringIO()

    def load() -> Settings:
        return load_settings({}, env_file=str(workspace / ".env"))

    assert await run_doctor(out, load=load) == 1
    assert out.getvalue().startswith(f"settings: {workspace / '.env'}: a settings file inside")


async def test_a_dot_env_in_a_folder_that_is_no_workspace_is_read(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / ".env").write_text("PLANGATE_PROFILE=fromdotenv\n")
    workspace = tmp_path / "work"
    workspace.mkdir()
    env = {"PLANGATE_WORKSPACE": str(workspace)}
    assert load_settings(env, env_file=str(conf / ".env")).profile == "fromdotenv"
