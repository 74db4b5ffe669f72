"""The hostile repositories of tests/hostile_git.py against plangate's own git on the host:
planted in a plan's worktree and the project's ``.git`` after the worktree was made (or in the
main checkout, as NoPlan bash could), then the progress snapshot, Done, the Done card's diff,
Merge, Push and a set-aside (``/discard``, ``/new``, ``/project``) run; no planted program runs.
Real git, a real SQLite log."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from bot.telegram.cards import worktree_lines
from engine.plan.service import PlanChange
from engine.progress.workspace import snapshot
from tests.hostile_git import HOSTILE, Plant
from tests.projects.support import git, make_repo
from tests.projects.test_worktrees import SESSION, _approved, _completed, _plan, _service


def _main(tmp_path: Path) -> Path:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n", "b.txt": "b\n"})
    git(repo, "tag", "base")
    (repo / "a.txt").write_text("a\nsecond\n")
    git(repo, "commit", "-qam", "second")
    return repo


def _markers(tmp_path: Path) -> Path:
    markers = tmp_path / "ran" / "m"
    markers.mkdir(parents=True)
    return markers


@pytest.mark.parametrize("decision", ["merge", "push", "set_aside"])
@pytest.mark.parametrize(("name", "plant"), HOSTILE, ids=[name for name, _ in HOSTILE])
async def test_no_planted_program_runs_in_plangates_git(
    tmp_path: Path, name: str, plant: Callable[[Plant], None], decision: str
) -> None:
    repo = _main(tmp_path)
    markers = _markers(tmp_path)
    plan = _plan()
    remote = "origin" if decision == "push" else None
    async with _service(tmp_path, repo, remote=remote) as service:
        tree = await _approved(service, plan)
        (tree / "c.txt").write_text("c\n")
        p = Plant(repo=repo, tree=tree, markers=markers)
        plant(p)
        if decision == "push" and not (repo / ".git" / "config").read_text().count("origin"):
            git(repo, "remote", "add", "origin", str(tmp_path / "nowhere.git"))
        p.touch_all()
        p.planted()
        await snapshot(tree)
        await snapshot(repo)
        if decision == "set_aside":
            change = PlanChange(SESSION, before=plan, after=None, archived="discarded")
            await service.on_plan_change(change)
        else:
            await _completed(service, plan)
            await service.view(SESSION)
            if decision == "merge":
                await service.merge(SESSION, actor="tg:1")
            else:
                await service.push(SESSION, actor="tg:1")
        record = await service.record(SESSION)
    assert record is not None
    assert sorted(os.listdir(markers)) == [], record


@pytest.mark.parametrize(("name", "plant"), HOSTILE, ids=[name for name, _ in HOSTILE])
async def test_planted_in_the_main_checkout_nothing_runs(
    tmp_path: Path, name: str, plant: Callable[[Plant], None]
) -> None:
    """NoPlan bash writes the main checkout (a gitlink committed, a nested repository, the
    configuration): the snapshot, the next plan's worktree and its Merge run nothing."""
    repo = _main(tmp_path)
    markers = _markers(tmp_path)
    p = Plant(repo=repo, tree=repo, markers=markers)
    plant(p)
    p.touch_all()
    p.planted()
    await snapshot(repo)
    plan = _plan()
    async with _service(tmp_path, repo) as service:
        await service.on_plan_change(PlanChange(SESSION, before=None, after=plan))
        record = await service.record(SESSION)
        assert record is not None
        if record.phase == "live":
            (Path(record.path) / "c.txt").write_text("c\n")
            await _completed(service, plan)
            await service.merge(SESSION, actor="tg:1")
    assert sorted(os.listdir(markers)) == []


async def test_a_changed_submodule_is_left_out_of_the_branch_and_the_card_says_so(
    tmp_path: Path,
) -> None:
    repo = _main(tmp_path)
    markers = _markers(tmp_path)
    plan = _plan()
    async with _service(tmp_path, repo) as service:
        tree = await _approved(service, plan)
        p = Plant(repo=repo, tree=tree, markers=markers)
        p.nested("vendor/lib", "nested")
        (tree / "c.txt").write_text("c\n")
        p.planted()
        await _completed(service, plan)
        record = await service.record(SESSION)
        view = await service.view(SESSION)
    assert record is not None and record.phase == "done", record
    assert [f.path for f in record.files] == ["c.txt"]  # no gitlink on the branch
    assert record.left_out == ["vendor/lib"]
    assert view is not None
    lines = "\n".join(worktree_lines(view, files=None, patch=False))
    assert "Not part of the branch: vendor/lib" in lines
    assert os.listdir(markers) == []
