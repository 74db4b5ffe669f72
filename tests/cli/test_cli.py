"""The command line as a user meets it: the demo, and `run` refusing to start with one line."""

from __future__ import annotations

import asyncio
import io
import os
import sys
from pathlib import Path

from bot.demo import NEXT_STEPS, run_demo
from tests.fakebot.server import FakeBotApi

_ENV_KEYS = ("PLANGATE_", "TELEGRAM_BOT_TOKEN", "OPENAI_API_KEY")


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_ENV_KEYS)}
    env.update(extra)
    return env


async def _plangate(*args: str, cwd: Path, env: dict[str, str]) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot.cli",
        *args,
        cwd=cwd,
        env={**env, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_demo_plays_the_whole_flow_to_a_completed_plan() -> None:
    out = io.StringIO()
    assert await run_demo(out) == 0
    text = out.getvalue()
    assert "Ready for review" in text
    assert "[✅ Approve]" in text
    assert "▓▓▓▓▓▓▓▓▓▓ 2/2" in text
    assert "workspace now holds: README.md, greet.py, test_greet.py" in text
    assert "     demo │ finished\n" in text
    # The card goes from review straight to work: never "Paused" on the way.
    approved = text.index("(taps ✅ Approve)")
    assert text.index("In progress", approved) < text.find("Paused", approved) or (
        "Paused" not in text[approved:]
    )
    # Each tool call in one short line, and people by their names, never by an id.
    assert "    agent │ 🔧 bash: python3 test_greet.py\n" in text
    assert "    agent │ 🔧 write_file: greet.py\n" in text
    assert "✅ Approved by Ada" in text and "Approved by console" not in text
    # No goal card until the owner sets a goal (a task's criteria are no goal).
    assert text.index("goal card") > text.index("/goal Keep the greeting test passing")
    # It ends with what to do next, in three commands.
    assert text.rstrip().endswith(NEXT_STEPS)
    assert "plangate setup" in NEXT_STEPS and "plangate run" in NEXT_STEPS


async def test_run_without_a_token_exits_with_one_line_naming_it(tmp_path: Path) -> None:
    code, out, err = await _plangate("run", cwd=tmp_path, env=_clean_env())
    assert code != 0
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "PLANGATE_TELEGRAM_TOKEN" in lines[0]


async def test_run_with_a_malformed_setting_names_it(tmp_path: Path) -> None:
    env = _clean_env(PLANGATE_TELEGRAM_TOKEN="1:x", PLANGATE_OWNER_IDS="abc")
    code, _, err = await _plangate("run", cwd=tmp_path, env=env)
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "PLANGATE_OWNER_IDS" in lines[0]
    assert "1:x" not in err


async def test_run_with_a_refused_token_exits_with_one_line(
    tmp_path: Path, fake_api: FakeBotApi
) -> None:
    env = _clean_env(
        PLANGATE_TELEGRAM_TOKEN="999:not-the-token",
        PLANGATE_TELEGRAM_API_URL=fake_api.base_url,
        PLANGATE_OWNER_IDS="1",
        PLANGATE_HOME=str(tmp_path / "home"),
        PLANGATE_WORKSPACE=str(tmp_path / "work"),
        PLANGATE_MODEL_BASE_URL="http://127.0.0.1:9/v1",
    )
    (tmp_path / "work").mkdir()
    code, _, err = await _plangate("run", cwd=tmp_path, env=env)
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "refused the token" in lines[0]
    assert "not-the-token" not in err
