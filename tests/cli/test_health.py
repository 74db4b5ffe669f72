"""``plangate health`` (the image's HEALTHCHECK): ok while ``plangate run`` serves, one line and
exit 1 when it does not."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from bot.health import HEARTBEAT_FILE, STALE_AFTER_S, beat, check
from tests.cli.test_cli import _clean_env, _plangate
from tests.fakebot.server import FakeBotApi

ROOT = Path(__file__).resolve().parents[2]


def test_a_fresh_beat_is_healthy_and_an_old_one_is_not(tmp_path: Path) -> None:
    assert check(tmp_path) is not None and "not running" in (check(tmp_path) or "")
    beat(tmp_path, now=1000.0)
    assert check(tmp_path, now=1000.0 + STALE_AFTER_S - 1) is None
    stale = check(tmp_path, now=1000.0 + STALE_AFTER_S + 60)
    assert stale is not None and stale.startswith("stale heartbeat")
    (tmp_path / HEARTBEAT_FILE).write_text("garbage\n")
    assert (check(tmp_path) or "").startswith("unreadable heartbeat")


async def test_health_follows_a_real_plangate_run(tmp_path: Path, fake_api: FakeBotApi) -> None:
    home, workspace = tmp_path / "home", tmp_path / "workspace"
    workspace.mkdir()
    env = _clean_env(
        PLANGATE_TELEGRAM_TOKEN=fake_api.token,
        PLANGATE_TELEGRAM_API_URL=fake_api.base_url,
        PLANGATE_OWNER_IDS="1",
        PLANGATE_HOME=str(home),
        PLANGATE_WORKSPACE=str(workspace),
        PLANGATE_MODEL_BASE_URL="http://127.0.0.1:9/v1",
        PLANGATE_SANDBOX="off",
    )
    code, _, err = await _plangate("health", cwd=tmp_path, env=env)
    assert code == 1
    assert err.strip().splitlines() == [
        f"plangate: not running: no heartbeat in {home} (is `plangate run` started with this home?)"
    ]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot.cli",
        "run",
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        for _ in range(600):
            if (home / HEARTBEAT_FILE).exists() or proc.returncode is not None:
                break
            await asyncio.sleep(0.05)
        assert (home / HEARTBEAT_FILE).exists()
        code, out, _ = await _plangate("health", cwd=tmp_path, env=env)
        assert (code, out) == (0, "plangate: ok\n")
    finally:
        if proc.returncode is None:
            os.kill(proc.pid, signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 60)
    # A clean stop removes the beat: stopped reads as stopped, not as a wedged process.
    assert not (home / HEARTBEAT_FILE).exists()
    code, _, _ = await _plangate("health", cwd=tmp_path, env=env)
    assert code == 1


async def test_version_prints_the_installed_version(tmp_path: Path) -> None:
    code, out, _ = await _plangate("--version", cwd=tmp_path, env=_clean_env())
    assert code == 0
    assert out.startswith("plangate ")
    assert out.strip() != "plangate unknown"
