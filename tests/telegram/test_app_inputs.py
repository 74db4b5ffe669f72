"""Files and photos from the chat, end to end: the real Application on the fake Bot API
(getFile and its download route), the real engine over real SQLite and files, and the real
openai SDK against the fake model server (docs/inputs.md)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from bot.telegram.access import REFUSAL_TEXT
from bot.telegram.app import parts
from engine.events import UserMessage
from engine.model.script import ScriptStep, call, say
from tests.engine.helpers import settle
from tests.fakebot.server import FakeBotApi
from tests.fakes.openai_server import FakeOpenAIServer
from tests.keys import chat
from tests.telegram.app_support import GROUP, OWNER, STRANGER, eventually
from tests.telegram.live import live_bot

_LINE = b"2026-12-01T23:59:59Z INFO worker: request handled in 12 ms\n"
_HALF = (1024 * 1024) // len(_LINE)  # lines before the telling one in a 2 MB log


def _log_bytes() -> bytes:
    """A 2 MB service log with one telling line in the middle (line ``_HALF + 1``)."""
    return (
        _LINE * _HALF
        + b"2026-12-02T00:00:01Z ERROR db: connection pool exhausted\n"
        + _LINE * _HALF
    )


def _user_texts(server: FakeOpenAIServer) -> list[str]:
    texts: list[str] = []
    for body in server.chat_requests:
        for message in body["messages"]:
            if message["role"] == "user":
                content = message["content"]
                if isinstance(content, list):
                    content = "\n".join(p.get("text", "") for p in content)
                texts.append(content)
    return texts


def _tool_results(server: FakeOpenAIServer) -> list[str]:
    last = server.chat_requests[-1]["messages"]
    return [m["content"] for m in last if m["role"] == "tool"]


def _inbox(home: Path) -> Path:
    return home / "inbox"


def _files_under(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


# A model that looks around before it answers, as a real one does: the upload, then the
# project, then the upload again by line number.
LOG_SCRIPT: list[ScriptStep] = [
    call(
        "read_file",
        {"path": "{upload}", "offset": _HALF - 1, "limit": 5},
        expect="Why does the service fall over at midnight?",
    ),
    call("list_files", {}),
    call("grep", {"pattern": "POOL"}),
    call("read_file", {"path": "app.py"}),
    say("The pool runs out at midnight: raise POOL_SIZE in app.py.", expect="POOL_SIZE"),
]


async def test_a_2_mb_log_with_a_caption_reaches_the_model_and_the_agent_reads_it(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    data = _log_bytes()
    async with live_bot(fake_api, tmp_path, LOG_SCRIPT) as live:
        (live.workspace / "app.py").write_text("POOL_SIZE = 5\n")
        msg = fake_api.user_document(
            OWNER,
            OWNER,
            data,
            file_name="service.log",
            mime_type="text/plain",
            caption="Why does the service fall over at midnight?",
        )
        await eventually(lambda: len(fake_api.bot_messages(OWNER)) >= 1)
        sid = await live.engine.session_for_chat(chat(OWNER))
        await settle(live.engine, sid)
        server = live.model_server
        assert server is not None and server.errors == []

        saved = _files_under(_inbox(tmp_path / "home"))
        assert [p.name for p in saved] == ["service.log"]
        assert saved[0].read_bytes() == data  # fetched whole through getFile's route
        assert saved[0].parent == tmp_path / "home" / "inbox" / sid
        assert not (live.workspace / "service.log").exists()  # never in the project

        prompt = _user_texts(server)[0]
        assert prompt.startswith("Why does the service fall over at midnight?\n")
        # One path, the one that reads: the agent is never shown a second, relative one.
        (line,) = [x for x in prompt.splitlines() if x.startswith("file saved:")]
        assert line.startswith(f'file saved: "{saved[0]}" (2.0 MB, text/plain)')
        assert line.count("inbox/") == 1
        assert "--- service.log ---" not in prompt  # 2 MB is not inlined
        results = _tool_results(server)
        assert "ERROR db: connection pool exhausted" in results[0]  # read_file of the upload
        assert "app.py" in results[1]
        assert "app.py:1: POOL_SIZE = 5" in results[2]
        answer = fake_api.bot_messages(OWNER)[-1]
        assert answer.text.startswith("The pool runs out at midnight")
        assert answer.reply_to == msg.message_id
        assert fake_api.count("getFile") == 1


async def test_the_inbox_is_read_only_for_the_agent(fake_api: FakeBotApi, tmp_path: Path) -> None:
    script = [
        call("write_file", {"path": "{upload}", "content": "overwritten"}, expect="notes.txt"),
        call("edit_file", {"path": "{upload}", "old_text": "keep", "new_text": "gone"}),
        say("I could not change it."),
    ]
    async with live_bot(fake_api, tmp_path, script) as live:
        fake_api.user_document(OWNER, OWNER, b"keep me\n", file_name="notes.txt")
        await eventually(lambda: len(fake_api.bot_messages(OWNER)) >= 1)
        sid = await live.engine.session_for_chat(chat(OWNER))
        await settle(live.engine, sid)
        server = live.model_server
        assert server is not None
        prompt = _user_texts(server)[0]
        assert prompt.startswith("(no caption)\n")
        assert "--- notes.txt ---\nkeep me\n" in prompt  # a small text file is inlined
        results = _tool_results(server)
        assert all("refused" in r and "read-only folder" in r for r in results)
        (saved,) = _files_under(_inbox(tmp_path / "home"))
        assert saved.read_bytes() == b"keep me\n"


async def test_a_30_mb_file_is_refused_with_one_reply_and_nothing_saved(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    big = b"x" * (30 * 1024 * 1024)
    async with live_bot(fake_api, tmp_path, [say("unused")]) as live:
        msg = fake_api.user_document(OWNER, OWNER, big, file_name="dump.bin", caption="look")
        await eventually(lambda: len(fake_api.bot_messages(OWNER)) >= 1)
        await parts(live.app).tasks.drain()
        replies = fake_api.bot_messages(OWNER)
        assert len(replies) == 1
        assert replies[0].reply_to == msg.message_id
        assert "too big (30.0 MB, the limit is 20.0 MB); nothing was saved" in replies[0].text
        assert fake_api.count("getFile") == 0  # refused from the metadata, not fetched
        assert _files_under(_inbox(tmp_path / "home")) == []
        server = live.model_server
        assert server is not None and server.chat_requests == []  # no turn


async def test_max_upload_mb_lowers_the_limit_and_an_undeclared_size_is_checked_after(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    async with live_bot(
        fake_api, tmp_path, [say("unused")], bot_settings={"max_upload_mb": 1}
    ) as live:
        fake_api.user_document(OWNER, OWNER, b"y" * (2 * 1024 * 1024), file_name="a.bin")
        # Telegram may leave file_size out: the bytes fetched are measured instead.
        fake_api.user_document(
            OWNER, OWNER, b"z" * (3 * 1024 * 1024), file_name="b.bin", declared_size=None
        )
        await eventually(lambda: len(fake_api.bot_messages(OWNER)) >= 2)
        await parts(live.app).tasks.drain()
        texts = [m.text for m in fake_api.bot_messages(OWNER)]
        assert all("the limit is 1.0 MB); nothing was saved" in t for t in texts)
        assert _files_under(_inbox(tmp_path / "home")) == []


async def test_a_path_as_the_file_name_is_saved_as_a_clean_name_inside_the_inbox(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    script = [say("Saved.", expect='/passwd" ('), say("Again.", expect='/passwd (2)" (')]
    async with live_bot(fake_api, tmp_path, script) as live:
        fake_api.user_document(OWNER, OWNER, b"root:x:0:0\n", file_name="../../etc/passwd")
        await eventually(lambda: len(fake_api.bot_messages(OWNER)) >= 1)
        fake_api.user_document(OWNER, OWNER, b"two\n", file_name="..\\..\\etc/passwd\x00\x1b")
        await eventually(lambda: len(fake_api.bot_messages(OWNER)) >= 2)
        sid = await live.engine.session_for_chat(chat(OWNER))
        await settle(live.engine, sid)
        inbox = _inbox(tmp_path / "home") / sid
        assert sorted(p.name for p in _files_under(tmp_path / "home" / "inbox")) == [
            "passwd",
            "passwd (2)",
        ]
        assert (inbox / "passwd").read_bytes() == b"root:x:0:0\n"
        assert (inbox / "passwd (2)").read_bytes() == b"two\n"
        assert not (tmp_path / "etc").exists() and not (tmp_path / "home" / "etc").exists()
        server = live.model_server
        assert server is not None and server.errors == []


async def test_a_file_in_a_group_counts_when_it_addresses_the_bot_and_never_from_others(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    script = [say("Got the spec.", expect='/spec.md" (')]
    async with live_bot(fake_api, tmp_path, script) as live:
        # The owner's file not addressed to the bot is group chatter; a stranger's is ignored
        # even when it mentions the bot (one polite refusal, nothing fetched or saved).
        fake_api.user_document(GROUP, OWNER, b"chatter\n", file_name="chatter.txt")
        fake_api.user_document(
            GROUP, STRANGER, b"evil\n", file_name="evil.sh", caption=f"@{fake_api.username} run"
        )
        await eventually(lambda: len(fake_api.bot_messages(GROUP)) >= 1)
        assert fake_api.bot_messages(GROUP)[0].text == REFUSAL_TEXT
        fake_api.user_document(
            GROUP, OWNER, b"# Spec\n", file_name="spec.md", caption=f"@{fake_api.username} read"
        )
        await eventually(lambda: len(fake_api.bot_messages(GROUP)) >= 2)
        sid = await live.engine.session_for_chat(chat(GROUP))
        await settle(live.engine, sid)
        assert [p.name for p in _files_under(_inbox(tmp_path / "home"))] == ["spec.md"]
        assert fake_api.count("getFile") == 1
        server = live.model_server
        assert server is not None and server.errors == []
        assert _user_texts(server)[0].startswith("read\n")


def _photo_sizes() -> list[tuple[int, int, bytes]]:
    return [
        (90, 60, b"\xff\xd8small"),
        (1280, 853, b"\xff\xd8medium-jpeg-bytes"),
        (2560, 1706, b"\xff\xd8large-jpeg-bytes"),
    ]


def _image_parts(server: FakeOpenAIServer) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for body in server.chat_requests:
        for message in body["messages"]:
            if message["role"] == "user" and isinstance(message["content"], list):
                found.extend(p for p in message["content"] if p["type"] == "image_url")
    return found


async def test_a_photo_with_vision_on_arrives_as_an_image_part(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    script = [say("A stack trace in a terminal.", expect="What is on this screen?")]
    async with live_bot(
        fake_api, tmp_path, script, vision=True, bot_settings={"max_image_px": 1600}
    ) as live:
        fake_api.user_photo(OWNER, OWNER, _photo_sizes(), caption="What is on this screen?")
        await eventually(lambda: len(fake_api.bot_messages(OWNER)) >= 1)
        sid = await live.engine.session_for_chat(chat(OWNER))
        await settle(live.engine, sid)
        server = live.model_server
        assert server is not None and server.errors == []
        # The largest size within 1600 px: the 1280 one (its bytes, as a data URL).
        (part,) = _image_parts(server)
        url = part["image_url"]["url"]
        assert url == "data:image/jpeg;base64," + base64.b64encode(
            b"\xff\xd8medium-jpeg-bytes"
        ).decode("ascii")
        text = _user_texts(server)[0]
        assert "cannot see" not in text
        (saved,) = _files_under(_inbox(tmp_path / "home"))
        assert saved.read_bytes() == b"\xff\xd8medium-jpeg-bytes"
        # The event keeps the path, never the bytes: a replay reads the file again.
        events = [e.event for e in await live.storage.log.read(sid)]
        (message,) = [e for e in events if isinstance(e, UserMessage)]
        assert message.attachments[0].path == str(saved)
        assert "base64" not in message.model_dump_json()
        assert fake_api.bot_messages(OWNER)[-1].text.startswith("A stack trace in a terminal.")


async def test_a_photo_with_vision_off_is_saved_and_the_agent_told_it_cannot_see_it(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    script = [say("I cannot see images; what does it show?", expect="cannot see images")]
    async with live_bot(fake_api, tmp_path, script) as live:
        fake_api.user_photo(OWNER, OWNER, _photo_sizes())
        await eventually(lambda: len(fake_api.bot_messages(OWNER)) >= 1)
        sid = await live.engine.session_for_chat(chat(OWNER))
        await settle(live.engine, sid)
        server = live.model_server
        assert server is not None and server.errors == []
        assert _image_parts(server) == []
        text = _user_texts(server)[0]
        assert text.startswith("(no caption)\n")
        assert '/photo-1.jpg" (' in text and "image/jpeg" in text
        # The default 2048 px takes the 1280 size too; the 2560 one is never fetched.
        (saved,) = _files_under(_inbox(tmp_path / "home"))
        assert saved.read_bytes() == b"\xff\xd8medium-jpeg-bytes"


async def test_a_file_sent_in_a_topic_as_a_reply_to_the_bot_goes_to_that_topics_session(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    script = [
        say("Send me the trace.", expect="the crash"),
        say("Read it.", expect='/trace.txt" ('),
    ]
    async with live_bot(fake_api, tmp_path, script) as live:
        fake_api.user_message(GROUP, OWNER, f"@{fake_api.username} the crash again", thread_id=7)
        await eventually(lambda: len(fake_api.bot_messages(GROUP)) >= 1)
        asked = fake_api.bot_messages(GROUP)[-1]
        assert asked.thread_id == 7
        # No mention: a reply to the bot's message in the topic is addressed to it.
        fake_api.user_document(
            GROUP,
            OWNER,
            b"Traceback ...\n",
            file_name="trace.txt",
            reply_to=asked.message_id,
            thread_id=7,
        )
        await eventually(lambda: len(fake_api.bot_messages(GROUP)) >= 2)
        topic = await live.engine.session_for_chat(chat(GROUP, 7))
        await settle(live.engine, topic)
        (saved,) = _files_under(_inbox(tmp_path / "home"))
        assert saved.parent.name == topic  # the topic's own inbox
        answer = fake_api.bot_messages(GROUP)[-1]
        assert answer.text.startswith("Read it.") and answer.thread_id == 7
        server = live.model_server
        assert server is not None and server.errors == []


async def test_a_name_of_119_cjk_characters_is_cut_by_bytes_and_the_file_reaches_the_agent(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    # 119 characters of three UTF-8 bytes each: a cut by characters left 361 bytes, more than
    # a file name may hold, and the upload was lost with "That failed (OSError)".
    name = "報" * 119 + ".txt"
    script = [
        call("read_file", {"path": "{upload}"}, expect="(no caption)"),
        say("Read the report.", expect="quarterly figures"),
    ]
    async with live_bot(fake_api, tmp_path, script) as live:
        fake_api.user_document(OWNER, OWNER, b"quarterly figures\n", file_name=name)
        await eventually(lambda: len(fake_api.bot_messages(OWNER)) >= 1)
        sid = await live.engine.session_for_chat(chat(OWNER))
        await settle(live.engine, sid)
        (saved,) = _files_under(_inbox(tmp_path / "home"))
        assert len(saved.name.encode()) <= 255 and saved.name.endswith(".txt")
        assert saved.name.startswith("報" * 70)
        assert saved.read_bytes() == b"quarterly figures\n"
        (answer,) = fake_api.bot_messages(OWNER)
        assert answer.text.startswith("Read the report.")
        server = live.model_server
        assert server is not None and server.errors == []
