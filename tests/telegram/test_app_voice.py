"""Voice notes end to end: the real Application on the fake Bot API, the real engine, and the
real openai SDK against the fake model server's chat and audio/transcriptions endpoints
(docs/inputs.md)."""

from __future__ import annotations

from pathlib import Path

from bot.telegram.app import parts
from engine.model.script import call, say
from tests.engine.helpers import settle
from tests.fakebot.server import FakeBotApi, FakeMessage
from tests.fakes.openai_server import FakeOpenAIServer
from tests.keys import chat
from tests.telegram.app_support import GROUP, OWNER, eventually
from tests.telegram.live import live_bot

OGG = b"OggS\x00\x02" + b"\x01" * 2000  # what the fake cares about: some bytes


def _transcript_message(api: FakeBotApi, chat_id: int) -> FakeMessage:
    return next(m for m in api.bot_messages(chat_id) if m.text.startswith("🎙"))


def _user_texts(server: FakeOpenAIServer) -> list[str]:
    return [
        m["content"]
        for body in server.chat_requests
        for m in body["messages"]
        if m["role"] == "user"
    ]


async def test_a_voice_note_is_offered_back_and_send_starts_a_turn_with_it(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    script = [
        call("list_files", {}, expect="rename the helper to slugify"),
        call("grep", {"pattern": "def "}),
        say("Renamed it."),
    ]
    async with live_bot(fake_api, tmp_path, script, transcribe=True) as live:
        server = live.model_server
        assert server is not None
        server.transcripts.append("Please rename the helper to slugify.")
        voice = fake_api.user_voice(OWNER, OWNER, OGG)
        await eventually(lambda: any(m.text.startswith("🎙") for m in fake_api.bot_messages(OWNER)))
        offer = _transcript_message(fake_api, OWNER)
        assert "Please rename the helper to slugify." in offer.text
        assert offer.reply_to == voice.message_id
        assert [[t for t, _ in row] for row in offer.buttons] == [["📨 Send", "🗑 Discard"]]
        (heard,) = server.transcriptions
        assert heard.model == "whisper-1" and heard.data == OGG
        assert heard.filename == f"voice-{voice.message_id}.ogg"
        assert server.chat_requests == []  # nothing reaches the agent before Send

        send = offer.buttons[0][0][1]
        qid = fake_api.press(OWNER, offer.message_id, send, user_id=OWNER)
        await eventually(
            lambda: any(m.text.startswith("Renamed it") for m in fake_api.bot_messages(OWNER))
        )
        sid = await live.engine.session_for_chat(chat(OWNER))
        await settle(live.engine, sid)
        await parts(live.app).tasks.drain()
        assert fake_api.callback_answers[qid]["text"] == "Sent to the agent."
        assert server.errors == []
        assert _user_texts(server)[0] == "Please rename the helper to slugify."
        shown = fake_api.message(OWNER, offer.message_id)
        assert shown.buttons == [] and "Sent to the agent." in shown.text
        answer = next(m for m in fake_api.bot_messages(OWNER) if m.text.startswith("Renamed"))
        assert answer.reply_to == voice.message_id  # the turn answers the voice note

        # A second press of the same button is out of date and starts nothing.
        again = fake_api.press_raw(OWNER, offer.message_id, send, user_id=OWNER)
        await eventually(lambda: again in fake_api.callback_answers)
        assert fake_api.callback_answers[again]["text"] == "This transcript is out of date."
        assert len(server.chat_requests) == 3


async def test_a_reply_with_a_corrected_text_sends_the_correction_instead(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    script = [say("Nothing renamed yet.", expect="status of the rename?")]
    async with live_bot(fake_api, tmp_path, script, transcribe=True) as live:
        server = live.model_server
        assert server is not None
        fake_api.user_voice(GROUP, OWNER, OGG)
        # In a group a voice note counts when it replies to the bot or follows a mention;
        # here the owner's voice note is sent in reply to nothing: chatter, not heard.
        await fake_api.drain()
        assert server.transcriptions == []
        anchor = fake_api.user_message(GROUP, OWNER, f"@{fake_api.username} status of the rename?")
        await eventually(lambda: len(fake_api.bot_messages(GROUP)) >= 1)
        sid = await live.engine.session_for_chat(chat(GROUP))
        await settle(live.engine, sid)
        bot_reply = fake_api.bot_messages(GROUP)[-1]
        assert anchor.message_id < bot_reply.message_id
        server.transcripts.append("Please rename the hell pair to slug if I.")
        server.play([say("Slugify it is.", expect="rename the helper to slugify")])
        fake_api.user_voice(GROUP, OWNER, OGG, reply_to=bot_reply.message_id)
        await eventually(lambda: any(m.text.startswith("🎙") for m in fake_api.bot_messages(GROUP)))
        offer = _transcript_message(fake_api, GROUP)
        send = offer.buttons[0][0][1]
        fake_api.user_message(
            GROUP, OWNER, "Please rename the helper to slugify.", reply_to=offer.message_id
        )
        await eventually(
            lambda: any(m.text.startswith("Slugify it is") for m in fake_api.bot_messages(GROUP))
        )
        await settle(live.engine, sid)
        await parts(live.app).tasks.drain()
        assert server.errors == []
        texts = _user_texts(server)
        assert texts[-1] == "Please rename the helper to slugify."
        assert not any("hell pair" in t for t in texts)  # the wrong transcript never went
        shown = fake_api.message(GROUP, offer.message_id)
        assert shown.buttons == [] and "corrected text was sent instead" in shown.text
        # The transcript's buttons are spent: Send now is out of date.
        late = fake_api.press_raw(GROUP, offer.message_id, send, user_id=OWNER)
        await eventually(lambda: late in fake_api.callback_answers)
        assert fake_api.callback_answers[late]["text"] == "This transcript is out of date."


async def test_discard_drops_the_transcript(fake_api: FakeBotApi, tmp_path: Path) -> None:
    async with live_bot(fake_api, tmp_path, [say("unused")], transcribe=True) as live:
        server = live.model_server
        assert server is not None
        server.transcripts.append("never mind")
        fake_api.user_voice(OWNER, OWNER, OGG)
        await eventually(lambda: any(m.text.startswith("🎙") for m in fake_api.bot_messages(OWNER)))
        offer = _transcript_message(fake_api, OWNER)
        qid = fake_api.press(OWNER, offer.message_id, offer.buttons[0][1][1], user_id=OWNER)
        await eventually(lambda: qid in fake_api.callback_answers)
        await parts(live.app).tasks.drain()
        await parts(live.app).outbox.flush()
        assert fake_api.callback_answers[qid]["text"] == "Discarded."
        assert "Discarded." in fake_api.message(OWNER, offer.message_id).text
        assert server.chat_requests == []


async def test_voice_without_transcription_gets_one_line_saying_how_to_enable_it(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    async with live_bot(fake_api, tmp_path, [say("unused")]) as live:
        voice = fake_api.user_voice(OWNER, OWNER, OGG)
        await eventually(lambda: len(fake_api.bot_messages(OWNER)) >= 1)
        await parts(live.app).tasks.drain()
        (line,) = fake_api.bot_messages(OWNER)
        assert line.reply_to == voice.message_id
        assert (
            "PLANGATE_TRANSCRIBE_MODEL" in line.text and "PLANGATE_TRANSCRIBE_BASE_URL" in line.text
        )
        assert fake_api.count("getFile") == 0
        server = live.model_server
        assert server is not None and server.chat_requests == [] and server.transcriptions == []


async def test_a_transcription_server_answering_non_json_tells_the_owner_one_line(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    async with live_bot(fake_api, tmp_path, [say("unused")], transcribe=True) as live:
        server = live.model_server
        assert server is not None
        server.transcribe_raw = ("application/json", "<html>502 Bad Gateway</html>")
        voice = fake_api.user_voice(OWNER, OWNER, OGG)
        await eventually(lambda: len(fake_api.bot_messages(OWNER)) >= 1)
        await parts(live.app).tasks.drain()
        (line,) = fake_api.bot_messages(OWNER)
        assert line.reply_to == voice.message_id
        assert line.text.startswith("🎙 I could not transcribe that voice note")
        assert "not JSON" in line.text
        assert server.chat_requests == []


async def test_a_transcription_server_answering_html_is_a_failure_not_silence(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    async with live_bot(fake_api, tmp_path, [say("unused")], transcribe=True) as live:
        server = live.model_server
        assert server is not None
        server.transcribe_raw = ("text/html", "<html>502 Bad Gateway</html>")
        voice = fake_api.user_voice(OWNER, OWNER, OGG)
        await eventually(lambda: len(fake_api.bot_messages(OWNER)) >= 1)
        await parts(live.app).tasks.drain()
        (line,) = fake_api.bot_messages(OWNER)
        assert line.reply_to == voice.message_id
        # Not "I heard no words": the server said nothing a transcript could come from.
        assert line.text.startswith("🎙 I could not transcribe that voice note")
        assert "not JSON" in line.text
