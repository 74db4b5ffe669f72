"""`plangate doctor` against the fake Bot API and the fake model server: one line per check."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from bot.doctor import run_doctor
from bot.settings import Settings, load_settings
from tests.fakebot.server import FakeBotApi
from tests.fakes.openai_server import FAKE_MODEL, FakeOpenAIServer


def _settings(tmp_path: Path, api: FakeBotApi, model: FakeOpenAIServer, token: str) -> Settings:
    # The workspace beside the home, never around it (a workspace holding the home is refused).
    (tmp_path / "work").mkdir(exist_ok=True)
    return load_settings(
        {
            "PLANGATE_TELEGRAM_TOKEN": token,
            "PLANGATE_TELEGRAM_API_URL": api.base_url,
            "PLANGATE_OWNER_IDS": "1",
            "PLANGATE_HOME": str(tmp_path / "home"),
            "PLANGATE_WORKSPACE": str(tmp_path / "work"),
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
    # Which bound holds a call's memory, and the disk reserve, each said.
    assert any("memory 2048 MB per call in total" in line for line in lines)
    assert any(line.startswith("disk: ") and line.endswith("; ok") for line in lines)
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


async def test_doctor_fails_where_a_turn_would_though_the_model_is_listed(
    tmp_path: Path, fake_api: FakeBotApi, fake_openai: FakeOpenAIServer
) -> None:
    # The server lists the model but refuses tool_choice (vLLM without a tool parser): every
    # turn fails there, so the doctor says so instead of "ok".
    fake_openai.refused_params = {"tool_choice"}
    out = io.StringIO()
    settings = _settings(tmp_path, fake_api, fake_openai, fake_api.token)
    assert await run_doctor(out, load=lambda: settings) == 1
    (line,) = [x for x in out.getvalue().splitlines() if x.startswith("model:")]
    assert "HTTP 400" in line and "tool_choice" in line


async def test_doctor_learns_max_completion_tokens_as_a_turn_does(
    tmp_path: Path, fake_api: FakeBotApi, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.refused_params = {"max_tokens"}
    out = io.StringIO()
    settings = _settings(tmp_path, fake_api, fake_openai, fake_api.token)
    assert await run_doctor(out, load=lambda: settings) == 0
    (line,) = [x for x in out.getvalue().splitlines() if x.startswith("model:")]
    assert line.endswith("streamed (max_completion_tokens)")


async def test_doctor_says_when_a_project_with_dependencies_has_no_setup_script(
    tmp_path: Path, fake_api: FakeBotApi, fake_openai: FakeOpenAIServer
) -> None:
    settings = _settings(tmp_path, fake_api, fake_openai, fake_api.token)
    project = settings.workspace
    (project / "pyproject.toml").write_text("[project]\nname = 'calc'\n")
    out = io.StringIO()
    assert await run_doctor(out, load=lambda: settings) == 0
    [line] = [line for line in out.getvalue().splitlines() if "setup.sh" in line]
    assert line == (
        f"project {project}: pyproject.toml but no .plangate/setup.sh: a plan's worktree will "
        "not have its dependencies; e.g. .plangate/setup.sh: "
        "python3 -m venv .venv && .venv/bin/pip install -e ."
    )
    # With a script, nothing is said.
    (project / ".plangate").mkdir()
    (project / ".plangate" / "setup.sh").write_text("npm ci\n")
    out = io.StringIO()
    assert await run_doctor(out, load=lambda: settings) == 0
    assert "setup.sh" not in out.getvalue()


async def test_doctor_lists_the_sandbox_tools_and_names_a_toolchain_it_cannot_see(
    tmp_path: Path,
    fake_api: FakeBotApi,
    fake_openai: FakeOpenAIServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # This machine's node is one in a home folder (as nvm installs it): the sandbox sees
    # only the system folders, so doctor names the setting that shows it.
    bin_dir = tmp_path / "nvm" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "node").write_text("#!/bin/sh\necho v20\n")
    (bin_dir / "node").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    out = io.StringIO()
    settings = _settings(tmp_path, fake_api, fake_openai, fake_api.token)
    assert await run_doctor(out, load=lambda: settings) == 0
    lines = out.getvalue().splitlines()
    [tools] = [line for line in lines if line.startswith("sandbox tools: ") and "git" in line]
    assert "git" in tools.split("(")[0]
    assert (
        f"sandbox tools: node here is {bin_dir / 'node'}, which the sandbox does not see; "
        f"install it under /usr or set PLANGATE_SANDBOX_TOOL_DIRS={tmp_path / 'nvm'}"
    ) in lines
