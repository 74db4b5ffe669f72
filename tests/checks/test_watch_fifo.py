"""The workspace watch and every hash plangate takes skip FIFOs, devices and sockets and read
bounded: a FIFO named like a test (made by one NoPlan bash call) once hung every later Approve
of a plan with checks."""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

from engine.checks import watch
from engine.environments import environment_key, read_script
from engine.tools.workspace import read_regular, sha256_regular
from engine.worktree.script import SETUP_PATH, script_of

CHECK = "python3 -m unittest -q"


def _release(root: Path) -> None:
    """Unblock readers stuck on any FIFO under ``root`` (the test must end even when the
    code under test blocked): a writer opens and closes each, so a blocked open returns."""
    fifos = [root] if not root.is_dir() else [p for p in root.rglob("*") if p.is_fifo()]
    for fifo in fifos:
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            continue
        os.close(fd)


async def _bounded(root: Path, work: object) -> object:
    task = asyncio.ensure_future(asyncio.to_thread(work))  # type: ignore[arg-type]
    try:
        return await asyncio.wait_for(asyncio.shield(task), 30)
    except TimeoutError:
        for _ in range(200):  # bounded: each release lets one blocked open go on
            _release(root)
            done, _ = await asyncio.wait({task}, timeout=0.05)
            if done:
                break
        raise AssertionError("blocked on a FIFO") from None


async def test_the_watch_skips_a_fifo_a_socket_and_a_device_link(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "tests").mkdir(parents=True)
    (ws / "test_app.py").write_text("ok\n")
    os.mkfifo(ws / "test_fifo")
    os.mkfifo(ws / "tests" / "data")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(ws / "tests" / "test_sock"))
    try:
        hashes = await _bounded(ws, lambda: watch.snapshot([CHECK], ws))
        named = await _bounded(ws, lambda: watch.snapshot(["python3 tests/data"], ws))
    finally:
        server.close()
    assert list(hashes) == ["test_app.py"]  # type: ignore[call-overload]
    assert named == {}


async def test_a_fifo_swapped_in_after_the_walk_is_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "test_x.py"
    os.mkfifo(fifo)
    assert await _bounded(fifo, lambda: sha256_regular(fifo, max_bytes=1 << 20)) is None
    assert await _bounded(fifo, lambda: read_regular(fifo, max_bytes=1 << 20)) is None


def test_a_big_file_is_read_only_up_to_the_bound(tmp_path: Path) -> None:
    big = tmp_path / "test_big.bin"
    big.write_bytes(b"a" * 4096)
    cut = sha256_regular(big, max_bytes=1024)
    big.write_bytes(b"a" * 4096 + b"b")
    assert sha256_regular(big, max_bytes=1024) not in (None, cut)  # the size still counts
    assert read_regular(big, max_bytes=10) == b"a" * 10


async def test_the_setup_script_and_dependency_hashes_skip_fifos(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / ".plangate").mkdir(parents=True)
    os.mkfifo(ws / SETUP_PATH)
    os.mkfifo(ws / "requirements.txt")
    assert await _bounded(ws, lambda: read_script(ws)) is None
    key = await _bounded(ws, lambda: environment_key(ws, script_of("pip install -r x\n")))
    assert isinstance(key, str)
