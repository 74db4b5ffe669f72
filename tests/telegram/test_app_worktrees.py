"""A git worktree per approved plan, through the real Application and the real engine.

Real git repositories made in the test (a bare one on disk as the remote), the fake Bot API on
loopback, real SQLite and plan files, bash in the real bubblewrap sandbox. Two forum topics of
one project plan and run at once; the Done card's buttons decide each branch.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from bot.app import parts
from engine.app import Engine
from engine.model.script import call
from tests.fakebot.server import FakeBotApi, FakeMessage
from tests.projects.support import RoutedProvider, git, make_repo, planning, writing
from tests.telegram.app_support import GROUP, OWNER, eventually
from tests.telegram.live import Live, button, labels, live_bot, until

ALPHA, BETA = 7, 9
GIT_STATUS: tuple[tuple[str, ...], ...] = (("git", "status"),)


async def _phase(engine: Engine, sid: str) -> str | None:
    record = await engine.sessions._worktrees.record(sid)
    return record.phase if record is not None else None


async def _card(api: FakeBotApi, live: Live, sid: str) -> FakeMessage:
    data = await live.engine.plan_card(sid)
    assert data.sidecar is not None and data.sidecar.flow.card_id is not None
    return api.message(GROUP, data.sidecar.flow.card_id)


async def _reviewed(api: FakeBotApi, live: Live, topic: int, request: str) -> str:
    api.user_message(GROUP, OWNER, f"/plan {request}", thread_id=topic)
    await eventually(lambda: any("ready for review" in m.text for m in _topic(api, topic)))
    sid = await live.engine.session_for_chat(GROUP, topic)
    await until(lambda: _has_card(live, sid))
    await parts(live.app).presenter.flush()
    return sid


async def _has_card(live: Live, sid: str) -> bool:
    data = await live.engine.plan_card(sid)
    return data.state == "review" and data.sidecar is not None and bool(data.sidecar.flow.card_id)


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
        a_rec = await engine.sessions._worktrees.record(alpha)
        b_rec = await engine.sessions._worktrees.record(beta)
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
        await parts(live.app).presenter.flush()
        merged = await _card(fake_api, live, beta)
        assert merged.buttons == [] and "merged with a merge commit into main" in merged.text


async def _is(engine: Engine, sid: str, phase: str) -> bool:
    return await _phase(engine, sid) == phase


async def _head(engine: Engine, sid: str) -> str:
    record = await engine.sessions._worktrees.record(sid)
    assert record is not None
    return record.head
