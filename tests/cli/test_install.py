"""plangate installed as a tool, the way the README's first screen says (``pipx install``): an
environment of its own, then ``plangate --version`` and the demo from another folder."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_pipx_install_gives_a_working_plangate_in_its_own_environment(tmp_path: Path) -> None:
    # A copy of the checkout: building must not leave build/ or *.egg-info in the real one.
    source = tmp_path / "src"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".venv", ".git", "*.egg-info", "build", "dist", "__pycache__", ".*_cache"
        ),
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PLANGATE_", "PIPX_"))}
    env |= {
        "PIPX_HOME": str(tmp_path / "pipx"),
        "PIPX_BIN_DIR": str(tmp_path / "bin"),
        "PIPX_MAN_DIR": str(tmp_path / "man"),
        "PIPX_DEFAULT_PYTHON": sys.executable,
        "HOME": str(tmp_path),
    }
    pipx = Path(sys.executable).with_name("pipx")
    done = subprocess.run(
        [str(pipx), "install", str(source)], env=env, capture_output=True, text=True, timeout=540
    )
    assert done.returncode == 0, done.stdout + done.stderr
    plangate = tmp_path / "bin" / "plangate"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    shown = subprocess.run(
        [str(plangate), "--version"], cwd=elsewhere, env=env, capture_output=True, text=True
    )
    assert shown.stdout == f"plangate {version}\n", shown.stderr
    demo = subprocess.run(
        [str(plangate), "demo", "--fast"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "     demo │ finished\n" in demo.stdout
    assert "Traceback" not in demo.stderr
    # The tool's environment is its own: not the test's, and not the checkout.
    venv_python = next((tmp_path / "pipx" / "venvs" / "plangate" / "bin").glob("python*"))
    located = subprocess.run(
        [str(venv_python), "-c", "import engine, sys; print(engine.__file__)"],
        cwd=elsewhere,
        capture_output=True,
        text=True,
    )
    assert str(tmp_path / "pipx" / "venvs" / "plangate") in located.stdout
