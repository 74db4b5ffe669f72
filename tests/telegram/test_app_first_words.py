"""A newcomer's first words in the chat, through the real Application and the real engine:
/start says what the chat is bound to and what the sender may do, /whoami tells the id and role,
an unknown command gets one line pointing to /help, and /help, the menu and the README list the
same commands."""

from __future__ import annotations

import re
from pathlib import Path

from bot.telegram.app import MENU
from engine.commands import HELP_COMMANDS, HELP_TEXT
from tests.fakebot.server import FakeBotApi
from tests.telegram.app_support import GROUP, OWNER, STRANGER, eventually
from tests.telegram.live import live_bot

ROOT = Path(__file__).resolve().parents[2]


def readme_commands() -> list[str]:
    """The commands in the README's command table, as Telegram taps them."""
    text = (ROOT / "README.md").read_text()
    table = text[text.index("## Commands") :].split("\n## ", 1)[0]
    return [m.replace("-", "_") for m in re.findall(r"^\| `/([a-z_-]+)", table, re.M)]


def test_help_the_menu_and_the_readme_list_the_same_commands() -> None:
    helped = [name for name, _, _ in HELP_COMMANDS]
    assert helped == [name for name, _ in MENU]
    assert sorted(readme_commands()) == sorted(helped)
    # Every name is one Telegram makes tappable: no "/show-plan" in the list.
    assert all(re.fullmatch(r"[a-z_]{1,32}", name) for name in helped)
    assert "/show_plan - " in HELP_TEXT and "/show-plan" not in HELP_TEXT


async def test_start_welcomes_with_the_project_the_model_and_the_role(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    async with live_bot(fake_api, tmp_path, [], bot_settings={"model": "gpt-test-mini"}) as live:
        fake_api.user_message(OWNER, OWNER, "/start")
        await eventually(lambda: len(fake_api.bot_messages(OWNER)) == 1)
        welcome = fake_api.bot_messages(OWNER)[0].text
        assert f"This chat works on default ({live.workspace})" in welcome
        assert "Model: gpt-test-mini." in welcome
        assert "You are an owner here: you may do everything." in welcome
        assert "Try: /plan <what you want changed>." in welcome

        # In a group, a member is welcomed with what a member may do, and no path.
        fake_api.user_message(GROUP, OWNER, "/status")  # the owner's word allows the group
        await eventually(lambda: len(fake_api.bot_messages(GROUP)) == 1)
        fake_api.user_message(GROUP, STRANGER, "/start")
        await eventually(lambda: len(fake_api.bot_messages(GROUP)) == 2)
        member = fake_api.bot_messages(GROUP)[1].text
        assert "You are a member here" in member and str(live.workspace) not in member
        assert "Try: /show_plan or /status." in member


async def test_whoami_tells_the_id_and_the_role(fake_api: FakeBotApi, tmp_path: Path) -> None:
    async with live_bot(fake_api, tmp_path, []):
        fake_api.user_message(OWNER, OWNER, "/whoami")
        await eventually(lambda: len(fake_api.bot_messages(OWNER)) == 1)
        answer = fake_api.bot_messages(OWNER)[0].text
        assert f"Telegram user id {OWNER}" in answer and "You are an owner here" in answer
        # A stranger's private chat stays ignored.
        fake_api.user_message(STRANGER, STRANGER, "/whoami")
        fake_api.user_message(OWNER, OWNER, "/whoami")
        await eventually(lambda: len(fake_api.bot_messages(OWNER)) == 2)
        assert fake_api.bot_messages(STRANGER) == []


async def test_an_unknown_command_gets_one_line_only_when_addressed(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    async with live_bot(fake_api, tmp_path, []):
        fake_api.user_message(OWNER, OWNER, "/frobnicate now")
        await eventually(lambda: len(fake_api.bot_messages(OWNER)) == 1)
        assert fake_api.bot_messages(OWNER)[0].text == (
            "There is no /frobnicate command. /help lists them."
        )
        fake_api.user_message(GROUP, OWNER, "/status")
        await eventually(lambda: len(fake_api.bot_messages(GROUP)) == 1)
        # Another bot's command in the group, and one not addressed to anybody: silence.
        fake_api.user_message(GROUP, STRANGER, "/weather")
        fake_api.user_message(GROUP, STRANGER, "/weather@other_bot")
        fake_api.user_message(GROUP, STRANGER, f"/frobnicate@{fake_api.username}")
        await eventually(lambda: len(fake_api.bot_messages(GROUP)) == 2)
        assert fake_api.bot_messages(GROUP)[1].text == (
            "There is no /frobnicate command. /help lists them."
        )
        fake_api.user_message(GROUP, OWNER, "/status")
        await eventually(lambda: len(fake_api.bot_messages(GROUP)) == 3)
        assert fake_api.bot_messages(GROUP)[2].text.startswith("Session ")
