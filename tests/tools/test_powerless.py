"""Root, and an unprivileged user, get no power inside the sandbox: the real ``bwrap`` command
line the boundary builds, run as root (this machine and CI) and as ``nobody`` (``setpriv``).

One trick each: remount the read-only workspace writable, unmount a mask, a new user or mount
namespace to do either, a fresh tmpfs over the workspace. None may change a byte or show the
masked file; ``CapEff`` is 0 for both users.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.tools.boundary import Boundary
from engine.tools.sandbox import SandboxSettings, helper_env, probe
from tests.telegram.test_app_boundary import ENV_TEXT, ROOT_TRICKS, tree_bytes

NOBODY = 65534


def _as(user: str) -> list[str]:
    if user == "root":
        if os.geteuid() != 0:
            pytest.skip("not running as root here (CI and the dev machine do)")
        return []
    if os.geteuid() == 0 and shutil.which("setpriv"):
        return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    if os.geteuid() != 0:
        return []  # already unprivileged
    pytest.skip("no setpriv to drop to an unprivileged user (util-linux; make test installs it)")


@pytest.fixture
def project() -> Iterator[Path]:
    # Under /tmp directly and owned by nobody: nobody can reach it, and could write it if
    # the sandbox let a write through.
    ws = Path(
        subprocess.run(
            ["mktemp", "-d", "/tmp/plangate-powerless-XXXXXX"], capture_output=True, text=True
        ).stdout.strip()
    )
    (ws / ".env").write_text(ENV_TEXT)
    (ws / "app.py").write_text("print('hi')\n")
    if os.geteuid() == 0:
        for path in (ws, ws / ".env", ws / "app.py"):
            os.chown(path, NOBODY, NOBODY)
    os.chmod(ws, 0o755)
    yield ws
    shutil.rmtree(ws, ignore_errors=True)


@pytest.mark.parametrize("user", ["root", "nobody"])
@pytest.mark.parametrize("trick", ROOT_TRICKS)
def test_no_trick_gets_write_access_or_a_masked_file(project: Path, user: str, trick: str) -> None:
    prefix = _as(user)
    before = tree_bytes(project)
    boundary = Boundary.build(
        project, writable=False, settings=SandboxSettings(hidden=(project / ".env",))
    )
    done = subprocess.run(
        [*prefix, *boundary.bwrap_argv(trick)],
        capture_output=True,
        env=helper_env(),
        cwd="/",
        timeout=30,
        check=False,
    )
    out = done.stdout.decode() + done.stderr.decode()
    assert "bwrap:" not in done.stderr.decode(), out  # the sandbox itself started
    assert tree_bytes(project) == before, out
    assert "SECRET-VALUE" not in out
    if trick.startswith("grep CapEff"):
        assert done.stdout.decode() == "CapEff:\t0000000000000000\n"


def test_a_bubblewrap_without_disable_userns_is_refused_with_the_reason(tmp_path: Path) -> None:
    # An older bubblewrap rejects the option: bash is refused at start, the doctor says why.
    old = tmp_path / "bwrap"
    old.write_text("#!/bin/sh\necho 'bwrap: Unknown option --disable-userns' >&2\nexit 1\n")
    old.chmod(0o755)
    status = probe(SandboxSettings(bwrap=str(old)), refresh=True)
    assert status.problem is not None
    assert "cannot turn off user namespaces" in status.problem and "0.8.0" in status.problem


def test_a_sandbox_that_keeps_a_capability_is_refused(tmp_path: Path) -> None:
    # A bubblewrap that ignores --cap-drop (here: runs the probe's command with CapEff set).
    leaky = tmp_path / "bwrap"
    leaky.write_text("#!/bin/sh\necho 'CapEff:\t000001ffffffffff' >&2\nexit 86\n")
    leaky.chmod(0o755)
    status = probe(SandboxSettings(bwrap=str(leaky)), refresh=True)
    assert status.problem is not None and "still holds capabilities" in status.problem
