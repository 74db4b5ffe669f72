"""The boundary: one trick per test, and the file tools' checks against bash's real mounts.

Real files, real bubblewrap. The consistency test asks the same paths of the file-tool side
(``Boundary.visible``/``readable``) and of a real sandbox (``test -e`` inside ``bwrap``): the
two must agree, because both come from the same fields.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from engine.events import HumanSource
from engine.plan.gate import PlanGateView
from engine.tools.base import ToolContext
from engine.tools.boundary import Boundary, BoundaryPolicy, NotVisible, ReadOnlyPath
from engine.tools.files import GrepTool, ListFilesTool, ReadFileTool, WriteFileTool
from engine.tools.sandbox import SandboxSettings, helper_env, probe
from engine.tools.workspace import OutsideWorkspace


def ctx(ws: Path) -> ToolContext:
    return ToolContext(session_id="s1", workspace=ws, turn_id="t1", source=HumanSource())


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    """A workspace with the home inside it, a secret file, a plan folder elsewhere, an inbox."""
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "app.py").write_text("print('hi')\n")
    (ws / ".env").write_text("TOKEN=abc\n")
    home = ws / ".plangate"
    (home / "projects" / "p" / "session").mkdir(parents=True)
    (home / "plangate.db").write_text("db")
    plans = tmp_path / "plans" / "session"
    plans.mkdir(parents=True)
    (plans / "plan-s1.md").write_text("# plan\n")
    (plans / "plan-s1.json").write_text('{"status": "Editing"}')
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "photo.txt").write_text("upload\n")
    (inbox / "secret.txt").write_text("hidden upload\n")
    return {"ws": ws, "home": home, "plans": plans, "inbox": inbox, "tmp": tmp_path}


def boundary_of(tree: dict[str, Path], *, writable: bool = True) -> Boundary:
    settings = SandboxSettings(hidden=(tree["home"], tree["inbox"] / "secret.txt"))
    return Boundary.build(
        tree["ws"],
        writable=writable,
        settings=settings,
        hidden=[tree["ws"] / ".env", tree["plans"]],
        read_only=[tree["inbox"]],
        plan_md=tree["plans"] / "plan-s1.md",
    )


def test_reads_writes_and_refusals(tree: dict[str, Path]) -> None:
    b = boundary_of(tree)
    assert b.readable("src/app.py") == tree["ws"] / "src" / "app.py"
    assert b.readable(str(tree["inbox"] / "photo.txt")) == tree["inbox"] / "photo.txt"
    assert b.readable(str(tree["plans"] / "plan-s1.md")) == tree["plans"] / "plan-s1.md"
    for raw in (".env", ".plangate/plangate.db", "src/../.env"):
        with pytest.raises(NotVisible):
            b.readable(raw)
    with pytest.raises(OutsideWorkspace):  # the plan folder lies outside the workspace here
        b.readable(str(tree["plans"] / "plan-s1.json"))
    with pytest.raises(NotVisible):
        b.readable(str(tree["inbox"] / "secret.txt"))
    with pytest.raises(OutsideWorkspace):
        b.readable("../outside")
    with pytest.raises(ReadOnlyPath):
        b.writable_path(str(tree["inbox"] / "photo.txt"))
    with pytest.raises(OutsideWorkspace):
        b.writable_path(str(tree["plans"] / "plan-s1.json"))
    assert b.writable_path("new.txt") == tree["ws"] / "new.txt"
    with pytest.raises(ReadOnlyPath) as refused:
        boundary_of(tree, writable=False).writable_path("new.txt")
    assert "read-only in plan mode" in refused.value.result_text(tree["ws"])


def test_a_link_to_a_hidden_file_is_the_hidden_file(tree: dict[str, Path]) -> None:
    (tree["ws"] / "innocent").symlink_to(".env")
    (tree["ws"] / "db").symlink_to(tree["home"] / "plangate.db")
    b = boundary_of(tree)
    for raw in ("innocent", "db"):
        with pytest.raises(NotVisible):
            b.readable(raw)
        with pytest.raises(NotVisible):
            b.writable_path(raw)


def test_a_workspace_under_the_home_stays_visible_and_the_rest_of_home_does_not(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    ws = home / "worktrees" / "p"
    ws.mkdir(parents=True)
    (ws / "a.py").write_text("a\n")
    (home / "plangate.db").write_text("db")
    (ws / ".plangate-secret").mkdir()
    b = Boundary.build(
        ws, writable=True, settings=SandboxSettings(hidden=(home, ws / ".plangate-secret"))
    )
    assert b.readable("a.py") == ws / "a.py"
    assert b.writable_path("b.py") == ws / "b.py"
    with pytest.raises(OutsideWorkspace):
        b.readable(str(home / "plangate.db"))
    with pytest.raises(NotVisible):
        b.readable(".plangate-secret")


def test_relative_secret_names_are_hidden_in_every_workspace(tmp_path: Path) -> None:
    settings = SandboxSettings(hidden_names=("config/secrets.yml",))
    for name in ("one", "two"):
        ws = tmp_path / name
        (ws / "config").mkdir(parents=True)
        (ws / "config" / "secrets.yml").write_text("password: x\n")
        with pytest.raises(NotVisible):
            Boundary.build(ws, writable=True, settings=settings).readable("config/secrets.yml")


def _inside_sees(b: Boundary, paths: list[Path]) -> list[bool]:
    """Which of ``paths`` a real sandboxed bash sees: a folder with something in it, a file
    with bytes in it (a mask is an empty folder or /dev/null, so it counts as unseen)."""
    checks = " ".join(
        f'if [ -d "{p}" ]; then [ -n "$(ls -A "{p}")" ] && echo 1 || echo 0; '
        f'elif [ -s "{p}" ]; then echo 1; else echo 0; fi;'
        for p in paths
    )
    argv = b.bwrap_argv(checks)
    done = subprocess.run(argv, capture_output=True, env=helper_env(), timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    return [line == "1" for line in done.stdout.decode().split()]


@pytest.mark.parametrize("home_inside", [True, False])
def test_the_file_tools_and_the_mounts_agree(tree: dict[str, Path], home_inside: bool) -> None:
    assert probe(SandboxSettings()).problem is None
    if not home_inside:
        outside = tree["tmp"] / "home"
        tree["home"].rename(outside)
        tree["home"] = outside
    b = boundary_of(tree)
    candidates = [
        tree["ws"] / "src" / "app.py",
        tree["ws"] / "src",
        tree["ws"] / ".env",
        tree["home"],
        tree["home"] / "plangate.db",
        tree["home"] / "projects",
        tree["plans"] / "plan-s1.json",
        tree["plans"],
        tree["inbox"] / "photo.txt",
        tree["inbox"] / "secret.txt",
        tree["tmp"] / "outside.txt",
    ]
    (tree["tmp"] / "outside.txt").write_text("not mounted\n")
    tools_see = [b.visible(p) for p in candidates]
    # bash never sees the plan folder, the .md included; the file tools see only the .md.
    assert _inside_sees(b, candidates) == tools_see
    assert tools_see == [True, True, False, False, False, False, False, False, True, False, False]


async def test_file_tools_refuse_through_the_policy(tree: dict[str, Path]) -> None:
    ws = tree["ws"]

    async def view(session_id: str) -> PlanGateView:
        return PlanGateView(state="pre_init", md_path=tree["plans"] / "plan-s1.md")

    policy = BoundaryPolicy(
        settings=SandboxSettings(hidden=(tree["home"],)),
        plan_view=view,
        read_only_roots=_roots(tree["inbox"]),
    )
    read, grep, ls, write = (
        kind(boundary=policy) for kind in (ReadFileTool, GrepTool, ListFilesTool, WriteFileTool)
    )
    out = await read.run({"path": ".plangate/plangate.db"}, ctx(ws))
    assert out.is_error and "not visible" in out.content
    out = await read.run({"path": str(tree["inbox"] / "photo.txt")}, ctx(ws))
    assert not out.is_error and "upload" in out.content
    out = await grep.run({"pattern": "db|Editing|print"}, ctx(ws))
    assert out.content.splitlines() == ["src/app.py:1: print('hi')"]
    out = await ls.run({}, ctx(ws))
    assert ".plangate" not in out.content and "src/app.py" in out.content
    out = await write.run({"path": "x.txt", "content": "x"}, ctx(ws))  # pre-init: read-only
    assert out.is_error and "read-only in plan mode" in out.content
    out = await write.run({"path": str(tree["plans"] / "plan-s1.json"), "content": "{}"}, ctx(ws))
    assert out.is_error and "refused" in out.content
    assert (tree["plans"] / "plan-s1.json").read_text() == '{"status": "Editing"}'


def _roots(*paths: Path):  # type: ignore[no-untyped-def]
    async def roots(session_id: str) -> list[Path]:
        return list(paths)

    return roots


def test_a_link_swapped_in_after_the_check_is_judged_by_what_was_opened(
    tree: dict[str, Path],
) -> None:
    # read_file checks the path, then opens it; a link put there in between is caught on the
    # descriptor (here: the check is skipped by calling the reader on a swapped path).
    from engine.tools.files import _read_lines

    link = tree["ws"] / "swapped"
    link.symlink_to(tree["ws"] / ".env")
    with pytest.raises(NotVisible):
        _read_lines(link, 0, 10, boundary_of(tree))
    assert os.path.islink(link)


def test_with_network_is_one_calls_decision(tree: dict[str, Path]) -> None:
    b = boundary_of(tree)
    assert "--unshare-net" in b.bwrap_argv("true")
    assert "--unshare-net" not in b.with_network(True).bwrap_argv("true")
    assert not b.network


@pytest.mark.parametrize("inbox_exists", [True, False])
def test_an_inbox_under_a_hidden_home_inside_the_workspace(
    tmp_path: Path, inbox_exists: bool
) -> None:
    # Three levels: the workspace, the hidden home in it, the session's inbox in the home.
    ws = tmp_path / "ws"
    home = ws / ".plangate"
    inbox = home / "inbox" / "s1"
    (home / "inbox").mkdir(parents=True)
    (home / "plangate.db").write_text("db")
    (ws / "a.py").write_text("a\n")
    if inbox_exists:
        inbox.mkdir()
        (inbox / "upload.txt").write_text("uploaded\n")
    b = Boundary.build(
        ws, writable=True, settings=SandboxSettings(hidden=(home,)), read_only=[inbox]
    )
    candidates = [ws / "a.py", home / "plangate.db", inbox / "upload.txt"]
    seen = _inside_sees(b, candidates)
    assert seen == [True, False, inbox_exists]
    assert [b.visible(p) for p in candidates] == [True, False, True]


async def test_a_path_argument_of_any_tool_is_checked(tree: dict[str, Path]) -> None:
    policy = BoundaryPolicy(settings=SandboxSettings(hidden=(tree["home"],)))
    ws = tree["ws"]
    refused = await policy.refuse_hidden({"file_path": ".plangate/plangate.db"}, ctx(ws))
    assert refused is not None and "not visible" in refused
    assert await policy.refuse_hidden({"path": "src/app.py"}, ctx(ws)) is None
    assert await policy.refuse_hidden({"path": "../elsewhere"}, ctx(ws)) is None  # the tool's
    assert await policy.refuse_hidden({"command": "cat .plangate/plangate.db"}, ctx(ws)) is None


def _run_inside(b: Boundary, command: str) -> subprocess.CompletedProcess[str]:
    argv = b.bwrap_argv(command)
    return subprocess.run(
        argv, capture_output=True, text=True, env=helper_env(), timeout=30, check=False
    )


def _copies_refused(b: Boundary, ws: Path, content: str) -> int:
    """Every file under ``ws`` holding ``content`` is refused by the file tools; how many."""
    found = 0
    for folder, _, files in os.walk(ws):
        for name in files:
            path = Path(folder) / name
            if path.read_text(errors="replace") == content:
                found += 1
                with pytest.raises(NotVisible):
                    b.readable(str(path.relative_to(ws)))
    return found


def test_a_folder_holding_a_hidden_file_cannot_be_renamed(tmp_path: Path) -> None:
    # A mask sticks to its directory entry; renaming a folder that holds it would carry the
    # mask along and leave the secret on disk at a path no hidden entry names.
    assert probe(SandboxSettings()).problem is None
    ws = tmp_path / "ws"
    (ws / "a" / "b").mkdir(parents=True)
    secret = ws / "a" / "b" / "secret.txt"
    secret.write_text("SECRET\n")
    b = Boundary.build(ws, writable=True, hidden=[secret])
    for command in ("mv a a2", "mv a/b a/b2", "mv a/b a/c", "cd a/b && mv ../b ../c"):
        done = _run_inside(b, command)
        assert done.returncode != 0, (command, done.stdout)
        assert "busy" in done.stderr.lower(), (command, done.stderr)
    # Across the pinned mounts mv falls back to copying, and the mask copies as nothing.
    assert _run_inside(b, "cd a && mv b ../b2").returncode != 0
    assert sorted(p.name for p in (ws / "a").iterdir()) == ["b"]
    assert not (ws / "a2").exists() and not (ws / "a" / "c").exists()
    assert "SECRET" not in _run_inside(b, "cat a/b/secret.txt; ls -R").stdout
    assert _copies_refused(b, ws, "SECRET\n") == 1
    # The read-only workspace is as it was: nothing bound writable, renames fail read-only.
    ro = Boundary.build(ws, writable=False, hidden=[secret])
    assert "--bind" not in ro.bwrap_argv("true")
    assert _run_inside(ro, "mv a a2").returncode != 0
    assert secret.read_text() == "SECRET\n"


def test_a_home_inside_the_workspace_cannot_be_moved_from_under_its_mask(
    tmp_path: Path,
) -> None:
    # plangate's home two levels down, the session's inbox inside it showing through.
    assert probe(SandboxSettings()).problem is None
    ws = tmp_path / "ws"
    home = ws / "var" / "plangate"
    (home / "plans").mkdir(parents=True)
    (home / "plangate.db").write_text("DATABASE\n")
    sidecar = home / "plans" / "p.json"
    sidecar.write_text('{"status": "Editing"}')
    inbox = home / "inbox" / "s1"
    inbox.mkdir(parents=True)
    (inbox / "upload.txt").write_text("uploaded\n")
    (ws / "var" / "log.txt").write_text("log\n")

    def boundary() -> Boundary:
        return Boundary.build(
            ws, writable=True, settings=SandboxSettings(hidden=(home,)), read_only=[inbox]
        )

    first = _run_inside(boundary(), "mv var var2 && echo moved")
    assert first.returncode != 0 and "moved" not in first.stdout
    assert "busy" in first.stderr.lower()
    second = _run_inside(
        boundary(),
        "cat var2/plangate/plangate.db var/plangate/plangate.db; "
        "echo EDITED > var2/plangate/plans/p.json; echo EDITED > var/plangate/plans/p.json; "
        "mv var/plangate var/pg; mv var2 var; true",
    )
    assert "DATABASE" not in second.stdout
    assert sidecar.read_text() == '{"status": "Editing"}'
    assert not (ws / "var2").exists() and not (ws / "var" / "pg").exists()
    b = boundary()
    assert _copies_refused(b, ws, "DATABASE\n") == 1
    assert _copies_refused(b, ws, '{"status": "Editing"}') == 1
    # The rest of the workspace and the inbox inside the home are still seen and usable.
    seen = _inside_sees(b, [ws / "var" / "log.txt", home / "plangate.db", inbox / "upload.txt"])
    assert seen == [True, False, True]
    done = _run_inside(b, "echo more >> var/log.txt && mv var/log.txt var/log2.txt")
    assert done.returncode == 0, done.stderr
    assert (ws / "var" / "log2.txt").read_text() == "log\nmore\n"
