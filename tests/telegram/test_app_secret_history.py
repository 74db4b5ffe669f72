"""`/project` refuses a project whose git history holds a PLANGATE_SECRET_FILES path (its
blob is readable through git show or the pack files whatever the sandbox masks), naming the
path and the fix: the real PTB Application on the fake Bot API, real git."""

from __future__ import annotations

from pathlib import Path

from engine.tools.sandbox import SandboxSettings
from tests.cli.test_secret_history import SECRET, _committed_then_removed
from tests.fakebot.server import FakeBotApi
from tests.keys import chat
from tests.telegram.app_support import GROUP, OWNER, eventually
from tests.telegram.live import live_bot


async def _reply(api: FakeBotApi, text: str) -> str:
    before = len(api.bot_messages(GROUP))
    api.user_message(GROUP, OWNER, text)
    await eventually(lambda: len(api.bot_messages(GROUP)) > before)
    return api.bot_messages(GROUP)[-1].text


async def test_project_refuses_a_project_with_a_secret_in_its_history(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    old = _committed_then_removed(tmp_path / "old")
    sandbox = SandboxSettings(hidden_names=(SECRET,))
    async with live_bot(fake_api, tmp_path, [], projects=(("old", old),), sandbox=sandbox) as live:
        before = await live.engine.session_for_chat(chat(GROUP))
        refused = await _reply(fake_api, "/project old")
        assert refused.startswith(
            f"Project old: {old} has PLANGATE_SECRET_FILES in its git history ({SECRET})"
        )
        assert "git rm --cached" in refused and "\n" not in refused
        assert await live.engine.session_for_chat(chat(GROUP)) == before
