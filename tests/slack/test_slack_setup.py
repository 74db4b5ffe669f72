"""Slack's settings, ``doctor``'s token check against the fake Slack, and the app manifest in
deploy/ naming everything the code handles."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.runner import engine_config
from bot.settings import Settings, load_settings, run_problems
from bot.slack import keys
from bot.slack.app import EVENTS, SLASH_COMMAND
from bot.slack.front import check_slack, slack_listen
from engine.errors import ConfigError
from engine.keys import Chat
from tests.fakeslack.server import FakeSlack

MANIFEST = Path(__file__).parents[2] / "deploy" / "slack-manifest.json"


def load(env: dict[str, str]) -> Settings:
    return load_settings(env, env_file=None)


def test_slack_alone_needs_no_telegram_token_but_its_owners_and_a_way_in() -> None:
    slack_only = load({"PLANGATE_SLACK_BOT_TOKEN": "xoxb-1"})
    assert [p.split(":")[0] for p in run_problems(slack_only)] == [
        "PLANGATE_SLACK_OWNER_IDS",
        "PLANGATE_SLACK_APP_TOKEN",
    ]
    ready = load(
        {
            "PLANGATE_SLACK_BOT_TOKEN": "xoxb-1",
            "PLANGATE_SLACK_APP_TOKEN": "xapp-1",
            "PLANGATE_SLACK_OWNER_IDS": "U01ABCDEF, U02XYZ",
        }
    )
    assert run_problems(ready) == []
    assert ready.slack_owner_ids == ("U01ABCDEF", "U02XYZ")
    # Slack's owners are owners in the engine, as their person keys; Telegram's stay.
    both = load(
        {
            "PLANGATE_SLACK_BOT_TOKEN": "xoxb-1",
            "PLANGATE_SLACK_APP_TOKEN": "xapp-1",
            "PLANGATE_SLACK_OWNER_IDS": "U01ABCDEF",
            "PLANGATE_TELEGRAM_TOKEN": "123456:AAE-secret_token",
            "PLANGATE_OWNER_IDS": "42",
        }
    )
    assert run_problems(both) == []
    assert engine_config(both).owner_ids == {"tg:42", keys.person_key("U01ABCDEF")}
    http = load(
        {
            "PLANGATE_SLACK_BOT_TOKEN": "xoxb-1",
            "PLANGATE_SLACK_OWNER_IDS": "U01ABCDEF",
            "PLANGATE_SLACK_LISTEN": "0.0.0.0:3000",
        }
    )
    assert [p.split(":")[0] for p in run_problems(http)] == ["PLANGATE_SLACK_SIGNING_SECRET"]
    assert slack_listen(http.slack_listen) == ("0.0.0.0", 3000)
    with pytest.raises(ConfigError, match="PLANGATE_SLACK_LISTEN"):
        slack_listen("nowhere")


def test_slack_ids_are_checked_when_read() -> None:
    with pytest.raises(ConfigError, match="Slack ids"):
        load({"PLANGATE_SLACK_OWNER_IDS": "U01; drop table"})
    assert load(
        {"PLANGATE_SLACK_ALLOWED_CHANNELS": '["C01AB", "G02CD"]'}
    ).slack_allowed_channels == (
        "C01AB",
        "G02CD",
    )


def test_keys_map_slack_ids_to_integers_and_back() -> None:
    for channel in ("C0TEAM01", "G0PRIV", "D0OWNER1", "C"):
        assert keys.channel_of(keys.chat_key(channel)) == channel
        assert keys.is_slack_chat(keys.chat_key(channel))
    assert keys.chat_key("D0OWNER1") > 0 > keys.chat_key("C0TEAM01")  # a DM is private
    assert keys.user_of(keys.person_key("U0OWNER1")) == "U0OWNER1"
    assert not keys.is_slack_chat(-1001234567890) and not keys.is_slack_chat(123456789)
    assert keys.ts_of(keys.ts_key("1712345678.000123")) == "1712345678.000123"
    assert keys.ts_key(None) == 0 and keys.ts_of(0) is None
    # The engine's keys: people, conversations and threads as strings, messages as their ts.
    assert keys.person_key("U0OWNER1") == "slack:U0OWNER1"
    assert keys.engine_chat(keys.chat_key("D0OWNER1")).kind == "private"
    assert keys.engine_chat(keys.chat_key("C0TEAM01")) == Chat.group("slack:C0TEAM01")
    thread = keys.engine_chat(keys.chat_key("C0TEAM01"), keys.ts_key("1712345678.000123"))
    assert thread == Chat.thread("slack:C0TEAM01/1712345678.000123", "slack:C0TEAM01")
    assert keys.chat_of_ref("slack:C0TEAM01") == keys.chat_key("C0TEAM01")


async def test_doctor_checks_both_slack_tokens_with_the_api() -> None:
    slack = FakeSlack()
    await slack.start()
    try:
        env = {
            "PLANGATE_SLACK_BOT_TOKEN": slack.bot_token,
            "PLANGATE_SLACK_APP_TOKEN": slack.app_token,
            "PLANGATE_SLACK_OWNER_IDS": "U01ABCDEF",
            "PLANGATE_SLACK_API_URL": slack.api_url.rstrip("/"),
        }
        good = await check_slack(load(env))
        assert [ok for ok, _ in good] == [True, True]
        assert good[0][1].startswith("slack: ok")
        bad = await check_slack(load(env | {"PLANGATE_SLACK_BOT_TOKEN": "xoxb-wrong"}))
        assert bad == [
            (False, "slack: the bot token was refused (invalid_auth; PLANGATE_SLACK_BOT_TOKEN)")
        ]
        assert await check_slack(load({})) == []
    finally:
        await slack.stop()
    assert slack.count("auth.test") == 2


def test_the_manifest_names_everything_the_code_handles() -> None:
    manifest = json.loads(MANIFEST.read_text())
    commands = [c["command"] for c in manifest["features"]["slash_commands"]]
    assert commands == [SLASH_COMMAND]
    settings = manifest["settings"]
    assert settings["socket_mode_enabled"] is True
    assert settings["interactivity"]["is_enabled"] is True
    subscribed = set(settings["event_subscriptions"]["bot_events"])
    for event in EVENTS:
        if event == "message":
            assert {"message.channels", "message.im"} <= subscribed
        else:
            assert event in subscribed
    scopes = set(manifest["oauth_config"]["scopes"]["bot"])
    # What the Web API calls the front end makes need.
    needed = {
        "chat:write",  # chat.postMessage, chat.update, chat.postEphemeral
        "commands",  # /plangate
        "app_mentions:read",
        "channels:history",
        "im:history",
        "files:read",  # url_private_download
        "files:write",  # files_upload_v2
        "channels:manage",  # conversations.leave
    }
    assert needed <= scopes


async def test_a_bare_plangate_with_only_a_slack_token_serves_rather_than_plays_the_demo(
    tmp_path: Path,
) -> None:
    # The demo would print its transcript and exit 0; serving Slack stops at its first missing
    # setting, named in one line.
    from tests.cli.test_cli import _clean_env, _plangate

    env = _clean_env(PLANGATE_SLACK_BOT_TOKEN="xoxb-1", PLANGATE_HOME=str(tmp_path / "home"))
    code, out, err = await _plangate(cwd=tmp_path, env=env)
    assert code == 2, (out, err)
    assert "PLANGATE_SLACK_OWNER_IDS: not set" in err
