"""`plangate doctor` against the fake Bot API and the fake model server: one line per check."""

from __future__ import annotations

import io
from pathlib import Path

from bot.doctor import run_doctor
from bot.settings import Settings, load_settings
from tests.fakebot.server import FakeBotApi
from tests.fakes.openai_server import FAKE_MODEL, FakeOpenAIServer


def _settings(tmp_path: Path, api: FakeBotApi, model: FakeOpenAIServer, token: str) -> Settings:
    return load_settings(
        {
            "PLANGATE_TELEGRAM_TOKEN": token,
            "PLANGATE_TELEGRAM_API_URL": api.base_url,
            "PLANGATE_OWNER_IDS": "1",
            "PLANGATE_HOME": str(tmp_path / "home"),
            "PLANGATE_WORKSPACE": str(tmp_path),
            "PLANGATE_MODEL": FAKE_MODEL,
            "PLANGATE_MODEL_BASE_URL": model.base_url,
        },
        env_file=None,
    )


async def test_doctor_passes_when_everything_answers(
    tmp_path: Path, fake_api: FakeBotApi, fake_openai: FakeOpenAIServer
) -> None:
    out = io.StringIO()
    settings = _settings(tmp_path, fake_api, fake_openai, fake_api.token)
    assert await run_doctor(out, load=lambda: settings) == 0
    lines = out.getvalue().splitlines()
    assert lines[0] == "settings: ok"
    assert any(line.startswith(f"telegram: ok, @{fake_api.username}") for line in lines)
    assert any("privacy mode is on" in line for line in lines)
    assert any(line.startswith("model: ok") for line in lines)
    assert any(line.startswith("sandbox: ok, bubblewrap works; network off") for line in lines)
    # The default policy with the sandbox on: approvals only to leave it.
    assert any("bash asks only to leave the sandbox" in line for line in lines)
    assert lines[-1] == "all checks passed"


async def test_doctor_names_a_refused_token_and_fails(
    tmp_path: Path, fake_api: FakeBotApi, fake_openai: FakeOpenAIServer
) -> None:
    out = io.StringIO()
    settings = _settings(tmp_path, fake_api, fake_openai, "999:wrong-token")
    assert await run_doctor(out, load=lambda: settings) == 1
    text = out.getvalue()
    assert "telegram: the server refused the token (PLANGATE_TELEGRAM_TOKEN)" in text
    assert "wrong-token" not in text
    assert text.splitlines()[-1] == "1 problem(s) found"


async def test_doctor_says_when_a_project_with_dependencies_has_no_setup_script(
    tmp_path: Path, fake_api: FakeBotApi, fake_openai: FakeOpenAIServer
) -> None:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'calc'\n")
    out = io.StringIO()
    settings = _settings(tmp_path, fake_api, fake_openai, fake_api.token)
    assert await run_doctor(out, load=lambda: settings) == 0
    [line] = [line for line in out.getvalue().splitlines() if "setup.sh" in line]
    assert line == (
        f"project {tmp_path}: pyproject.toml but no .plangate/setup.sh: a plan's worktree will "
        "not have its dependencies; e.g. .plangate/setup.sh: "
        "python3 -m venv .venv && .venv/bin/pip install -e ."
    )
    # With a script, nothing is said.
    (tmp_path / ".plangate").mkdir()
    (tmp_path / ".plangate" / "setup.sh").write_text("npm ci\n")
    out = io.StringIO()
    assert await run_doctor(out, load=lambda: settings) == 0
    assert "setup.sh" not in out.getvalue()
