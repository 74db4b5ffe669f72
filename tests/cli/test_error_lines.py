"""Errors a person can act on, in one line each: the exact first line printed, and never a
traceback."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
import socket
import sys
from pathlib import Path

import pytest
from telegram import Bot
from telegram.error import NetworkError

from bot.runner import NetworkErrorsInOneLine
from engine.model.openai_provider import OpenAIProvider
from engine.model.types import ModelError
from tests.cli.test_cli import _clean_env, _plangate
from tests.fakes.openai_server import FakeOpenAIServer

ROOT = Path(__file__).resolve().parents[2]
STAMP = r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} "


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_run_with_telegram_unreachable_retries_one_line_per_attempt_and_warns_of_a_typo(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    port = closed_port()
    env = _clean_env(
        PLANGATE_TELEGRAM_TOKEN="1:x",
        PLANGATE_TELEGRAM_API_URL=f"http://127.0.0.1:{port}/bot",
        PLANGATE_OWNER_IDS="1",
        PLANGATE_HOME=str(tmp_path / "home"),
        PLANGATE_WORKSPACE=str(workspace),
        PLANGATE_MODEL_BASE_URL="http://127.0.0.1:9/v1",
        PLANGATE_MODLE="gpt-4o",
        PYTHONPATH=str(ROOT),
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot.cli",
        "run",
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stderr is not None
    lines: list[str] = []
    try:
        while len([line for line in lines if "attempt" in line]) < 2:
            line = await asyncio.wait_for(proc.stderr.readline(), 120)
            assert line, "plangate run ended: " + "".join(lines)
            lines.append(line.decode())
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        rest = await asyncio.wait_for(proc.stderr.read(), 60)
        await proc.wait()
    text = "".join(lines) + rest.decode()
    assert "Traceback" not in text
    warned = [line for line in lines if "PLANGATE_MODLE" in line]
    assert len(warned) == 1
    assert re.match(
        STAMP + r"WARNING plangate.runner settings: PLANGATE_MODLE is not a plangate setting "
        r"\(did you mean PLANGATE_MODEL\?\); it is ignored$",
        warned[0],
    ), warned[0]
    attempts = [line for line in lines if "attempt" in line]
    assert re.match(
        STAMP + rf"WARNING plangate.runner telegram: cannot reach 127.0.0.1:{port} \(.+\); "
        r"attempt 1, next in 2 s$",
        attempts[0],
    ), attempts[0]
    assert re.search(r"attempt 2, next in 4 s$", attempts[1]), attempts[1]
    # The typo is warned about before anything else is tried.
    assert lines.index(warned[0]) < lines.index(attempts[0])


async def test_a_malformed_env_line_names_the_file_and_the_line(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("PLANGATE_MODEL=gpt-4o\n# a comment\nthis is not a setting\n")
    code, out, err = await _plangate("run", cwd=tmp_path, env=_clean_env(HOME=str(tmp_path)))
    assert code == 2
    assert out == ""
    assert err.splitlines() == [
        "plangate: .env:3: cannot read this line ('this is not a setting'); expected NAME=value"
    ]


async def test_a_base_url_without_v1_is_told_to_add_it(fake_openai: FakeOpenAIServer) -> None:
    root = fake_openai.base_url.removesuffix("/v1")
    provider = OpenAIProvider("gpt-4o-mini", base_url=root, api_key="k")
    try:
        with pytest.raises(ModelError) as caught:
            await provider.check()
    finally:
        await provider.aclose()
    assert str(caught.value) == (
        f"the model server at {root} answered HTTP 404: its URL usually ends in /v1 "
        f"(try PLANGATE_MODEL_BASE_URL={root}/v1)"
    )


async def test_a_telegram_network_error_is_one_log_line(caplog: pytest.LogCaptureFixture) -> None:
    bot = Bot("1:x", base_url=f"http://127.0.0.1:{closed_port()}/bot")
    logger = logging.getLogger("telegram.ext.Updater")
    try:
        await bot.get_me()
    except NetworkError:
        record = logger.makeRecord(
            logger.name,
            logging.ERROR,
            __file__,
            1,
            "Error while getting Updates",
            (),
            sys.exc_info(),
        )
    assert NetworkErrorsInOneLine().filter(record)
    formatted = logging.Formatter("%(message)s").format(record)
    assert "\n" not in formatted
    assert formatted.startswith("Error while getting Updates (NetworkError: ")
