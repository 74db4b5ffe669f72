"""A git worktree per approved plan, through the real Application and the real engine.

Real git repositories made in the test (a bare one on disk as the remote), the fake Bot API on
loopback, real SQLite and plan files, bash in the real bubblewrap sandbox. Two forum topics of
one project plan and run at once; the Done card's buttons decide each branch.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from bot.telegram.app import parts
from bot.telegram.keys import tg_flow
from engine.app import Engine
from engine.model.script import call
from tests.fakebot.server import FakeBotApi, FakeMessage
from tests.keys import chat
from tests.projects.support import RoutedProvider, git, make_repo, planning, writing
from tests.telegram.app_support import GROUP, OWNER, eventually
from tests.telegram.live import Live, button, labels, live_bot, until

ALPHA, BETA = 7, 9
GIT_STATUS: tuple[tuple[str, ...], ...] = (("git", "status"),)


async def _phase(engine: Engine, sid: str) -> str | None:
    record = await engine.worktrees.record(sid)
    return record.phase if record is not None else None


async def _card(api: FakeBotApi, live: Live, sid: str) -> FakeMessage:
    data = await live.engine.plan_card(sid)
    assert data.sidecar is not None and tg_flow(data.sidecar.flow).card_id is not None
    return api.message(GROUP, tg_flow(data.sidecar.flow).card_id)


async def _reviewed(api: FakeBotApi, live: Live, topic: int, request: str) -> str:
    api.user_message(GROUP, OWNER, f"/plan {request}", thread_id=topic)
    await eventually(lambda: any("ready for review" in m.text for m in _topic(api, topic)))
    sid = await live.engine.session_for_chat(chat(GROUP, topic))
    await until(lambda: _has_card(live, sid))
    await parts(live.app).presenter.flush()
    return sid


async def _has_card(live: Live, sid: str) -> bool:
    data = await live.engine.plan_card(sid)
    return (
        data.state == "review"
        and data.sidecar is not None
        and bool(tg_flow(data.sidecar.flow).card_id)
    )


def _topic(api: FakeBotApi, topic: int) -> list[FakeMessage]:
    return [m for m in api.bot_messages(GROUP) if m.thread_id == topic]


async def _press(api: FakeBotApi, live: Live, sid: str, label: str) -> None:
    await parts(live.app).presenter.flush()
    shown = await _card(api, live, sid)
    api.press(GROUP, shown.message_id, button(shown, label), user_id=OWNER)


async def _approve_both(api: FakeBotApi, live: Live, model: RoutedProvider) -> tuple[str, str]:
    alpha = await _reviewed(api, live, ALPHA, "Add alpha")
    beta = await _reviewed(api, live, BETA, "Add beta")
    await _press(api, live, alpha, "✅ Approve")
    await asyncio.wait_for(model.held.wait(), 20)  # alpha is approved and waits
    await _press(api, live, beta, "✅ Approve")
    await until(lambda: _both_live(live.engine, alpha, beta))
    model.release.set()
    return alpha, beta


async def _both_live(engine: Engine, a: str, b: str) -> bool:
    return await _phase(engine, a) == "live" and await _phase(engine, b) == "live"


async def _done(engine: Engine, sid: str) -> bool:
    return await _phase(engine, sid) == "done" and not engine.agents.is_busy(sid)


async def test_two_topics_run_two_plans_in_two_worktrees_and_merge_them(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "work", {"README.md": "hello\n", "app.py": "def main(): ...\n"})
    base = git(repo, "rev-parse", "HEAD")
    status = call("bash", {"command": "git status --short"})
    model = RoutedProvider(
        {
            "Add alpha": [
                *planning("Alpha", "write alpha.py"),
                *writing({"alpha.py": "A = 1\n"}, checks=[status]),
            ],
            "Add beta": [
                *planning("Beta", "write beta.py"),
                *writing({"beta.py": "B = 2\n"}, checks=[status]),
            ],
        },
        hold="Add alpha",
    )
    async with live_bot(fake_api, tmp_path, [], model=model, allow_bash=GIT_STATUS) as live:
        engine = live.engine
        alpha, beta = await _approve_both(fake_api, live, model)
        a_rec = await engine.worktrees.record(alpha)
        b_rec = await engine.worktrees.record(beta)
        assert a_rec is not None and b_rec is not None
        assert a_rec.branch == f"plangate/alpha-{a_rec.plan_id[:8]}"
        assert Path(a_rec.path).is_relative_to(tmp_path / "home" / "worktrees")
        assert a_rec.path != b_rec.path
        await until(lambda: _done(engine, alpha))
        await until(lambda: _done(engine, beta))
        # Each ran in its own worktree; the main checkout is untouched until Merge.
        assert (Path(a_rec.path) / "alpha.py").exists()
        assert not (Path(a_rec.path) / "beta.py").exists()
        assert (Path(b_rec.path) / "beta.py").exists()
        assert not (Path(b_rec.path) / "alpha.py").exists()
        assert not (repo / "alpha.py").exists() and not (repo / "beta.py").exists()
        assert git(repo, "rev-parse", "HEAD") == base
        assert git(repo, "status", "--porcelain") == ""
        # bash ran git in the sandbox, in the worktree: it saw its own change only.
        said = [m for m in model.scripts["Add alpha"].requests[-1] if m.get("role") == "tool"]
        assert any("?? alpha.py" in str(m["content"]) for m in said)
        # The prompt told the model where it works and who commits.
        systems = [str(r[0]["content"]) for r in model.scripts["Add alpha"].requests]
        assert any(f"own git worktree on branch {a_rec.branch}" in t for t in systems)
        assert "own git worktree" not in systems[0]  # not while planning
        # plangate committed each worktree itself, with the plan's title.
        assert git(repo, "log", "-1", "--format=%s %an", a_rec.branch) == "Alpha plangate"
        await parts(live.app).presenter.flush()
        done_a = await _card(fake_api, live, alpha)
        assert labels(done_a) == ["🔀 Merge", "🌿 Keep branch", "🗑 Discard changes"]
        assert "1 file, +1 −0" in done_a.text and "alpha.py" in done_a.text
        await _press(fake_api, live, alpha, "🔀 Merge")
        await until(lambda: _is(engine, alpha, "merged"))
        # The first merge fast-forwards main to alpha's commit.
        assert (repo / "alpha.py").read_text() == "A = 1\n"
        assert git(repo, "rev-parse", "HEAD") == (await _head(engine, alpha))
        await _press(fake_api, live, beta, "🔀 Merge")
        await until(lambda: _is(engine, beta, "merged"))
        assert (repo / "beta.py").exists() and (repo / "alpha.py").exists()
        assert len(git(repo, "log", "-1", "--format=%P").split()) == 2  # a merge commit
        # Merged branches and their worktrees are gone.
        assert git(repo, "branch", "--list", "plangate/*") == ""
        assert not Path(a_rec.path).exists() and not Path(b_rec.path).exists()
        assert "worktrees" not in git(repo, "worktree", "list")
        await until(
            lambda: _card_says(fake_api, live, beta, "merged with a merge commit into main")
        )
        assert (await _card(fake_api, live, beta)).buttons == []


async def _card_says(api: FakeBotApi, live: Live, sid: str, text: str) -> bool:
    await parts(live.app).presenter.flush()
    data = await live.engine.plan_card(sid)
    # (None for an instant while a finished plan's listeners run: not yet, not a failure.)
    if data.sidecar is None or tg_flow(data.sidecar.flow).card_id is None:
        return False
    return text in api.message(GROUP, tg_flow(data.sidecar.flow).card_id).text


async def _is(engine: Engine, sid: str, phase: str) -> bool:
    return await _phase(engine, sid) == phase


async def _head(engine: Engine, sid: str) -> str:
    record = await engine.worktrees.record(sid)
    assert record is not None
    return record.head


async def _one_plan_done(api: FakeBotApi, live: Live, request: str) -> str:
    sid = await _reviewed(api, live, ALPHA, request)
    await _press(api, live, sid, "✅ Approve")
    await until(lambda: _done(live.engine, sid))
    await parts(live.app).presenter.flush()
    return sid


async def test_a_conflicting_second_merge_names_the_files_and_keeps_the_branch(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "work", {"README.md": "hello\n"})
    model = RoutedProvider(
        {
            "Add alpha": [
                *planning("Alpha", "rewrite README.md"),
                *writing({"README.md": "alpha\n"}),
            ],
            "Add beta": [*planning("Beta", "rewrite README.md"), *writing({"README.md": "beta\n"})],
        },
        hold="Add alpha",
    )
    async with live_bot(fake_api, tmp_path, [], model=model) as live:
        engine = live.engine
        alpha, beta = await _approve_both(fake_api, live, model)
        await until(lambda: _done(engine, alpha))
        await until(lambda: _done(engine, beta))
        await _press(fake_api, live, alpha, "🔀 Merge")
        await until(lambda: _is(engine, alpha, "merged"))
        merged_head = git(repo, "rev-parse", "HEAD")
        await _press(fake_api, live, beta, "🔀 Merge")
        await until(lambda: _is(engine, beta, "conflict"))
        record = await engine.worktrees.record(beta)
        assert record is not None and record.conflicts == ["README.md"]
        # Nothing half-merged: main is where the first merge left it, the branch is intact.
        assert git(repo, "rev-parse", "HEAD") == merged_head
        assert git(repo, "status", "--porcelain") == ""
        assert (repo / "README.md").read_text() == "alpha\n"
        assert git(repo, "show", f"{record.branch}:README.md") == "beta"
        await until(lambda: _card_says(fake_api, live, beta, "conflicts in README.md"))
        shown = await _card(fake_api, live, beta)
        assert labels(shown) == ["🌿 Keep branch", "🗑 Discard changes"]
        await _press(fake_api, live, beta, "🌿 Keep branch")
        await until(lambda: _is(engine, beta, "kept"))
        # Keep branch: the worktree is gone, the branch stays with its commit.
        assert not Path(record.path).exists()
        assert git(repo, "branch", "--list", record.branch).strip("* ") == record.branch
        assert git(repo, "show", f"{record.branch}:README.md") == "beta"
        assert "worktrees" not in git(repo, "worktree", "list")


async def test_discard_changes_asks_then_removes_worktree_and_branch(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "work", {"README.md": "hello\n"})
    script = [*planning("Gamma", "write gamma.py"), *writing({"gamma.py": "G = 3\n"})]
    async with live_bot(fake_api, tmp_path, script) as live:
        engine = live.engine
        sid = await _one_plan_done(fake_api, live, "Add gamma")
        record = await engine.worktrees.record(sid)
        assert record is not None and Path(record.path).is_dir()
        await _press(fake_api, live, sid, "🗑 Discard changes")
        await until(lambda: _labels_are(fake_api, live, sid, ["Yes, discard changes", "Cancel"]))
        await _press(fake_api, live, sid, "Cancel")  # changes nothing
        await until(
            lambda: _labels_are(
                fake_api, live, sid, ["🔀 Merge", "🌿 Keep branch", "🗑 Discard changes"]
            )
        )
        assert Path(record.path).is_dir()
        await _press(fake_api, live, sid, "🗑 Discard changes")
        await until(lambda: _labels_are(fake_api, live, sid, ["Yes, discard changes", "Cancel"]))
        await _press(fake_api, live, sid, "Yes, discard changes")
        await until(lambda: _is(engine, sid, "discarded"))
        assert not Path(record.path).exists()
        assert git(repo, "branch", "--list", "plangate/*") == ""
        assert "worktrees" not in git(repo, "worktree", "list")
        assert not (repo / "gamma.py").exists()
        events = [e.event for e in await live.storage.log.read(sid)]
        names = [getattr(e, "name", "") for e in events if e.type == "command/run"]
        assert "branch_discard" in names


async def _labels_are(api: FakeBotApi, live: Live, sid: str, want: list[str]) -> bool:
    await parts(live.app).presenter.flush()
    return labels(await _card(api, live, sid)) == want


async def test_push_branch_puts_the_branch_on_the_remote(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "work", {"README.md": "hello\n"})
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    script = [*planning("Delta", "write delta.py"), *writing({"delta.py": "D = 4\n"})]
    async with live_bot(fake_api, tmp_path, script, git_remote=str(remote)) as live:
        engine = live.engine
        sid = await _one_plan_done(fake_api, live, "Add delta")
        shown = await _card(fake_api, live, sid)
        assert labels(shown) == ["⬆️ Push branch", "🌿 Keep branch", "🗑 Discard changes"]
        await _press(fake_api, live, sid, "⬆️ Push branch")
        await until(lambda: _is(engine, sid, "pushed"))
        record = await engine.worktrees.record(sid)
        assert record is not None
        assert git(remote, "rev-parse", record.branch) == record.head
        assert git(remote, "show", f"{record.branch}:delta.py") == "D = 4"
        # Nothing merged locally; the local branch stays, its worktree is gone.
        assert not (repo / "delta.py").exists()
        assert git(repo, "rev-parse", record.branch) == record.head
        assert not Path(record.path).exists()


async def test_a_large_change_attaches_the_patch_within_two_calls(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    make_repo(tmp_path / "work", {"README.md": "hello\n"})
    files = {f"pkg/module_{i:03}.py": f"VALUE_{i} = {i}\n" * 3 for i in range(200)}
    script = [*planning("Many files", "write 200 modules"), *writing(files)]
    async with live_bot(fake_api, tmp_path, script, max_steps=400) as live:
        engine = live.engine
        sid = await _reviewed(fake_api, live, ALPHA, "Add many files")
        await _press(fake_api, live, sid, "✅ Approve")
        await until(lambda: _phase_is(engine, sid, "done"), timeout_s=60)
        calls_before = len(fake_api.calls)
        await until(lambda: _settled(engine, sid), timeout_s=60)
        await parts(live.app).presenter.flush()
        shown = await _card(fake_api, live, sid)
        record = await engine.worktrees.record(sid)
        assert record is not None and len(record.files) == 200
    assert "200 files, +600 −0" in shown.text and "more files" in shown.text
    docs = [m for m in fake_api.bot_messages(GROUP) if m.document is not None]
    patch = [m for m in docs if m.document and m.document["file_name"].endswith(".patch")]
    assert len(patch) == 1 and patch[0].reply_to == shown.message_id
    assert patch[0].document is not None
    assert patch[0].document["file_name"] == f"plan-{Path(record.path).name}.patch"
    content = fake_api.files[f"documents/{patch[0].document['file_id']}"].decode()
    assert content.count("diff --git") == 200
    # The diff costs at most 2 calls: the Done card's drawing and the attachment.
    diff_calls = [
        c
        for c in fake_api.calls[calls_before:]
        if c.method in ("sendMessage", "editMessageText", "sendDocument")
        and ("200 files" in str(c.params.get("text", "")) or c.method == "sendDocument")
    ]
    assert len(diff_calls) <= 2, [c.method for c in diff_calls]


async def _phase_is(engine: Engine, sid: str, phase: str) -> bool:
    return await _phase(engine, sid) == phase


async def _settled(engine: Engine, sid: str) -> bool:
    return await _phase(engine, sid) == "done" and not engine.agents.is_busy(sid)


async def test_a_project_that_is_not_a_repository_works_in_place_and_says_so(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    script = [*planning("Eps", "write eps.py"), *writing({"eps.py": "E = 5\n"})]
    async with live_bot(fake_api, tmp_path, script) as live:
        engine = live.engine
        sid = await _reviewed(fake_api, live, ALPHA, "Add eps")
        await _press(fake_api, live, sid, "✅ Approve")
        await until(lambda: _phase_is(engine, sid, "in_place"))
        says = "works in place: the project is not a git repository"
        await until(lambda: _card_says(fake_api, live, sid, says))
        await until(lambda: _ended(engine, sid))
    assert (live.workspace / "eps.py").read_text() == "E = 5\n"


async def _ended(engine: Engine, sid: str) -> bool:
    return await engine.plans.state(sid) == "none" and not engine.agents.is_busy(sid)


async def test_the_done_buttons_still_work_after_a_restart(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "work", {"README.md": "hello\n"})
    script = [*planning("Zeta", "write zeta.py"), *writing({"zeta.py": "Z = 6\n"})]
    async with live_bot(fake_api, tmp_path, script) as live:
        sid = await _one_plan_done(fake_api, live, "Add zeta")
        shown = await _card(fake_api, live, sid)
        merge = button(shown, "🔀 Merge")
    # A new process on the same home: the plan is archived, its branch waits in the log.
    async with live_bot(fake_api, tmp_path, []) as live:
        engine = live.engine
        fake_api.press(GROUP, shown.message_id, merge, user_id=OWNER)
        await until(lambda: _is(engine, sid, "merged"))
        assert (repo / "zeta.py").read_text() == "Z = 6\n"
        await parts(live.app).presenter.flush()
        await eventually(
            lambda: "fast-forwarded into main" in fake_api.message(GROUP, shown.message_id).text
        )
        assert fake_api.message(GROUP, shown.message_id).buttons == []


async def test_new_keeps_a_waiting_branch_and_removes_its_worktree(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "work", {"README.md": "hello\n"})
    script = [*planning("Eta", "write eta.py"), *writing({"eta.py": "H = 7\n"})]
    async with live_bot(fake_api, tmp_path, script) as live:
        engine = live.engine
        sid = await _one_plan_done(fake_api, live, "Add eta")
        record = await engine.worktrees.record(sid)
        assert record is not None and Path(record.path).is_dir()
        fake_api.user_message(GROUP, OWNER, "/new", thread_id=ALPHA)
        await until(lambda: _is(engine, sid, "kept"))
        kept = await engine.worktrees.record(sid)
    assert kept is not None and kept.message == f"Branch {record.branch} kept (the session ended)."
    assert not Path(record.path).exists()
    assert git(repo, "show", f"{record.branch}:eta.py") == "H = 7"
    assert not (repo / "eta.py").exists()
