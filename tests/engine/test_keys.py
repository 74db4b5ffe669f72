"""The engine's opaque keys (engine.keys): how they are made and read back, what a chat's
kind and parent mean, older integer ids read as keys, and the channel's limits reaching the
``send_file`` tool."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.agent.testing import RecordingChannel
from engine.events import CommandRun, HumanSource
from engine.keys import Chat, ChatKind, key_channel, key_label, key_parts, legacy_chat, make_key
from engine.limits import ChannelLimits
from engine.plan.types import PlanFlow
from engine.roles.types import Person, RoleGranted
from engine.tools.base import ToolContext
from engine.tools.send import SendFileTool


def test_keys_are_made_one_way_and_read_back() -> None:
    assert make_key("tg", -100123) == "tg:-100123"
    assert make_key("tg", -100123, 45) == "tg:-100123/45"
    assert make_key("slack", "T01", "C02") == "slack:T01/C02"
    assert key_parts("slack:T01/C02", "slack") == ["T01", "C02"]
    assert key_parts("slack:T01/C02", "tg") is None
    assert key_channel("tg:5") == "tg" and key_label("tg:5") == "5"
    for bad in (("", 1), ("a:b", 1), ("tg", "x/y"), ("tg", "")):
        with pytest.raises(ValueError):
            make_key(*bad)


def test_a_thread_has_a_parent_and_shares_its_room() -> None:
    topic = Chat.thread("tg:-1/4", "tg:-1")
    assert topic.kind is ChatKind.THREAD and topic.room == "tg:-1"
    assert Chat.group("tg:-1").room == "tg:-1"
    with pytest.raises(ValueError):
        Chat("tg:-1/4", ChatKind.THREAD)
    with pytest.raises(ValueError):
        Chat("tg:-1", ChatKind.GROUP, "tg:-2")


def test_integer_ids_stored_before_keys_read_as_keys() -> None:
    assert legacy_chat(-100, 7) == Chat.thread("tg:-100/7", "tg:-100")
    assert legacy_chat(42) == Chat.private("tg:42")
    assert legacy_chat(-42) == Chat.group("tg:-42")
    flow = PlanFlow.model_validate(
        {"chat_id": -100, "thread_id": 7, "card_id": 3, "review_ids": [4, 5]}
    )
    assert flow == PlanFlow(
        chat_id="tg:-100", thread_id="tg:-100/7", card_id="3", review_ids=["4", "5"]
    )
    assert PlanFlow.model_validate({"chat_id": -100, "thread_id": 0}).thread_id is None
    assert HumanSource.model_validate({"user_id": 9, "message_id": 11}) == HumanSource(
        user_id="tg:9", message_id="11"
    )
    assert CommandRun.model_validate({"name": "stop", "actor": 9}).actor == "tg:9"
    assert RoleGranted.model_validate({"user_id": 9, "by": 1}).by == "tg:1"
    # Keys themselves pass through untouched, whatever their channel.
    assert CommandRun(name="stop", actor="slack:T01/U02").actor == "slack:T01/U02"
    assert Person("slack:T01/U02").label == "T01/U02"


async def test_send_file_takes_its_limits_from_the_channel(tmp_path: Path) -> None:
    (tmp_path / "small.txt").write_text("12345")
    (tmp_path / "big.txt").write_text("x" * 64)
    channel = RecordingChannel(limits=ChannelLimits(file_bytes=32, caption_chars=4))
    tool = SendFileTool(channel)
    assert "At most 32 bytes." in tool.description
    ctx = ToolContext(session_id="s", workspace=tmp_path, turn_id="t", source=HumanSource())
    refused = await tool.run({"path": "big.txt"}, ctx)
    assert refused.is_error and "send_file sends at most 32 bytes" in refused.content
    sent = await tool.run({"path": "small.txt", "caption": "a long caption"}, ctx)
    assert not sent.is_error
    [call] = channel.of("send_file")
    assert call.args["caption"] == "a lo"
