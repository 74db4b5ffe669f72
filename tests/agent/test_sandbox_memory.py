"""One bash call's memory is bounded as a whole (docs/security.md, "Whole-call limits"), with
real bubblewrap: a memory cgroup where one can be had (RLIMIT_AS then off, so Node's
WebAssembly works), and where none can, a fallback whose process cap times the address space
per process stays within the setting."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from engine.events import HumanSource
from engine.tools.base import ToolContext
from engine.tools.bash import BashLimits, BashTool
from engine.tools.sandbox import SandboxSettings, fallback_limits, probe

FAST = BashLimits(kill_grace_s=0.5)


def ctx(ws: Path) -> ToolContext:
    return ToolContext(session_id="s1", workspace=ws, turn_id="t1", source=HumanSource())


def _memory_cgroup() -> bool:
    status = probe(SandboxSettings(), refresh=True)
    assert status.problem is None, status.problem
    return status.memory_limit == "cgroup"


# Four processes, each holding 100 MB it has written (not only reserved), alive together for
# a moment; each says "survived" if it was not killed meanwhile.
FOUR_HOLDERS = (
    "for i in 1 2 3 4; do python3 -c '"
    'import time; b = bytearray(100 * 1024 * 1024); b[::4096] = b"x" * len(b[::4096]); '
    'time.sleep(1.5); print("survived", flush=True)'
    "' & done; wait; echo all-ended"
)


async def test_one_call_cannot_hold_more_than_the_memory_setting_in_total(
    tmp_path: Path,
) -> None:
    if not _memory_cgroup():
        pytest.skip("no writable memory cgroup here: the fallback test below covers this host")
    tool = BashTool(limits=FAST, sandbox=SandboxSettings(memory_mb=256, max_processes=64))
    out = await tool.run({"command": FOUR_HOLDERS, "timeout_s": 60}, ctx(tmp_path))
    assert "all-ended" in out.content, out.content
    # 4 x 100 MB is more than 256 MB: the cgroup kills what does not fit (each process alone
    # is well within any per-process limit, so a per-process cap would let all four live).
    survived = out.content.splitlines().count("survived")
    assert survived <= 2, out.content


async def test_with_a_memory_cgroup_no_process_gets_an_address_space_limit(
    tmp_path: Path,
) -> None:
    if not _memory_cgroup():
        pytest.skip("no writable memory cgroup here")
    tool = BashTool(limits=FAST, sandbox=SandboxSettings(memory_mb=2048))
    out = await tool.run({"command": "ulimit -v"}, ctx(tmp_path))
    assert out.content == "exit code 0\nunlimited"
    if shutil.which("node") is None:
        return
    # Node's fetch instantiates WebAssembly, which reserves far more address space than 2 GB
    # (a 2 GB ulimit -v fails it with "Cannot allocate Wasm memory"). The network is off: the
    # fetch fails to connect, after the WebAssembly part ran.
    script = (
        "fetch('http://127.0.0.1:9/').then(() => console.log('fetched'))"
        ".catch(() => console.log('fetch ran'))"
    )
    out = await tool.run({"command": f'node -e "{script}"', "timeout_s": 60}, ctx(tmp_path))
    assert out.content == "exit code 0\nfetch ran", out.content


async def test_the_fallback_bounds_the_sum_through_the_process_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No memory cgroup to be had (a host without one): only the pids cgroup (as root) or
    # RLIMIT_NPROC (a normal user) is left.
    import engine.tools.sandbox as sandbox

    real = sandbox.cgroup_parents

    def no_memory(*, memory_mb: int | None = None) -> dict[str, Path]:
        return real(memory_mb=None)

    monkeypatch.setattr(sandbox, "cgroup_parents", no_memory)
    settings = SandboxSettings(memory_mb=2048, max_processes=64)
    assert probe(settings, refresh=True).memory_limit == "fallback"
    per_process_mb, processes = fallback_limits(2048, 64)
    assert per_process_mb * processes <= 2048 // 2
    tool = BashTool(limits=FAST, sandbox=settings)
    out = await tool.run({"command": "ulimit -v; ulimit -u"}, ctx(tmp_path))
    assert out.content == f"exit code 0\n{per_process_mb * 1024}\n{processes}"
    # One process cannot take more than its share...
    big = await tool.run(
        {"command": "python3 -c 'b = bytearray(400 * 1024 * 1024); print(len(b))'"},
        ctx(tmp_path),
    )
    assert big.is_error and "MemoryError" in big.content
    # ...and the tmpfs mounts come out of the other half: /tmp holds a quarter of the setting.
    fill = await tool.run(
        {"command": "dd if=/dev/zero of=/tmp/fill bs=1M count=600 2>&1 | tail -1; du -m /tmp/fill"},
        ctx(tmp_path),
    )
    assert int(fill.content.splitlines()[-1].split()[0]) <= 2048 // 4, fill.content
    probe(settings, refresh=True)  # leave no cached fallback status for the next test
