"""The sandbox is the boundary: an approved plan does real work, and approvals are only asked
to leave the sandbox, one message per request, and only where someone can answer.

The real engine over real SQLite and files, real bubblewrap, the real openai SDK against the
fake chat-completions server, the real PTB Application against the fake Bot API in a group with
Telegram's 20-a-minute limit on and the shipped pacing. The scripted agent reads and greps
before it writes, like a real one; its ``expect`` checks what each tool call returned.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from bot.telegram.app import parts
from engine.events import ApprovalDecided, ToolResult
from engine.model.script import ScriptedCall, ScriptStep, call, say
from tests.engine.helpers import PLANNING, settle
from tests.fakebot.server import FakeBotApi, FakeMessage
from tests.keys import chat
from tests.telegram.app_support import GROUP, OWNER, eventually
from tests.telegram.live import Live, button, card, labels, live_bot, until

APPROVE = "✅ Approve"
ALLOW_ONCE = "✅ Allow once"
DENY = "⛔ Deny"
RESUME = "▶️ Resume"
BOT = "@plangate_test_bot "

THREE_STEPS = """# Tidy the utilities

## Context
- **Problem:** The project has no helpers for slugs.
- **Target state:** `util.slug()` exists, is tested, and the diff is reviewed.
- **Intent:** The owner asked for it.

## Implementation steps
1. Module — write util.py with slug(text).
   - Done when: `pytest -q` has run
2. Test — write test_util.py and run the tests.
3. Review — read the diff with git diff.
"""


def group(api: FakeBotApi) -> FakeBotApi:
    api.group_limit_per_minute = 20
    return api


def reads(*paths: str) -> ScriptStep:
    """One step of parallel reads, as a real agent explores before it writes."""
    calls = [ScriptedCall("list_files", {})]
    calls += [ScriptedCall("read_file", {"path": p}) for p in paths]
    return ScriptStep(tool_calls=tuple(calls))


def greps(*patterns: str) -> ScriptStep:
    return ScriptStep(tool_calls=tuple(ScriptedCall("grep", {"pattern": p}) for p in patterns))


def planning(md: str) -> list[ScriptStep]:
    return [
        call("plan", {"op": "init", "title": "Plan", "mode": "design"}),
        call("write_file", {"path": "{plan_md}", "content": md}, expect="Design plan created"),
        call("plan", {"op": "submit"}),
        say("The plan is ready for review."),
    ]


def approval_messages(api: FakeBotApi) -> list[FakeMessage]:
    return [m for m in api.bot_messages(GROUP) if m.text.startswith("🔐")]


async def decisions(live: Live, sid: str) -> list[str]:
    stored = await live.storage.log.read(sid, types=("approval/decided",))
    return [s.event.decision for s in stored if isinstance(s.event, ApprovalDecided)]


async def bash_results(live: Live, sid: str) -> list[str]:
    stored = await live.storage.log.read(sid, types=("tool/result",))
    return [
        s.event.content
        for s in stored
        if isinstance(s.event, ToolResult) and s.event.name == "bash"
    ]


async def archived(live: Live) -> bool:
    """The plan ended and was archived (every task done)."""
    return any((live.storage.home).glob("**/archive/*.json"))


async def review_and_approve(api: FakeBotApi, live: Live, request: str) -> str:
    """/plan in the group, the planning turn, Approve on the settled review card."""
    api.user_message(GROUP, OWNER, f"/plan {request}")
    await eventually(lambda: len(api.bot_messages(GROUP)) >= 1)
    sid = await live.engine.session_for_chat(chat(GROUP))
    await settle(live.engine, sid)
    await parts(live.app).presenter.flush()
    review = await card(api, live, sid)
    assert APPROVE in labels(review)
    api.press(GROUP, review.message_id, button(review, APPROVE), user_id=OWNER)
    return sid


def workspace_files(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "README.md").write_text("# tools\nSmall helpers.\n", encoding="utf-8")
    (work / "setup.cfg").write_text("[tool:pytest]\n", encoding="utf-8")
    return work


async def test_an_approved_plan_runs_its_tests_and_git_diff_without_one_approval_message(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    api = group(fake_api)
    work = workspace_files(tmp_path)
    git = ["git", "-C", str(work), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "start"], check=True)
    util = "def slug(text):\n    return '-'.join(text.lower().split())\n"
    test = "from util import slug\n\n\ndef test_slug():\n    assert slug('A b') == 'a-b'\n"
    task = [call("plan", {"op": "start"}), reads("README.md", "setup.cfg"), greps("slug", "def ")]
    execution = [
        *task,
        call("write_file", {"path": "util.py", "content": util}),
        call("bash", {"command": "pytest -q"}, expect="wrote"),
        call("plan", {"op": "complete", "evidence": "util.py"}, expect="exit code"),
        *task,
        call("write_file", {"path": "test_util.py", "content": test}),
        call("bash", {"command": "pytest -q"}, expect="wrote"),
        # Where pytest is not installed for the system python the sandbox sees, the agent
        # falls back as a real one would; either way nothing asks.
        call("bash", {"command": "python3 -c 'import test_util; test_util.test_slug()'"}),
        call("plan", {"op": "complete", "evidence": "tests pass"}, expect="exit code 0"),
        *task,
        call("bash", {"command": "git status --short && git diff --stat HEAD"}),
        call("plan", {"op": "complete", "evidence": "diff read"}, expect="util.py"),
        say("All three tasks are done."),
    ]
    async with live_bot(
        api,
        tmp_path,
        [*planning(THREE_STEPS), *execution],
        allow_bash=(),
        group_pacing=True,
        edit_interval_s=1.5,
    ) as live:
        sid = await review_and_approve(api, live, "tidy the utilities")
        await until(lambda: archived(live), timeout_s=90)
        await settle(live.engine, sid)
        results = await bash_results(live, sid)
        assert len(results) == 4 and all(r.startswith("exit code") for r in results), results
        assert approval_messages(api) == []
        assert await decisions(live, sid) == []
        # Written where the run works (the plan's own worktree, the workspace being a git
        # repository): the git status step saw them too (its expect).
        assert [p.name for p in tmp_path.glob("**/util.py")] == ["util.py"]
        assert [p.name for p in tmp_path.glob("**/test_util.py")] == ["test_util.py"]
        assert api.group_429s == 0


@asynccontextmanager
async def listening() -> AsyncIterator[tuple[int, list[bytes]]]:
    """A TCP server on the host's 127.0.0.1: reachable only from the host network namespace
    (inside a sandbox without network, 127.0.0.1 is the sandbox's own, empty loopback)."""
    got: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        got.append(await reader.read(100))
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield port, got
    finally:
        server.close()
        await server.wait_closed()


def reach(port: int, word: str) -> str:
    return f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo {word} >&3 && echo sent {word}"


async def test_a_network_call_asks_once_allow_once_runs_it_with_the_network_deny_goes_on(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    api = group(fake_api)
    workspace_files(tmp_path)
    async with listening() as (port, got):
        execution = [
            call("plan", {"op": "start"}),
            reads("README.md"),
            # Without the network the host's port is out of reach: the sandbox held.
            call("bash", {"command": reach(port, "offline")}),
            call(
                "bash",
                {"command": reach(port, "first"), "network": True, "reason": "call the local API"},
                expect="exit code 1",
            ),
            call("plan", {"op": "complete", "evidence": "reached"}, expect="sent first"),
            call("plan", {"op": "start"}),
            call("bash", {"command": reach(port, "second"), "network": True, "reason": "again"}),
            # The agent tries the denied call again: denied at once, nobody asked twice.
            call(
                "bash",
                {"command": reach(port, "second"), "network": True, "reason": "again"},
                expect="denied: the owner denied",
            ),
            call(
                "plan",
                {"op": "complete", "evidence": "done offline"},
                expect="already denied in this run",
            ),
            say("Both tasks are done."),
        ]
        async with live_bot(
            api, tmp_path, [*PLANNING, *execution], group_pacing=True, edit_interval_s=1.5
        ) as live:
            sid = await review_and_approve(api, live, "call the API")
            await eventually(lambda: len(approval_messages(api)) == 1, timeout_s=60)
            first = approval_messages(api)[0]
            assert "Allow bash with the network?" in first.text
            assert "Why: call the local API" in first.text and f"127.0.0.1/{port}" in first.text
            # A compound command can be allowed once, never by a rule.
            assert labels(first) == [ALLOW_ONCE, DENY]
            api.press(GROUP, first.message_id, button(first, ALLOW_ONCE), user_id=OWNER)
            await eventually(lambda: len(approval_messages(api)) == 2, timeout_s=60)
            assert got == [b"first\n"]  # it ran, and with the host's network
            second = approval_messages(api)[1]
            api.press(GROUP, second.message_id, button(second, DENY), user_id=OWNER)
            await until(lambda: archived(live), timeout_s=60)
            assert got == [b"first\n"]
            assert await decisions(live, sid) == ["once", "deny"]
            assert len(approval_messages(api)) == 2  # one message per request
            await eventually(lambda: api.message(GROUP, second.message_id).buttons == [])
            assert api.message(GROUP, first.message_id).buttons == []
            assert api.group_429s == 0


async def test_an_unanswered_network_request_pauses_the_run_with_resume(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    api = group(fake_api)
    workspace_files(tmp_path)
    async with listening() as (port, got):
        command = reach(port, "late")
        net = {"command": command, "network": True, "reason": "fetch"}
        execution = [
            call("plan", {"op": "start"}),
            reads("README.md"),
            call("bash", net),
            # After Resume the same request is asked again (a new run), and allowed.
            call("bash", net, expect="Continue"),
            call("plan", {"op": "complete", "evidence": "fetched"}, expect="sent late"),
            call("plan", {"op": "start"}),
            call("plan", {"op": "complete", "evidence": "nothing to do"}),
            say("Done."),
        ]
        async with live_bot(
            api,
            tmp_path,
            [*PLANNING, *execution],
            # A short timeout, so the card's edits come at the test pace (the shipped group
            # pacing would draw the card every 6 s): the group limit is on all the same.
            approval_timeout_s=2.0,
            edit_interval_s=0.2,
        ) as live:
            sid = await review_and_approve(api, live, "fetch it")
            await eventually(lambda: len(approval_messages(api)) == 1, timeout_s=60)
            first = approval_messages(api)[0]
            data = await live.engine.plan_card(sid)
            assert data.waiting is not None
            # The card says who the run waits for, while it waits.
            the_card = await card(api, live, sid)
            await eventually(
                lambda: (
                    "👉 Waiting for you: approval of `exec 3<>"
                    in api.message(GROUP, the_card.message_id).text
                ),
                timeout_s=30,
            )
            # Nobody answers: denied, the run pauses, the card says why and offers Resume.
            await eventually(
                lambda: (
                    "Paused: nobody answered the approval"
                    in api.message(GROUP, the_card.message_id).text
                ),
                timeout_s=30,
            )
            paused = api.message(GROUP, the_card.message_id)
            assert RESUME in labels(paused)
            assert await decisions(live, sid) == ["timeout"]
            assert got == []
            await eventually(
                lambda: "Nobody answered in time" in api.message(GROUP, first.message_id).text
            )
            assert api.message(GROUP, first.message_id).buttons == []

            api.press(GROUP, paused.message_id, button(paused, RESUME), user_id=OWNER)
            await eventually(lambda: len(approval_messages(api)) == 2, timeout_s=60)
            again = approval_messages(api)[1]
            api.press(GROUP, again.message_id, button(again, ALLOW_ONCE), user_id=OWNER)
            await until(lambda: archived(live), timeout_s=60)
            assert got == [b"late\n"]
            assert await decisions(live, sid) == ["timeout", "once"]


async def test_a_goal_round_that_asks_is_denied_at_once_and_blocks_naming_the_command(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    api = group(fake_api)
    workspace_files(tmp_path)
    script = [
        reads("README.md"),
        greps("TODO"),
        # The same call twice in one batch: both denied at once, listed once.
        ScriptStep(
            tool_calls=(
                ScriptedCall("bash", {"command": "git push origin main"}),
                ScriptedCall("bash", {"command": "git push origin main"}),
            )
        ),
        say("Could not push."),
    ]
    async with live_bot(
        api,
        tmp_path,
        script,
        ask_bash=(("git", "push"),),
        group_pacing=True,
        edit_interval_s=1.5,
    ) as live:
        api.user_message(GROUP, OWNER, "/goal publish the branch")
        sid = await live.engine.session_for_chat(chat(GROUP))

        async def blocked() -> bool:
            goal = await live.engine.goals.get(sid)
            return goal is not None and goal.phase == "blocked"

        await until(blocked, timeout_s=60)
        goal = await live.engine.goals.get(sid)
        assert goal is not None and goal.blocked is not None
        assert goal.blocked.code == "needs-approval"
        assert "git push origin main" in goal.blocked.message
        await settle(live.engine, sid)
        await eventually(lambda: len(approval_messages(api)) == 1, timeout_s=30)
        [notice] = approval_messages(api)
        assert "Not run: bash needs your approval" in notice.text
        assert "git push origin main" in notice.text
        assert live.engine.pending_approval(sid) is None  # nothing waited on a person
        assert await decisions(live, sid) == ["unattended", "unattended"]
        results = await bash_results(live, sid)
        assert results and all("nobody is there to answer" in r for r in results)
        await parts(live.app).presenter.flush()
        assert len(approval_messages(api)) == 1
        assert "Also not run" not in api.message(GROUP, notice.message_id).text


async def test_a_goal_round_with_thirty_asking_calls_posts_one_notice(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    api = group(fake_api)
    workspace_files(tmp_path)
    calls = tuple(
        ScriptedCall("bash", {"command": f"curl -s http://example.com/{i}", "network": True})
        for i in range(30)
    )
    script = [reads("README.md"), ScriptStep(tool_calls=calls), say("Nothing fetched.")]
    async with live_bot(api, tmp_path, script, group_pacing=True, edit_interval_s=1.5) as live:
        api.user_message(GROUP, OWNER, "/goal fetch the pages")
        sid = await live.engine.session_for_chat(chat(GROUP))

        async def denied_all() -> bool:
            return len(await decisions(live, sid)) == 30

        await until(denied_all, timeout_s=60)
        await settle(live.engine, sid)
        await parts(live.app).presenter.flush()
        [notice] = approval_messages(api)
        await eventually(
            lambda: "Also not run (29)" in api.message(GROUP, notice.message_id).text,
            timeout_s=30,
        )
        assert len(approval_messages(api)) == 1
        assert await decisions(live, sid) == ["unattended"] * 30
        assert api.group_429s == 0


async def test_a_session_rule_for_an_interpreter_allows_that_exact_command_only(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    work = workspace_files(tmp_path)
    (work / "x.py").write_text("open('ran.txt', 'a').write('x')\n", encoding="utf-8")
    script = [
        call("bash", {"command": "python3 x.py"}),
        call("bash", {"command": "python3 x.py"}, expect="exit code 0"),
        call("bash", {"command": "python3 -c 'print(1)'"}, expect="exit code 0"),
        say("Done.", expect="denied: the owner denied"),
    ]
    async with live_bot(fake_api, tmp_path, script, allow_bash=(), bash_approval="always") as live:
        fake_api.user_message(GROUP, OWNER, BOT + "run x.py twice")
        await eventually(lambda: len(approval_messages(fake_api)) == 1)
        first = approval_messages(fake_api)[0]
        exact = "♾ Allow this exact command for this session"
        assert labels(first) == [ALLOW_ONCE, DENY, exact]
        fake_api.press(GROUP, first.message_id, button(first, exact), user_id=OWNER)
        # The second python3 x.py runs without asking; python3 -c asks.
        await eventually(lambda: len(approval_messages(fake_api)) == 2)
        assert (work / "ran.txt").read_text() == "xx"
        second = approval_messages(fake_api)[1]
        assert "python3 -c" in second.text
        fake_api.press(GROUP, second.message_id, button(second, DENY), user_id=OWNER)
        sid = await live.engine.session_for_chat(chat(GROUP))
        await settle(live.engine, sid)
        assert await decisions(live, sid) == ["session", "deny"]
        assert live.engine.approvals.rules(sid) == ()  # no prefix rule: python3 stays asked


async def test_a_three_thousand_character_command_is_shown_whole_before_allow(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    work = workspace_files(tmp_path)
    command = "echo " + "a" * 2960 + " > /dev/null; touch HIDDEN_TAIL_RAN"
    assert len(command) >= 3000
    script = [call("bash", {"command": command}), say("Ran it.", expect="exit code 0")]
    async with live_bot(fake_api, tmp_path, script, allow_bash=(), bash_approval="always") as live:
        fake_api.user_message(GROUP, OWNER, BOT + "run the long one")
        await eventually(lambda: len(approval_messages(fake_api)) == 1)
        [msg] = approval_messages(fake_api)
        [doc] = [m for m in fake_api.bot_messages(GROUP) if m.document is not None]
        assert doc.document is not None and doc.document["file_name"] == "command.sh"
        assert doc.message_id < msg.message_id  # the whole command comes before the buttons
        whole = fake_api.files[f"documents/{doc.document['file_id']}"].decode("utf-8")
        assert whole == command
        assert "attached whole above as command.sh" in msg.text
        assert "3,000" in msg.text or f"{len(command):,}" in msg.text
        fake_api.press(GROUP, msg.message_id, button(msg, ALLOW_ONCE), user_id=OWNER)
        sid = await live.engine.session_for_chat(chat(GROUP))
        await eventually(lambda: (work / "HIDDEN_TAIL_RAN").exists())
        await settle(live.engine, sid)


async def test_a_session_rule_for_a_test_runner_says_it_trusts_the_projects_test_config(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    workspace_files(tmp_path)
    script = [
        call("bash", {"command": "pytest -q"}),
        call("bash", {"command": "git status"}, expect="denied: the owner denied"),
        say("Done.", expect="denied: the owner denied"),
    ]
    async with live_bot(fake_api, tmp_path, script, allow_bash=(), bash_approval="always") as live:
        fake_api.user_message(GROUP, OWNER, BOT + "run the tests")
        await eventually(lambda: len(approval_messages(fake_api)) == 1)
        runner = approval_messages(fake_api)[0]
        assert "trusts the project's own test configuration" in runner.text
        fake_api.press(GROUP, runner.message_id, button(runner, DENY), user_id=OWNER)
        await eventually(lambda: len(approval_messages(fake_api)) == 2)
        plain = approval_messages(fake_api)[1]
        assert "git status" in plain.text
        assert "test configuration" not in plain.text
        fake_api.press(GROUP, plain.message_id, button(plain, DENY), user_id=OWNER)
        await settle(live.engine, await live.engine.session_for_chat(chat(GROUP)))
