"""Tool approvals end to end: the real Engine and SQLite, the real openai SDK against the fake
chat-completions server, the real PTB Application against the fake Bot API.

The model's tool results are checked by the script's ``expect``: a denial reaches the model
with its reason, or the script diverges and the test fails.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from bot.telegram.app import parts
from bot.telegram.keys import msg_id
from engine.events import ApprovalDecided, ApprovalRule
from engine.model.script import call, say
from tests.fakebot.server import FakeBotApi, FakeMessage
from tests.keys import chat, person
from tests.telegram.app_support import GROUP, OWNER, STALE, STRANGER, eventually
from tests.telegram.live import Live, button, labels, live_bot, until

ALLOW_ONCE = "✅ Allow once"
ALLOW_MKDIR = "♾ Allow “mkdir” for this session"
DENY = "⛔ Deny"
# A group: a non-owner can see and press the buttons there. Messages mention the bot.
CHAT = GROUP
BOT = "@plangate_test_bot "


def approval_messages(api: FakeBotApi) -> list[FakeMessage]:
    return [m for m in api.bot_messages(CHAT) if m.text.startswith("🔐")]


async def asked(api: FakeBotApi, count: int) -> FakeMessage:
    """Wait until the ``count``-th approval message is on screen; return it."""
    await eventually(lambda: len(approval_messages(api)) >= count)
    return approval_messages(api)[count - 1]


async def press(api: FakeBotApi, msg: FakeMessage, label: str, *, user_id: int = OWNER) -> str:
    """Press ``label`` on ``msg``; return the toast (or alert) text once answered."""
    qid = api.press(CHAT, msg.message_id, button(msg, label), user_id=user_id)
    await eventually(lambda: qid in api.callback_answers)
    return str(api.callback_answers[qid]["text"] or "")


async def decisions(live: Live, sid: str) -> list[str]:
    stored = await live.storage.log.read(sid, types=("approval/decided",))
    return [s.event.decision for s in stored if isinstance(s.event, ApprovalDecided)]


async def test_allow_once_deny_and_allow_for_the_session(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    script = [
        call("bash", {"command": "touch once.txt"}),
        call("bash", {"command": "touch twice.txt"}, expect="exit code 0"),
        call("bash", {"command": "mkdir -p d1"}, expect="denied: the owner denied"),
        call("bash", {"command": "mkdir d2"}, expect="exit code 0"),
        say("Made the folders.", expect="exit code 0"),
    ]
    async with live_bot(fake_api, tmp_path, script, allow_bash=(), bash_approval="always") as live:
        ws = live.workspace
        fake_api.user_message(CHAT, OWNER, BOT + "make some files")
        first = await asked(fake_api, 1)
        sid = await live.engine.session_for_chat(chat(CHAT))
        assert "Allow bash?" in first.text and "touch once.txt" in first.text
        # The session button names the rule it adds before the press.
        assert labels(first) == [ALLOW_ONCE, DENY, "♾ Allow “touch” for this session"]
        assert live.engine.pending_approval(sid) is not None  # the card data: waiting for you
        await parts(live.app).presenter.flush()
        status = await live.engine.command(sid, "status", "", actor=person(OWNER))
        assert "Waiting for you: allow bash touch once.txt?" in (status.reply or "")

        # A non-owner's press: the gate's alert, and the call still waits, not run.
        qid = fake_api.press(CHAT, first.message_id, button(first, DENY), user_id=STRANGER)
        await eventually(lambda: qid in fake_api.callback_answers)
        assert fake_api.callback_answers[qid]["show_alert"] is True
        await asyncio.sleep(0.1)
        assert not (ws / "once.txt").exists()
        assert live.engine.pending_approval(sid) is not None
        assert labels(fake_api.message(CHAT, first.message_id)) == labels(first)

        # Allow once: it runs, once; the next command asks again.
        once = button(first, ALLOW_ONCE)
        assert await press(fake_api, first, ALLOW_ONCE) == "Allowed once."
        second = await asked(fake_api, 2)
        assert (ws / "once.txt").exists()
        assert "touch twice.txt" in second.text
        await eventually(lambda: "Allowed once." in _text(fake_api, first))
        assert fake_api.message(CHAT, first.message_id).buttons == []

        # The first message pressed again: out of date, nothing runs.
        qid = fake_api.press_raw(CHAT, first.message_id, once, user_id=OWNER)
        await eventually(lambda: qid in fake_api.callback_answers)
        assert fake_api.callback_answers[qid]["text"] == STALE

        # Deny: not run, and the model reads why (the script's expect checks it).
        assert await press(fake_api, second, DENY) == "Denied."
        third = await asked(fake_api, 3)
        assert not (ws / "twice.txt").exists()
        assert "mkdir -p d1" in third.text

        # Allow for this session: the rule is the program (-p is an option, not a
        # subcommand), shown on the confirmation; the next mkdir runs without asking.
        assert labels(third) == [ALLOW_ONCE, DENY, ALLOW_MKDIR]
        assert await press(fake_api, third, ALLOW_MKDIR) == "Allowed for this session: mkdir"
        await until(lambda: _replied(fake_api, "Made the folders."))
        assert (ws / "d1").is_dir() and (ws / "d2").is_dir()
        assert len(approval_messages(fake_api)) == 3
        assert await decisions(live, sid) == ["once", "deny", "session"]
        assert live.engine.pending_approval(sid) is None

    # The session's rule replays after a restart: mkdir still runs without asking.
    after = [call("bash", {"command": "mkdir d3"}), say("Again.", expect="exit code 0")]
    async with live_bot(fake_api, tmp_path, after, allow_bash=(), bash_approval="always") as live:
        fake_api.user_message(CHAT, OWNER, BOT + "one more folder")
        await until(lambda: _replied(fake_api, "Again."))
        assert (live.workspace / "d3").is_dir()
        assert len(approval_messages(fake_api)) == 3
        rules = await live.storage.log.read(sid, types=("approval/rule",))
        assert [s.event.words for s in rules if isinstance(s.event, ApprovalRule)] == [["mkdir"]]


async def test_an_unanswered_request_is_denied_after_the_timeout(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    script = [
        call("bash", {"command": "touch late.txt"}),
        say("Nobody answered.", expect="nobody answered the approval request within 0.3s"),
    ]
    async with live_bot(
        fake_api, tmp_path, script, allow_bash=(), bash_approval="always", approval_timeout_s=0.3
    ) as live:
        fake_api.user_message(CHAT, OWNER, BOT + "touch a file")
        msg = await asked(fake_api, 1)
        once = button(msg, ALLOW_ONCE)
        await until(lambda: _replied(fake_api, "Nobody answered."))
        sid = await live.engine.session_for_chat(chat(CHAT))
        assert not (live.workspace / "late.txt").exists()
        assert await decisions(live, sid) == ["timeout"]
        await eventually(lambda: "Nobody answered in time" in _text(fake_api, msg))
        # A press that comes after the timeout: out of date, and nothing runs.
        qid = fake_api.press_raw(CHAT, msg.message_id, once, user_id=OWNER)
        await eventually(lambda: qid in fake_api.callback_answers)
        assert fake_api.callback_answers[qid]["text"] == STALE
        await asyncio.sleep(0.1)
        assert not (live.workspace / "late.txt").exists()


async def test_stop_denies_a_waiting_request_at_once(fake_api: FakeBotApi, tmp_path: Path) -> None:
    script = [call("bash", {"command": "touch never.txt"})]
    async with live_bot(fake_api, tmp_path, script, allow_bash=(), bash_approval="always") as live:
        fake_api.user_message(CHAT, OWNER, BOT + "touch a file")
        msg = await asked(fake_api, 1)
        sid = await live.engine.session_for_chat(chat(CHAT))
        fake_api.user_message(CHAT, OWNER, "/stop")
        await eventually(lambda: _stopped(live, sid))
        assert await decisions(live, sid) == ["stopped"]
        await eventually(lambda: "Stopped: denied" in _text(fake_api, msg))
        assert not (live.workspace / "never.txt").exists()
        results = await live.storage.log.read(sid, types=("tool/result",))
        assert [s.event.content for s in results][-1].startswith("cancelled: the user stopped")


async def test_a_stop_while_the_request_is_posted_leaves_no_live_buttons(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    script = [call("bash", {"command": "touch never.txt"})]
    async with live_bot(fake_api, tmp_path, script, allow_bash=(), bash_approval="always") as live:
        # Telegram answers the approval message 429 once: it is posted a few seconds later.
        fake_api.fail_next("sendMessage", 1, retry_after=2)
        fake_api.user_message(CHAT, OWNER, BOT + "touch a file")
        await eventually(lambda: fake_api.count("sendMessage") == 1)  # answered 429
        sid = await live.engine.session_for_chat(chat(CHAT))
        assert live.engine.pending_approval(sid) is not None
        assert approval_messages(fake_api) == []  # still being posted
        fake_api.user_message(CHAT, OWNER, "/stop")
        await eventually(lambda: _stopped(live, sid))
        assert await decisions(live, sid) == ["stopped"]
        # The message arrives after the stop; its buttons go all the same.
        msg = await asked(fake_api, 1)
        await eventually(lambda: "Stopped: denied" in _text(fake_api, msg))
        assert fake_api.message(CHAT, msg.message_id).buttons == []
        assert not (live.workspace / "never.txt").exists()


async def test_a_goal_round_that_needs_approval_blocks_then_allow_and_resume_continue(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    script = [
        # Round 1 (unattended): denied at once, the goal blocks; the round ends there.
        call("bash", {"command": "touch goal.txt"}),
        # Round 2, after Allow + Resume: the rule lets it run, and the goal completes.
        call("bash", {"command": "touch goal.txt"}),
        call(
            "update_goal",
            {"status": "complete", "reason": "goal.txt exists"},
            expect="exit code 0",
        ),
    ]
    async with live_bot(fake_api, tmp_path, script, allow_bash=(), bash_approval="always") as live:
        fake_api.user_message(CHAT, OWNER, "/goal create goal.txt")
        notice = await asked(fake_api, 1)
        sid = await live.engine.session_for_chat(chat(CHAT))
        assert "Not run: bash needs your approval" in notice.text
        assert "touch goal.txt" in notice.text
        allow = "✅ Allow “touch” for this session"
        assert labels(notice) == [allow]

        async def phase(expected: str) -> bool:
            goal = await live.engine.goals.get(sid)
            return goal is not None and goal.phase == expected

        await until(lambda: phase("blocked"))
        goal = await live.engine.goals.get(sid)
        assert goal is not None and goal.blocked is not None
        assert goal.blocked.code == "needs-approval"
        assert "touch goal.txt" in goal.blocked.message
        assert not (live.workspace / "goal.txt").exists()
        assert live.engine.pending_approval(sid) is None  # nothing waits on a person
        assert await decisions(live, sid) == ["unattended"]

        # A non-owner's Allow changes nothing.
        qid = fake_api.press(CHAT, notice.message_id, button(notice, allow), user_id=STRANGER)
        await eventually(lambda: qid in fake_api.callback_answers)
        assert fake_api.callback_answers[qid]["show_alert"] is True
        assert live.engine.approvals.rules(sid) == ()

        toast = await press(fake_api, notice, allow)
        assert toast.startswith("Allowed for this session: touch")
        assert live.engine.approvals.rules(sid) == (("touch",),)
        # The press is answered before its redraw is queued: wait for the card, bounded.
        stored = await live.engine.goal_card(sid)  # the engine keeps where the goal card is
        assert stored.card_id is not None
        card_id = msg_id(stored.card_id)
        await eventually(lambda: "needs-approval" in fake_api.message(CHAT, card_id).text)
        card = fake_api.message(CHAT, card_id)
        fake_api.press(CHAT, card.message_id, button(card, "▶️ Resume"), user_id=OWNER)
        await until(lambda: phase("complete"))
        assert (live.workspace / "goal.txt").exists()
        assert len(approval_messages(fake_api)) == 1


def _stopped(live: Live, sid: str) -> bool:
    return live.engine.agents.is_idle(sid) and live.engine.pending_approval(sid) is None


async def _replied(api: FakeBotApi, text: str) -> bool:
    return any(m.text == text for m in api.bot_messages(CHAT))


def _text(api: FakeBotApi, msg: FakeMessage) -> str:
    return api.message(CHAT, msg.message_id).text


async def test_with_writes_asking_a_write_shows_its_diff_inline_or_as_a_patch(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    workspace = tmp_path / "work"
    workspace.mkdir()
    (workspace / "app.py").write_text("print('old')\n", encoding="utf-8")
    big = "".join(f"line {i}\n" for i in range(400))
    (workspace / "big.txt").write_text(big, encoding="utf-8")
    script = [
        call("edit_file", {"path": "app.py", "old_text": "old", "new_text": "new"}),
        call(
            "write_file",
            {"path": "big.txt", "content": "short now\n"},
            expect="replaced 1 occurrence",
        ),
        call("write_file", {"path": "app.py", "content": "print('again')\n"}, expect="denied"),
        say("Written.", expect="wrote 15 characters"),
    ]
    async with live_bot(
        fake_api, tmp_path, script, allow_bash=(), bash_approval="always", ask_writes=True
    ) as live:
        fake_api.user_message(CHAT, OWNER, BOT + "change the files")
        first = await asked(fake_api, 1)
        assert "Allow edit_file?" in first.text and "edit_file app.py" in first.text
        assert "-print('old')" in first.text and "+print('new')" in first.text
        assert await press(fake_api, first, "♾ Allow “writes to app.py” for this session") == (
            "Allowed for this session: writes to app.py"
        )

        # The long diff goes as a document above the message; Deny leaves the file alone.
        second = await asked(fake_api, 2)
        assert "big.txt.patch" in second.text
        [doc] = [m for m in fake_api.bot_messages(CHAT) if m.document is not None]
        assert doc.document is not None and doc.document["file_name"] == "big.txt.patch"
        patch = fake_api.files[f"documents/{doc.document['file_id']}"].decode("utf-8")
        assert "-line 399" in patch and "+short now" in patch
        assert await press(fake_api, second, DENY) == "Denied."

        # app.py was allowed for the session: its next write runs without asking.
        await until(lambda: _replied(fake_api, "Written."))
        assert (workspace / "app.py").read_text(encoding="utf-8") == "print('again')\n"
        assert (workspace / "big.txt").read_text(encoding="utf-8") == big
        assert len(approval_messages(fake_api)) == 2
        sid = await live.engine.session_for_chat(chat(CHAT))
        assert await decisions(live, sid) == ["session", "deny"]


async def test_a_restart_never_turns_a_waiting_request_into_an_allow(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    async with live_bot(
        fake_api,
        tmp_path,
        [call("bash", {"command": "touch after.txt"})],
        allow_bash=(),
        bash_approval="always",
    ) as live:
        fake_api.user_message(CHAT, OWNER, BOT + "touch a file")
        msg = await asked(fake_api, 1)
        once = button(msg, ALLOW_ONCE)
        sid = await live.engine.session_for_chat(chat(CHAT))
    # plangate stopped while the owner had not answered; the old button comes back dead.
    async with live_bot(
        fake_api, tmp_path, [say("unused")], allow_bash=(), bash_approval="always"
    ) as live:
        qid = fake_api.press_raw(CHAT, msg.message_id, once, user_id=OWNER)
        await eventually(lambda: qid in fake_api.callback_answers)
        assert fake_api.callback_answers[qid]["text"] == STALE
        assert live.engine.pending_approval(sid) is None
        assert await decisions(live, sid) == ["stopped"]
        assert not (live.workspace / "after.txt").exists()
