"""``plangate setup`` end to end: a terminal driven through pipes, the fake Bot API, the fake model
server; the owner pairs by sending the code from their chat; then ``plangate run`` starts from the
written config alone and answers that owner."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import stat
import sys
from pathlib import Path

from bot.wizard import CODE_TRIES, Pairing
from tests.cli.test_cli import _clean_env
from tests.fakebot.server import FakeBotApi
from tests.fakes.openai_server import FakeOpenAIServer

ROOT = Path(__file__).resolve().parents[2]
OWNER = 4242
STRANGER = 777


class Console:
    """A child process's terminal: lines in, everything it printed readable as it comes."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.text = ""
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while chunk := await self.proc.stdout.read(4096):
            self.text += chunk.decode()

    async def expect(self, pattern: str) -> re.Match[str]:
        for _ in range(1200):
            found = re.search(pattern, self.text)
            if found:
                return found
            if self._reader.done():
                break
            await asyncio.sleep(0.05)
        raise AssertionError(f"{pattern!r} never came; the terminal shows:\n{self.text}")

    def type(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((line + "\n").encode())


async def _spawn(*args: str, cwd: Path, env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot.cli",
        *args,
        cwd=cwd,
        env={**env, "PYTHONPATH": str(ROOT)},
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )


def test_a_pairing_code_is_long_lives_ten_minutes_and_allows_a_few_tries() -> None:
    now = [0.0]
    pairing = Pairing.start(clock=lambda: now[0])
    assert re.fullmatch(r"[A-Z2-9]{4}-[A-Z2-9]{4}", pairing.code)
    assert Pairing.start().code != pairing.code
    assert pairing.attempt(pairing.code.lower().replace("-", " "))
    for _ in range(CODE_TRIES):
        assert not pairing.attempt("WRONG-CODE")
    assert not pairing.open
    assert not pairing.attempt(pairing.code)  # spent: even the right code no longer pairs
    late = Pairing.start(clock=lambda: now[0])
    now[0] += 601
    assert not late.attempt(late.code)


async def test_setup_pairs_the_owner_writes_0600_and_run_starts_from_it_alone(
    tmp_path: Path, fake_api: FakeBotApi, fake_openai: FakeOpenAIServer
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    env = _clean_env(HOME=str(tmp_path), PLANGATE_TELEGRAM_API_URL=fake_api.base_url)
    console = Console(await _spawn("setup", cwd=tmp_path, env=env))
    await console.expect(r"Bot token from @BotFather: ")
    console.type(fake_api.token)
    code = (await console.expect(r"in a private chat: ([A-Z2-9]{4}-[A-Z2-9]{4})")).group(1)

    # Someone else's guess, then /whoami, then the owner sends the code.
    fake_api.user_message(STRANGER, STRANGER, "AAAA-BBBB")
    await console.expect(r"a wrong code from .*; 4 tries left")
    fake_api.user_message(OWNER, OWNER, "/whoami")
    fake_api.user_message(OWNER, OWNER, code)
    await console.expect(rf"paired: owner id {OWNER}")
    owner_texts = [m.text for m in fake_api.bot_messages(OWNER)]
    assert owner_texts[0] == f"Your Telegram user id is {OWNER}."
    assert owner_texts[1].startswith("✅ Paired:")
    assert [m.text for m in fake_api.bot_messages(STRANGER)] == [
        "That is not the code on the screen."
    ]

    await console.expect(r"Project folder the agent works on \[.*\]: ")
    console.type(str(ROOT))  # plangate's own checkout: refused
    assert await asyncio.wait_for(console.proc.wait(), 60) == 2
    await console.expect(r"holds plangate's own install or home")

    # Again, with the pairing answered by flag this time, and a good folder.
    console = Console(await _spawn("setup", "--owner-id", str(OWNER), cwd=tmp_path, env=env))
    await console.expect(r"Bot token from @BotFather: ")
    console.type(fake_api.token)
    await console.expect(r"Project folder the agent works on \[.*\]: ")
    console.type(str(project))
    await console.expect(r"Model server URL \(empty for OpenAI\): ")
    console.type(fake_openai.base_url)
    await console.expect(r"Model API key \(empty for none\): ")
    console.type("")
    await console.expect(r"the server lists: ")
    await console.expect(r"Model \[.*\]: ")
    console.type("")
    assert await asyncio.wait_for(console.proc.wait(), 60) == 0, console.text

    config = tmp_path / ".plangate" / "config.env"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    written = config.read_text()
    assert f"PLANGATE_OWNER_IDS={OWNER}\n" in written
    assert f"PLANGATE_WORKSPACE={project}\n" in written
    assert f"PLANGATE_TELEGRAM_TOKEN={fake_api.token}\n" in written

    # `plangate run` from that config alone: only HOME in the environment.
    run_env = _clean_env(HOME=str(tmp_path), PLANGATE_SANDBOX="off")
    run_env.pop("PLANGATE_SANDBOX")  # nothing plangate-specific comes from the environment
    proc = await _spawn("run", cwd=tmp_path, env=run_env)
    try:
        fake_api.user_message(OWNER, OWNER, "/status")
        for _ in range(1200):
            if len(fake_api.bot_messages(OWNER)) > 2:
                break
            assert proc.returncode is None, await proc.communicate()
            await asyncio.sleep(0.05)
        answer = fake_api.bot_messages(OWNER)[2].text
        assert answer.startswith("Session "), answer  # /status names the session
        assert str(project) in answer
    finally:
        if proc.returncode is None:
            os.kill(proc.pid, signal.SIGTERM)
        await asyncio.wait_for(proc.communicate(), 60)
