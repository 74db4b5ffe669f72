"""The worktree service on real git repositories and a real SQLite log: safety of plangate's
own git commands, and a restart in the middle of each step leaving a consistent repository."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from engine.agent.testing import RecordingChannel
from engine.events import WorktreeChange
from engine.plan.service import PlanChange
from engine.plan.types import PlanSidecar
from engine.worktree.git import Git, GitError, unsafe_config
from engine.worktree.service import Worktrees, plan_slug
from storage.open import open_storage
from tests.projects.support import git, make_repo

SESSION = "s" * 32


def _plan(plan_id: str = "ab12cd34" * 4, title: str = "Add login") -> PlanSidecar:
    return PlanSidecar(id=plan_id, session_id=SESSION, title=title, status="Active", revision=5)


@asynccontextmanager
async def _service(tmp_path: Path, repo: Path, **kw: object) -> AsyncIterator[Worktrees]:
    """One process's worktree service over the home's real event log."""
    storage = await open_storage(tmp_path / "home")

    async def project(session_id: str) -> Path:
        return repo

    try:
        yield Worktrees(
            storage.log,
            RecordingChannel(),
            project_for=project,
            root=tmp_path / "home" / "worktrees",
            **kw,  # type: ignore[arg-type]
        )
    finally:
        await storage.close()


async def _approved(service: Worktrees, plan: PlanSidecar) -> Path:
    await service.on_plan_change(PlanChange(SESSION, before=None, after=plan))
    record = await service.record(SESSION)
    assert record is not None and record.phase == "live", record
    return Path(record.path)


async def _completed(service: Worktrees, plan: PlanSidecar) -> None:
    change = PlanChange(
        SESSION, before=plan, after=None, archived="completed", archived_sidecar=plan
    )
    await service.on_plan_change(change)


def test_plan_slugs_are_branch_safe() -> None:
    assert plan_slug("Add login (v2)!", "1a2b3c4d5e") == "add-login-v2-1a2b3c4d"
    assert plan_slug("", "1a2b3c4d") == "plan-1a2b3c4d"
    assert plan_slug("Ünïcode ✨ only", "ffffffff") == "n-code-only-ffffffff"


def test_config_keys_that_run_programs_are_named() -> None:
    listing = "\0".join(
        [
            "core.bare\nfalse",
            "filter.x.smudge\nrm -rf ~",
            "remote.origin.url\nhttps://example.test/x.git",
            "core.hookspath\n.husky",  # overridden on every command: harmless
            "url.evil.insteadof\nhttps://",
            "include.path\n../cfg",
        ]
    )
    assert unsafe_config(listing) == ["filter.x.smudge", "url.evil.insteadof", "include.path"]


async def test_repo_config_and_hooks_never_run_and_a_driver_means_in_place(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    marker = tmp_path / "ran"
    # What an agent could have planted: an fsmonitor command and hooks on every event.
    git(repo, "config", "core.fsmonitor", f"touch {marker}-fsmonitor; false")
    for hook in ("post-commit", "pre-commit", "post-checkout", "reference-transaction"):
        path = repo / ".git" / "hooks" / hook
        path.write_text(f"#!/bin/sh\ntouch {marker}-{hook}\n", encoding="utf-8")
        path.chmod(0o755)
    plan = _plan()
    async with _service(tmp_path, repo) as service:
        tree = await _approved(service, plan)
        (tree / "b.txt").write_text("b\n", encoding="utf-8")
        await _completed(service, plan)
        record = await service.record(SESSION)
        assert record is not None and record.phase == "done"
        assert [f.path for f in record.files] == ["b.txt"]
        assert (
            await service.merge(SESSION, actor="tg:1")
            == f"{record.branch} fast-forwarded into main."
        )
    assert (repo / "b.txt").read_text() == "b\n"
    assert not list(tmp_path.glob("ran*"))  # nothing the repository named was run
    # A filter driver cannot be undone by -c: such a repository works in place.
    git(repo, "config", "filter.evil.smudge", f"touch {marker}-smudge")
    other = _plan("ee" * 16, "Second")
    async with _service(tmp_path, repo) as service:
        await service.on_plan_change(PlanChange(SESSION, before=None, after=other))
        record = await service.record(SESSION)
    assert record is not None and record.phase == "in_place"
    assert "filter.evil.smudge" in record.message
    assert not list(tmp_path.glob("ran*"))


async def test_a_rewritten_dot_git_file_in_the_worktree_is_not_followed(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    decoy = make_repo(tmp_path / "decoy", {"d.txt": "d\n"})
    plan = _plan()
    async with _service(tmp_path, repo) as service:
        tree = await _approved(service, plan)
        (tree / "b.txt").write_text("b\n", encoding="utf-8")
        # The agent points the worktree's .git file at another repository.
        (tree / ".git").write_text(f"gitdir: {decoy / '.git'}\n", encoding="utf-8")
        await _completed(service, plan)
        record = await service.record(SESSION)
    assert record is not None and record.phase == "done"
    assert git(repo, "show", f"{record.branch}:b.txt") == "b"
    assert git(decoy, "log", "--format=%s") == "first"  # the decoy got no commit


def _evil_filter(tmp_path: Path, marker: Path) -> Path:
    script = tmp_path / "evil.sh"
    script.write_text(f"#!/bin/sh\ntouch {marker}\ncat\n", encoding="utf-8")
    script.chmod(0o755)
    return script


async def test_a_config_poisoned_after_the_worktree_was_made_runs_nothing(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    marker = tmp_path / "ran-filter"
    script = _evil_filter(tmp_path, marker)
    plan = _plan()
    async with _service(tmp_path, repo) as service:
        tree = await _approved(service, plan)
        (tree / "b.txt").write_text("b\n", encoding="utf-8")
        # The repository was clean at creation; then its config names a filter (NoPlan,
        # or another session, wrote the main checkout's .git).
        git(repo, "config", "filter.evil.clean", str(script))
        git(repo, "config", "filter.evil.smudge", str(script))
        (repo / ".git" / "info").mkdir(exist_ok=True)
        (repo / ".git" / "info" / "attributes").write_text("* filter=evil\n", encoding="utf-8")
        await _completed(service, plan)
        record = await service.record(SESSION)
    assert record is not None and record.phase == "kept"
    assert "refused" in record.message and "filter.evil.clean" in record.message
    assert not marker.exists()  # git add -A never ran the clean filter


async def test_a_worktree_config_filter_stops_plangates_merge(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    git(repo, "checkout", "-q", "-b", "feat")
    (repo / "c.txt").write_text("c\n", encoding="utf-8")
    git(repo, "add", "c.txt")
    git(repo, "commit", "-q", "-m", "c")
    git(repo, "checkout", "-q", "main")
    marker = tmp_path / "ran-smudge"
    script = _evil_filter(tmp_path, marker)
    # Not in .git/config at all: git reads config.worktree once the extension is on.
    git(repo, "config", "core.repositoryformatversion", "1")
    git(repo, "config", "extensions.worktreeConfig", "true")
    (repo / ".git" / "config.worktree").write_text(
        f'[filter "evil"]\n\tsmudge = {script}\n', encoding="utf-8"
    )
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "attributes").write_text("* filter=evil\n", encoding="utf-8")
    main = Git(repo / ".git", repo, home=tmp_path / "home")
    assert {"extensions.worktreeconfig", "filter.evil.smudge"} <= set(await main.unsafe())
    with pytest.raises(GitError, match="refused"):
        await main.run("merge", "--no-edit", "--no-verify", "-m", "m", "feat", check=False)
    assert not marker.exists()
    assert not (repo / "c.txt").exists()  # nothing was merged


async def test_an_admin_folder_pointed_elsewhere_is_refused(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    decoy = make_repo(tmp_path / "decoy", {"d.txt": "d\n"})
    plan = _plan()
    async with _service(tmp_path, repo) as service:
        tree = await _approved(service, plan)
        (tree / "b.txt").write_text("b\n", encoding="utf-8")
        (admin,) = (repo / ".git" / "worktrees").iterdir()
        (admin / "commondir").write_text(f"{decoy / '.git'}\n", encoding="utf-8")
        await _completed(service, plan)
        record = await service.record(SESSION)
    assert record is not None and record.phase == "kept"
    assert "altered" in record.message
    assert git(decoy, "log", "--format=%s") == "first"


async def _restarted(tmp_path: Path, repo: Path, **kw: object) -> Worktrees:
    async with _service(tmp_path, repo, **kw) as service:
        await service.on_load(SESSION)
        await service.record(SESSION)
        return service


async def _intent(tmp_path: Path, repo: Path, phase: str, act: Callable[[Path], None]) -> None:
    """Log ``phase`` as the dead process would have, do part of its work, and stop."""
    async with _service(tmp_path, repo) as service:
        record = await service.record(SESSION)
        assert record is not None
        act(Path(record.path))
        storage = await open_storage(tmp_path / "home")
        try:
            await storage.log.append(
                SESSION, [WorktreeChange(record=record.model_copy(update={"phase": phase}))]
            )
        finally:
            await storage.close()


async def _done_plan(tmp_path: Path, repo: Path) -> tuple[str, Path]:
    plan = _plan()
    async with _service(tmp_path, repo) as service:
        tree = await _approved(service, plan)
        (tree / "new.txt").write_text("new\n", encoding="utf-8")
        await _completed(service, plan)
        record = await service.record(SESSION)
        assert record is not None and record.phase == "done"
        return record.branch, tree


async def test_a_restart_in_the_middle_of_discard_finishes_it(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    branch, tree = await _done_plan(tmp_path, repo)

    def half_removed(path: Path) -> None:
        (path / "new.txt").unlink()  # the folder half gone, git's registration still there

    await _intent(tmp_path, repo, "discarding", half_removed)
    service = await _restarted(tmp_path, repo)
    record = await service.record(SESSION)
    assert record is not None and record.phase == "discarded"
    assert not tree.exists()
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert git(repo, "branch", "--list", branch) == ""


async def test_a_restart_after_the_merge_but_before_the_clean_up_finishes_it(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    branch, tree = await _done_plan(tmp_path, repo)
    await _intent(
        tmp_path, repo, "merging", lambda _: git(repo, "merge", "-q", "--ff-only", branch)
    )
    service = await _restarted(tmp_path, repo)
    record = await service.record(SESSION)
    assert record is not None and record.phase == "merged"
    assert (repo / "new.txt").exists() and not tree.exists()
    assert git(repo, "branch", "--list", branch) == ""


async def test_a_restart_cut_merge_is_undone_and_the_branch_waits(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    _branch, tree = await _done_plan(tmp_path, repo)
    await _intent(tmp_path, repo, "merging", lambda _: None)
    service = await _restarted(tmp_path, repo)
    record = await service.record(SESSION)
    assert record is not None and record.phase == "done"
    assert "Press Merge again" in record.message
    assert tree.is_dir() and not (repo / "new.txt").exists()
    assert git(repo, "status", "--porcelain") == ""


async def test_a_restart_while_creating_makes_the_worktree(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    branch, tree = await _done_plan(tmp_path, repo)
    async with _service(tmp_path, repo) as service:
        assert await service.keep(SESSION, actor=None) == f"Branch {branch} kept."
    assert not tree.exists()

    def nothing(path: Path) -> None:
        os.makedirs(path, exist_ok=True)  # a folder the dead process made, git never saw

    await _intent(tmp_path, repo, "creating", nothing)
    service = await _restarted(tmp_path, repo)
    record = await service.record(SESSION)
    assert record is not None and record.phase == "live"
    assert (tree / "new.txt").read_text() == "new\n"  # from the kept branch


async def test_an_abandoned_plan_keeps_its_work_on_the_branch(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    plan = _plan()
    async with _service(tmp_path, repo) as service:
        tree = await _approved(service, plan)
        (tree / "half.txt").write_text("half done\n", encoding="utf-8")
        # /new (or /project) archives the live plan as abandoned.
        change = PlanChange(SESSION, before=plan, after=None, archived="abandoned")
        await service.on_plan_change(change)
        record = await service.record(SESSION)
    assert record is not None and record.phase == "kept"
    assert record.message == f"Branch {record.branch} kept (the session ended)."
    assert not tree.exists()
    assert git(repo, "show", f"{record.branch}:half.txt") == "half done"
    assert not (repo / "half.txt").exists()


async def test_a_plan_that_changed_nothing_leaves_no_branch(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    plan = _plan()
    async with _service(tmp_path, repo) as service:
        tree = await _approved(service, plan)
        await _completed(service, plan)
        record = await service.record(SESSION)
    assert record is not None and record.phase == "empty"
    assert not tree.exists()
    assert git(repo, "branch", "--list", "plangate/*") == ""


async def test_a_merge_git_refuses_loses_nothing_and_the_branch_waits(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    plan = _plan()
    async with _service(tmp_path, repo) as service:
        tree = await _approved(service, plan)
        (tree / "a.txt").write_text("from the plan\n", encoding="utf-8")
        await _completed(service, plan)
        # The owner edited the same file in the main checkout meanwhile, uncommitted.
        (repo / "a.txt").write_text("my local edit\n", encoding="utf-8")
        said = await service.merge(SESSION, actor="tg:1")
        record = await service.record(SESSION)
    assert said.startswith("Merge failed: ")
    assert record is not None and record.phase == "done" and record.message == said
    assert (repo / "a.txt").read_text() == "my local edit\n"
    assert (tree / "a.txt").read_text() == "from the plan\n"
    assert git(repo, "show", f"{record.branch}:a.txt") == "from the plan"


async def test_merge_refuses_when_the_checkout_moved_to_another_branch(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    branch, _tree = await _done_plan(tmp_path, repo)
    git(repo, "switch", "-q", "-c", "elsewhere")
    async with _service(tmp_path, repo) as service:
        said = await service.merge(SESSION, actor="tg:1")
    assert said == "The project is on elsewhere, not main: switch it back, or Keep branch."
    assert git(repo, "rev-parse", "main") != git(repo, "rev-parse", branch)


async def test_a_commit_that_fails_removes_nothing(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    plan = _plan()
    async with _service(tmp_path, repo) as service:
        tree = await _approved(service, plan)
        (tree / "work.txt").write_text("an hour of work\n", encoding="utf-8")
        # Another git process holds the worktree's index: plangate's commit fails.
        admin = next((repo / ".git" / "worktrees").iterdir())
        (admin / "index.lock").write_text("", encoding="utf-8")
        await _completed(service, plan)
        record = await service.record(SESSION)
    assert record is not None and record.phase == "kept"
    assert record.message.startswith("Could not commit the changes")
    assert (tree / "work.txt").read_text() == "an hour of work\n"
    assert git(repo, "branch", "--list", record.branch) != ""


async def test_a_check_in_a_worktree_sees_the_repository_read_only(tmp_path: Path) -> None:
    from engine.checks.runner import SandboxChecks
    from engine.tools.bash import BashTool

    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    async with _service(tmp_path, repo) as service:
        tree = await _approved(service, _plan())
        (tree / "b.txt").write_text("b\n", encoding="utf-8")
        blind = SandboxChecks(BashTool())
        seeing = SandboxChecks(BashTool(read_only_roots=service.read_only_roots))
        command = "git status --porcelain | grep -q b.txt"
        without = await blind.run([command], session_id=SESSION, workspace=tree)
        with_roots = await seeing.run([command], session_id=SESSION, workspace=tree)
    assert not without.passed  # the worktree's .git file points into the repository
    assert with_roots.passed, with_roots


async def test_a_discard_while_the_worktree_is_made_sets_it_aside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    plan = _plan()
    entered, gate = asyncio.Event(), asyncio.Event()
    # Hold the one step that makes the worktree (found by name, on purpose: the discard must
    # land exactly while the record says "creating").
    original = vars(Worktrees)["_add_worktree"]

    async def held(self: Worktrees, *args: object) -> object:
        entered.set()
        await gate.wait()
        return await original(self, *args)

    monkeypatch.setattr(Worktrees, "_add_worktree", held)
    async with _service(tmp_path, repo) as service:
        start = asyncio.create_task(
            service.on_plan_change(PlanChange(SESSION, before=None, after=plan))
        )
        await asyncio.wait_for(entered.wait(), 10)
        creating = await service.record(SESSION)
        assert creating is not None and creating.phase == "creating"
        discard = asyncio.create_task(
            service.on_plan_change(
                PlanChange(SESSION, before=plan, after=None, archived="discarded")
            )
        )
        gate.set()
        await asyncio.wait_for(asyncio.gather(start, discard), 30)
        record = await service.record(SESSION)
        workspace = await service.workspace_for(SESSION)
    assert record is not None and record.phase != "live", record
    assert workspace == repo
    assert not Path(creating.path).exists()


async def test_a_setup_a_dead_process_left_running_is_failed_at_load_never_run_again(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n", ".plangate/setup.sh": "touch ran\n"})
    async with _service(tmp_path, repo) as service:
        path = await _approved(service, _plan())
        record = await service.record(SESSION)
        assert record is not None and record.setup == "needed" and record.setup_sha
        # The process dies while the setup runs: its log ends on "running".
        await service.set_setup(SESSION, setup="running")
    async with _service(tmp_path, repo) as service:
        await service.on_load(SESSION)
        record = await service.record(SESSION)
    assert record is not None and record.phase == "live" and record.setup == "failed"
    assert record.setup_note == "the setup was cut off by a restart"
    assert not (path / "ran").exists()
