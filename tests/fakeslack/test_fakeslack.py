"""The fake Slack against the real slack_sdk and slack_bolt: what they send is what Slack takes,
and what it sends is what they understand (Socket Mode, the Web API, Events API over HTTP)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from tests.fakeslack.server import FakeSlack


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    server = FakeSlack()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def web_client(slack: FakeSlack) -> AsyncWebClient:
    return AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)


async def test_bolt_over_socket_mode_gets_events_commands_and_presses(slack: FakeSlack) -> None:
    app = AsyncApp(client=web_client(slack))
    seen: list[tuple[str, Any]] = []

    @app.event("app_mention")
    async def mention(event: dict[str, Any], say: Any) -> None:
        seen.append(("mention", event["text"]))
        await say(
            text="card",
            blocks=[
                {"type": "section", "text": {"type": "mrkdwn", "text": "*Plan*"}},
                {
                    "type": "actions",
                    "elements": [
                        {
                            "type": "button",
                            "text": {"type": "plain_text", "text": "✅ Approve"},
                            "action_id": "p:approve",
                            "value": "abc:3",
                        }
                    ],
                },
            ],
        )

    @app.command("/plangate")
    async def command(ack: Any, body: dict[str, Any]) -> None:
        await ack()
        seen.append(("command", body["text"]))

    @app.action("p:approve")
    async def approve(ack: Any, body: dict[str, Any], client: AsyncWebClient) -> None:
        await ack()
        seen.append(("press", body["actions"][0]["value"]))
        channel = body["container"]["channel_id"]
        await client.chat_update(channel=channel, ts=body["container"]["message_ts"], text="ok")

    handler = AsyncSocketModeHandler(app, slack.app_token)
    await handler.connect_async()
    try:
        await slack.connected()
        slack.channel("C01")
        ack = await slack.mention("C01", "U01", "plan add a health check")
        assert ack.kind == "events_api"
        for _ in range(200):
            if slack.bot_messages("C01"):
                break
            await asyncio.sleep(0.02)
        card = slack.bot_messages("C01")[0]
        assert card.buttons() == [("✅ Approve", "p:approve", "abc:3")]
        assert (await slack.slash("C01", "U01", "status")).kind == "slash_commands"
        assert (await slack.press("C01", card.ts, "U01", "✅ Approve")).kind == "interactive"
        for _ in range(200):
            if card.edits:
                break
            await asyncio.sleep(0.02)
        assert card.text == "ok"
    finally:
        await handler.close_async()
    assert seen == [
        ("mention", "<@U0BOT> plan add a health check"),
        ("command", "status"),
        ("press", "abc:3"),
    ]
    assert all(a.after_s < 3.0 for a in slack.acks)


async def test_the_web_api_refuses_as_slack_does(slack: FakeSlack) -> None:
    client = web_client(slack)
    slack.channel("C01")
    with pytest.raises(SlackApiError) as missing:
        await client.chat_postMessage(channel="C404", text="hi")
    assert missing.value.response["error"] == "channel_not_found"
    with pytest.raises(SlackApiError) as long:
        await client.chat_postMessage(channel="C01", text="x" * 40_001)
    assert long.value.response["error"] == "msg_too_long"
    with pytest.raises(SlackApiError) as stale:
        await client.chat_update(channel="C01", ts="1.000001", text="hi")
    assert stale.value.response["error"] == "message_not_found"
    bad = AsyncWebClient(token="xoxb-wrong", base_url=slack.api_url)
    with pytest.raises(SlackApiError) as auth:
        await bad.auth_test()
    assert auth.value.response["error"] == "invalid_auth"
    slack.fail_next("chat.postMessage", "ratelimited", status=429, retry_after=7)
    with pytest.raises(SlackApiError) as limited:
        await client.chat_postMessage(channel="C01", text="hi")
    assert limited.value.response.status_code == 429
    assert limited.value.response.headers["Retry-After"] == "7"
    assert (await client.auth_test())["user_id"] == "U0BOT"


async def test_a_file_goes_up_with_files_upload_v2_and_comes_down_with_the_token(
    slack: FakeSlack,
) -> None:
    client = web_client(slack)
    slack.channel("C01")
    await client.files_upload_v2(
        channel="C01", content=b"# answer\n", filename="answer.md", initial_comment="long answer"
    )
    (msg,) = slack.bot_messages("C01")
    assert msg.text == "long answer"
    assert slack.files[msg.files[0]] == ("answer.md", b"# answer\n")


async def test_events_over_http_are_signed_and_retried_with_a_number(slack: FakeSlack) -> None:
    from aiohttp import web

    got: list[tuple[str | None, bool]] = []
    secret_check = slack.sign

    async def receive(request: web.Request) -> web.Response:
        body = await request.read()
        stamp = int(request.headers["X-Slack-Request-Timestamp"])
        got.append(
            (
                request.headers.get("X-Slack-Retry-Num"),
                secret_check(body, stamp) == request.headers["X-Slack-Signature"],
            )
        )
        return web.Response(text="")

    app = web.Application()
    app.router.add_post("/slack/events", receive)
    runner = web.AppRunner(app)
    await runner.setup()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    try:
        slack.events_url = f"http://127.0.0.1:{port}/slack/events"
        payload = {"event_id": "Ev1", "type": "event_callback", "event": {"type": "app_mention"}}
        await slack.post_event(payload)
        await slack.post_event(payload, retry_num=1)
    finally:
        await runner.cleanup()
    assert got == [(None, True), ("1", True)]
    assert slack.http_deliveries == [("Ev1", 200), ("Ev1", 200)]
