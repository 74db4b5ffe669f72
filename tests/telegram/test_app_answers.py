"""Long answers as a summary plus answer.md, and the send_file tool, end to end: the real
Application on the fake Bot API, the real engine, the real openai SDK on the fake model server
(docs/inputs.md)."""

from __future__ import annotations

from pathlib import Path

from engine.model.script import call, say
from tests.engine.helpers import settle
from tests.fakebot.server import FakeBotApi, FakeMessage
from tests.keys import chat
from tests.telegram.app_support import GROUP, OWNER, eventually
from tests.telegram.live import live_bot


def _long_answer() -> str:
    head = "The flaky test comes from a shared temp folder; details below."
    sections = [
        f"## Finding {i}\n\n" + f"Step {i} of the analysis looked at module m{i}. " * 22
        for i in range(1, 21)
    ]
    text = head + "\n\n" + "\n\n".join(sections)
    assert len(text) > 20_000
    return text[:20_000]


def _documents(api: FakeBotApi, chat_id: int) -> list[FakeMessage]:
    return [m for m in api.bot_messages(chat_id) if m.document is not None]


async def test_a_20000_character_answer_is_one_summary_and_one_answer_md(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    answer = _long_answer()
    script = [
        call("list_files", {}),
        call("grep", {"pattern": "tmp"}),
        call("read_file", {"path": "test_io.py"}),
        say(answer),
    ]
    async with live_bot(fake_api, tmp_path, script) as live:
        (live.workspace / "test_io.py").write_text("def test_io(tmp):\n    pass\n")
        opening = fake_api.user_message(GROUP, OWNER, f"@{fake_api.username} why is it flaky?")
        await eventually(lambda: len(_documents(fake_api, GROUP)) >= 1)
        sid = await live.engine.session_for_chat(chat(GROUP))
        await settle(live.engine, sid)
        sent = fake_api.bot_messages(GROUP)
        texts = [m for m in sent if m.document is None and "Finding" not in m.text]
        summary = [m for m in sent if m.document is None and m.text.startswith("The flaky")]
        (doc,) = _documents(fake_api, GROUP)
        assert len(summary) == 1 and summary[0].reply_to == opening.message_id
        assert "The whole answer (20,000 characters) is attached as answer.md." in summary[0].text
        assert "Finding 1" not in summary[0].text  # the first paragraph only
        assert not [m for m in sent if m.document is None and "Finding" in m.text]  # no wall
        assert doc.document is not None and doc.document["file_name"] == "answer.md"
        assert doc.reply_to == opening.message_id
        assert fake_api.files[f"documents/{doc.document['file_id']}"] == answer.encode()
        assert summary[0].message_id < doc.message_id  # the summary first
        assert texts == summary  # the summary is the one text message


async def test_an_answer_under_the_limit_is_still_messages(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    answer = "\n\n".join(f"Paragraph {i}: " + "words " * 70 for i in range(12))  # ~5,000
    async with live_bot(fake_api, tmp_path, [say(answer)]) as live:
        fake_api.user_message(OWNER, OWNER, "explain")
        await eventually(lambda: len(fake_api.bot_messages(OWNER)) >= 2)
        await settle(live.engine, await live.engine.session_for_chat(chat(OWNER)))
        sent = fake_api.bot_messages(OWNER)
        assert _documents(fake_api, OWNER) == []
        assert sent[0].text.startswith("Paragraph 0:") and len(sent) == 2


async def test_reply_document_chars_sets_the_limit(fake_api: FakeBotApi, tmp_path: Path) -> None:
    answer = "Short summary first.\n\n" + "more detail " * 100  # ~1,200 characters
    async with live_bot(
        fake_api, tmp_path, [say(answer)], bot_settings={"reply_document_chars": 1000}
    ) as live:
        fake_api.user_message(OWNER, OWNER, "explain")
        await eventually(lambda: len(_documents(fake_api, OWNER)) == 1)
        await settle(live.engine, await live.engine.session_for_chat(chat(OWNER)))
        assert fake_api.bot_messages(OWNER)[0].text.startswith("Short summary first.")


async def test_send_file_attaches_a_workspace_file_and_refuses_what_it_may_not_read(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_text("TOKEN=abc")
    script = [
        call("list_files", {}),
        call("read_file", {"path": "report.txt"}),
        call("send_file", {"path": "report.txt", "caption": "The test report"}),
        call("send_file", {"path": "../secret.txt"}),
        call("send_file", {"path": "big.bin"}),
        call("send_file", {"path": "missing.txt"}),
        say("Sent the report.", expect="does not exist"),
    ]
    async with live_bot(fake_api, tmp_path, script) as live:
        (live.workspace / "report.txt").write_text("3 passed\n")
        with open(live.workspace / "big.bin", "wb") as handle:
            handle.truncate(21 * 1024 * 1024)  # sparse: 21 MB on paper
        fake_api.user_message(OWNER, OWNER, "run the tests and send me the report")
        sid = await live.engine.session_for_chat(chat(OWNER))
        await eventually(
            lambda: any(m.text.startswith("Sent the report.") for m in fake_api.bot_messages(OWNER))
        )
        await settle(live.engine, sid)
        server = live.model_server
        assert server is not None and server.errors == []
        results = [
            m["content"] for m in server.chat_requests[-1]["messages"] if m["role"] == "tool"
        ]
        assert results[2].startswith("sent report.txt (")
        assert "outside the workspace" in results[3] and "TOKEN" not in results[3]
        assert "at most 20.0 MB" in results[4]
        assert "does not exist" in results[5]
        (doc,) = _documents(fake_api, OWNER)
        assert doc.document is not None and doc.document["file_name"] == "report.txt"
        assert doc.text == "The test report"
        assert (
            fake_api.files[f"documents/{doc.document['file_id']}"]
            == (live.workspace / "report.txt").read_bytes()
        )
