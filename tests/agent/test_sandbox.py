"""bash in the real bubblewrap sandbox: mounts per plan state, network, limits, no leftovers,
no secrets; and write_file never writing through a link. Real processes, no mocks."""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import threading
from pathlib import Path

import pytest

from engine.agent.adapters import PlanServiceAdapter
from engine.events import HumanSource, ToolResult
from engine.model.script import call, say
from engine.plan.gate import PlanGateView
from engine.plan.service import PlanService
from engine.testing import InMemoryEventLog
from engine.tools.base import ToolContext
from engine.tools.bash import BashLimits, BashTool
from engine.tools.boundary import BoundaryPolicy
from engine.tools.files import ReadFileTool, WriteFileTool
from engine.tools.sandbox import SandboxSettings, probe
from storage.plan_files import FilePlanStore, SessionLocation
from tests.agent.harness import SID, make_agent
from tests.agent.proc_util import processes_with, unique_marker

FAST = BashLimits(kill_grace_s=0.5)


def ctx(ws: Path, session_id: str = "s1") -> ToolContext:
    return ToolContext(session_id=session_id, workspace=ws, turn_id="t1", source=HumanSource())


def view_of(state: str, md: Path | None = None):  # type: ignore[no-untyped-def]
    async def view(session_id: str) -> PlanGateView:
        return PlanGateView(state=state, md_path=md)  # type: ignore[arg-type]

    return view


def tree_digest(root: Path) -> dict[str, str]:
    """Every entry under ``root``: kind, mode, and content or link target."""
    out = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        if path.is_symlink():
            what = "link:" + os.readlink(path)
        elif path.is_dir():
            what = "dir"
        else:
            what = hashlib.sha256(path.read_bytes()).hexdigest()
        out[str(path.relative_to(root))] = f"{oct(st.st_mode)} {what}"
    return out


@pytest.fixture(autouse=True)
def _needs_bwrap() -> None:
    # The sandbox must work where these tests run (make test installs bubblewrap); a missing
    # bwrap is a failure with the fix, not a skip.
    status = probe(SandboxSettings())
    assert status.problem is None, status.problem


def project(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "app.py").write_text("print('hello')\n")
    (ws / "notes.txt").write_text("hello notes\n")
    (ws / "link").symlink_to("src/app.py")
    return ws


async def test_pre_init_bash_changes_no_byte_while_ls_and_grep_work(tmp_path: Path) -> None:
    ws = project(tmp_path)
    log = InMemoryEventLog()

    async def locate(session_id: str) -> SessionLocation:
        return SessionLocation(workspace=str(ws))

    plans = PlanService(FilePlanStore(tmp_path / "home", locate), log)
    assert (await plans.enter_pre_init(SID)).ok  # what /plan does
    before = tree_digest(ws)
    commands = [
        "ls src && grep -rn hello .",
        "echo changed > src/app.py",
        "rm -f src/app.py notes.txt",
        "mv src/app.py src/moved.py",
        "chmod 000 src/app.py",
        "echo through-link > link",
        "touch brand-new && mkdir newdir",
    ]
    script = [*(call("bash", {"command": c}) for c in commands), say("explored")]
    agent = make_agent(ws, script, plan=PlanServiceAdapter(plans), log=log)
    agent.registry.submit(SID, "look around", message_id="1")
    await asyncio.wait_for(agent.registry.wait_idle(SID), 60)
    got = [e for e in await agent.events() if isinstance(e, ToolResult)]
    assert len(got) == len(commands)
    assert not got[0].is_error and "app.py" in got[0].content
    assert "./notes.txt:1:hello notes" in got[0].content
    for result in got[1:]:
        assert result.is_error and "Read-only file system" in result.content, result.content
    assert tree_digest(ws) == before


async def test_active_bash_sees_only_the_workspace(tmp_path: Path) -> None:
    ws = project(tmp_path)
    home = ws / ".plangate"  # the home inside the workspace: masked, not just unmounted
    sidecar = home / "projects" / "p" / "session" / "plan-s1.json"
    sidecar.parent.mkdir(parents=True)
    sidecar.write_text('{"secret": "sidecar"}')
    (home / "plangate.db").write_text("database bytes")
    outside = tmp_path / "outside"
    outside.mkdir()
    other_plans = tmp_path / "plans"  # a plan folder outside the workspace
    other_plans.mkdir()
    md = other_plans / "plan-s1.md"
    md.write_text("# the plan")
    tool = BashTool(
        limits=FAST,
        sandbox=SandboxSettings(hidden=(home,)),
        plan_view=view_of("active", md),
    )
    wrote = await tool.run({"command": "echo ok > made.txt && cat made.txt"}, ctx(ws))
    assert not wrote.is_error and (ws / "made.txt").read_text() == "ok\n"
    escape = await tool.run({"command": f"touch {outside}/x"}, ctx(ws))
    assert escape.is_error and not (outside / "x").exists()
    for path in (sidecar, home / "plangate.db", md):
        seen = await tool.run({"command": f"cat {path}"}, ctx(ws))
        assert seen.is_error and "No such file" in seen.content, seen.content
    listed = await tool.run({"command": "ls -A .plangate | wc -l"}, ctx(ws))
    assert listed.content == "exit code 0\n0"


async def test_bash_cannot_rename_a_folder_from_under_a_mask(tmp_path: Path) -> None:
    # A mask sticks to its directory entry: were the folders around it renamable, one call's
    # mv would leave the hidden bytes at a path no hidden entry names for the next call and
    # for read_file. A secret two levels deep and the home at var/plangate, both inside.
    ws = project(tmp_path)
    secret = ws / "config" / "deep" / "secret.txt"
    secret.parent.mkdir(parents=True)
    secret.write_text("SECRET VALUE\n")
    home = ws / "var" / "plangate"
    sidecar = home / "plans" / "plan-s1.json"
    sidecar.parent.mkdir(parents=True)
    sidecar.write_text('{"status": "Editing"}')
    (home / "plangate.db").write_text("database bytes")
    settings = SandboxSettings(hidden=(home, secret))
    tool = BashTool(limits=FAST, sandbox=settings, plan_view=view_of("active"))
    read = ReadFileTool(boundary=BoundaryPolicy(settings=settings))
    for folder, to in (
        ("config", "config2"),
        ("config/deep", "config/deep2"),
        ("var", "var2"),
    ):
        moved = await tool.run({"command": f"mv {folder} {to} && echo moved"}, ctx(ws))
        assert moved.is_error and "busy" in moved.content.lower(), moved.content
        after = await tool.run(
            {
                "command": f"cat {to}/deep/secret.txt {to}/secret.txt {to}/plangate/plangate.db; "
                f"echo EDITED > {to}/plangate/plans/plan-s1.json; mv {to} {folder}; true"
            },
            ctx(ws),
        )
        assert "SECRET" not in after.content and "database" not in after.content
        for raw in (
            f"{to}/deep/secret.txt",
            f"{to}/secret.txt",
            f"{to}/plangate/plangate.db",
            "config/deep/secret.txt",
            "var/plangate/plangate.db",
        ):
            out = await read.run({"path": raw}, ctx(ws))
            assert out.is_error, (raw, out.content)
            assert "SECRET" not in out.content and "database" not in out.content
    assert secret.read_text() == "SECRET VALUE\n"
    assert sidecar.read_text() == '{"status": "Editing"}'
    assert not (ws / "config2").exists() and not (ws / "var2").exists()


async def _connect_result(tool: BashTool, ws: Path) -> tuple[str, int]:
    hits = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal hits
        hits += 1
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        out = await tool.run(
            {"command": f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected"}, ctx(ws)
        )
    finally:
        server.close()
        await server.wait_closed()
    return out.content, hits


async def test_network_is_off_by_default_and_on_by_setting(tmp_path: Path) -> None:
    ws = project(tmp_path)
    off = BashTool(limits=FAST, plan_view=view_of("active"))
    content, hits = await _connect_result(off, ws)
    assert "connected" not in content and hits == 0
    on = BashTool(limits=FAST, sandbox=SandboxSettings(network=True), plan_view=view_of("active"))
    content, hits = await _connect_result(on, ws)
    assert "connected" in content and hits == 1


async def test_fork_bomb_and_huge_allocation_are_contained(tmp_path: Path) -> None:
    ws = project(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    tool = BashTool(limits=FAST, sandbox=SandboxSettings(max_processes=64, memory_mb=512))
    # 10 GB written page by page: refused up front under an address-space limit (the
    # fallback), killed by the call's memory cgroup otherwise (docs/security.md).
    touch = "b = bytearray(10 * 1024**3); b[::4096] = bytes(len(b[::4096])); print(len(b))"
    big = await tool.run({"command": f"python3 -c '{touch}'"}, ctx(ws))
    assert big.is_error
    assert "MemoryError" in big.content or big.content.startswith("exit code 137"), big.content
    bomb_fn = f"bomb{unique_marker()}"
    bomb = asyncio.create_task(
        tool.run(
            {
                "command": f"{bomb_fn}(){{ {bomb_fn}|{bomb_fn}& }}; {bomb_fn}; sleep 30",
                "timeout_s": 4,
            },
            ctx(ws),
        )
    )
    await asyncio.sleep(0.5)
    # Another session's call (another project, so no shared lock) answers meanwhile.
    meanwhile = await asyncio.wait_for(
        tool.run({"command": "echo still here"}, ctx(other, "s2")), 30
    )
    assert meanwhile.content == "exit code 0\nstill here"
    assert not bomb.done()
    out = await asyncio.wait_for(bomb, 60)
    assert "fork" in out.content  # "fork: retry: Resource temporarily unavailable"
    assert processes_with(bomb_fn) == []


@pytest.mark.parametrize("launcher", ["setsid", "nohup"])
async def test_background_jobs_do_not_outlive_the_call(tmp_path: Path, launcher: str) -> None:
    ws = project(tmp_path)
    tool = BashTool(limits=FAST, plan_view=view_of("active"))
    bg = f"bg{unique_marker()}.txt"
    loop = f"sh -c 'while :; do date >> {bg}; sleep 0.2; done'"
    # The call returns once the job has written (a fixed sleep may end before it ran).
    started = f"until [ -s {bg} ]; do sleep 0.05; done; echo started"
    command = f"{launcher} {loop} > /dev/null 2>&1 & {started}"
    out = await tool.run({"command": command}, ctx(ws))
    assert out.content == "exit code 0\nstarted"
    size = (ws / bg).stat().st_size
    assert size > 0
    await asyncio.sleep(0.6)
    assert (ws / bg).stat().st_size == size
    assert processes_with(bg) == []


async def test_environment_holds_no_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLANGATE_TELEGRAM_TOKEN", "123:tg-token-value")
    monkeypatch.setenv("PLANGATE_MODEL_API_KEY", "model-key-value")
    monkeypatch.setenv("OPENAI_API_KEY", "openai-key-value")
    monkeypatch.setenv("GITHUB_TOKEN", "gh-token-value")
    monkeypatch.setenv("MY_SETTING", "wanted")
    ws = project(tmp_path)
    sandbox = SandboxSettings(env_pass=("MY_SETTING", "OPENAI_API_KEY"))
    out = await BashTool(limits=FAST, sandbox=sandbox).run({"command": "env"}, ctx(ws))
    assert "MY_SETTING=wanted" in out.content
    for leak in ("PLANGATE_", "tg-token", "key-value", "gh-token", "TOKEN", "API_KEY"):
        assert leak not in out.content, out.content


async def test_missing_bubblewrap_refuses_with_the_fix(tmp_path: Path) -> None:
    ws = project(tmp_path)
    tool = BashTool(limits=FAST, sandbox=SandboxSettings(bwrap=str(tmp_path / "no-bwrap")))
    out = await tool.run({"command": "touch x"}, ctx(ws))
    assert out.is_error and "\n" not in out.content
    assert "PLANGATE_SANDBOX=off" in out.content and "apt-get install bubblewrap" in out.content
    assert not (ws / "x").exists()


async def test_write_file_through_a_hard_link_leaves_the_outside_file(tmp_path: Path) -> None:
    ws = project(tmp_path)
    outside = tmp_path / "outside.txt"
    outside.write_text("outside original\n")
    os.link(outside, ws / "hl.txt")
    out = await WriteFileTool().run({"path": "hl.txt", "content": "new\n"}, ctx(ws))
    assert not out.is_error
    assert outside.read_text() == "outside original\n"
    assert (ws / "hl.txt").read_text() == "new\n"


async def test_write_file_racing_a_symlink_swap_never_writes_outside(tmp_path: Path) -> None:
    ws = project(tmp_path)
    outside = tmp_path / "outside.txt"
    outside.write_text("outside original\n")
    target = ws / "racy.txt"
    target.write_text("inside\n")
    stop = threading.Event()

    def swap() -> None:
        # Flip the last component between a regular file and a link out, by atomic renames.
        n = 0
        while not stop.is_set():
            n += 1
            link, plain = ws / f".l{n}", ws / f".p{n}"
            link.symlink_to(outside)
            plain.write_text("inside\n")
            os.replace(link, target)
            os.replace(plain, target)

    swapper = threading.Thread(target=swap)
    swapper.start()
    tool = WriteFileTool()
    try:
        for i in range(150):
            await tool.run({"path": "racy.txt", "content": f"write {i}\n"}, ctx(ws))
    finally:
        stop.set()
        swapper.join(10)
    assert outside.read_text() == "outside original\n"


def test_bwrap_is_on_path_for_ci() -> None:
    assert shutil.which("bwrap") is not None


@pytest.mark.parametrize("folder", ["/tmp", "/var/tmp", "/dev/shm", "/dev"])
async def test_every_writable_tmpfs_is_bounded_by_the_memory_setting(
    tmp_path: Path, folder: str
) -> None:
    # 64 MB of memory: writing twice that fails inside the call, whichever tmpfs it goes to
    # (/dev is read-only; its /dev/shm is sized).
    tool = BashTool(limits=FAST, sandbox=SandboxSettings(memory_mb=64), plan_view=view_of("active"))
    out = await tool.run(
        {
            "command": f"dd if=/dev/zero of={folder}/fill bs=1M count=128 2>&1 | head -1; "
            f"du -m {folder}/fill 2>/dev/null || echo none"
        },
        ctx(tmp_path),
    )
    assert "No space left on device" in out.content or "Read-only file system" in out.content
    written = out.content.splitlines()[-1].split("\t")[0]
    assert written == "none" or int(written) <= 32, out.content


async def test_a_toolchain_folder_the_settings_name_is_seen_read_only_and_on_the_path(
    tmp_path: Path,
) -> None:
    # A toolchain installed in a home folder (pyenv, nvm): invisible unless the settings name
    # it (PLANGATE_SANDBOX_TOOL_DIRS); then its bin/ is on the PATH and nothing in it changes.
    ws = project(tmp_path)
    toolchain = tmp_path / "home-of-owner" / ".nvm"
    (toolchain / "bin").mkdir(parents=True)
    (toolchain / "bin" / "mytool").write_text("#!/bin/sh\necho mytool works\n")
    (toolchain / "bin" / "mytool").chmod(0o755)
    without = BashTool(limits=FAST, plan_view=view_of("active"))
    unseen = await without.run({"command": "mytool"}, ctx(ws))
    assert unseen.is_error and "command not found" in unseen.content
    tool = BashTool(
        limits=FAST,
        sandbox=SandboxSettings(tool_dirs=(toolchain,)),
        plan_view=view_of("active"),
    )
    ran = await tool.run({"command": "mytool"}, ctx(ws))
    assert ran.content == "exit code 0\nmytool works"
    changed = await tool.run({"command": f"touch {toolchain}/bin/x"}, ctx(ws))
    assert changed.is_error and "Read-only file system" in changed.content
    assert not (toolchain / "bin" / "x").exists()
