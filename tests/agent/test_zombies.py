"""No zombies: 50 bash calls with plangate as PID 1 of its own pid namespace (as in a
container without an init) leave none. Real bubblewrap, real processes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("zombie_driver.py")


def test_fifty_bash_calls_as_pid_1_leave_no_zombie(tmp_path: Path) -> None:
    if shutil.which("unshare") is None:
        pytest.skip("util-linux unshare is missing (make test installs it)")
    # As root a plain pid namespace; otherwise a user namespace maps us to root first.
    userns = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    argv = ["unshare", *userns, "--pid", "--fork", "--mount-proc"]
    done = subprocess.run(
        [*argv, sys.executable, str(DRIVER), str(tmp_path), "50"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["pid"] == 1
    # The calls really ran in the sandbox: done, done with a job left, timed out.
    assert report["firsts"] == ["exit code 0", "timed out after 0.3s; the process group was killed"]
    assert report["zombies"] == []
