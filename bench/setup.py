"""What a project's setup adds to an approved plan (docs/environments.md).

Run: ``python -m bench.setup``.

A real project (a ``src/`` layout, an editable install and pytest in a ``.venv``) set up the
way a plan's worktree is: its ``.plangate/setup.sh`` run by ``BashTool.run_setup`` in the real
sandbox with the network on and the project's package caches mounted, the package index a
folder of wheels served on loopback (fetched once through this machine's pip configuration).
Three worktrees in one run:

1. the first setup (cold caches): what the first plan waits for;
2. the script again with warm caches (pip reads its cache, not the index);
3. the second plan of the unchanged project: the kept copy of the first build is put in
   (``restore_copy``), the script is not run. Target: at most a fifth of (1).

Each new worktree's pytest is run once to prove the environment works where it landed.
"""

from __future__ import annotations

import asyncio
import functools
import http.server
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from engine.environments import _built, _entries, environment_key, restore_copy, save_copy
from engine.tools.bash import BashTool
from engine.worktree.script import script_of

PYPROJECT = """[build-system]
requires = ["setuptools>=61", "wheel"]
build-backend = "setuptools.build_meta"

[project]
name = "calc"
version = "0.1"

[tool.setuptools.packages.find]
where = ["src"]
"""
WANTED = ("pytest", "setuptools", "wheel")
FILES = {
    "pyproject.toml": PYPROJECT,
    "src/calc/__init__.py": "def add(a, b):\n    return a + b\n",
    "tests/test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
}


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        return


def _project(root: Path) -> Path:
    for name, text in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def _works(root: Path) -> bool:
    done = subprocess.run(
        [".venv/bin/python", "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    return "1 passed" in done.stdout


async def _setup(bash: BashTool, script: str, tree: Path, caches: Path) -> tuple[float, list[str]]:
    before = _entries(tree)
    started = time.perf_counter()
    ran = await bash.run_setup(
        script, session_id="bench", workspace=tree, timeout_s=900, caches=caches
    )
    took = time.perf_counter() - started
    if ran.exit_code != 0:
        raise SystemExit(f"setup failed ({ran.exit_code}): {ran.problem or ran.output[-500:]}")
    return took, _built(tree, before)


async def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="plangate-bench-setup-"))
    try:
        wheels = root / "wheels"
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "-d", str(wheels), *WANTED],
            check=True,
            capture_output=True,
        )
        handler = functools.partial(_Quiet, directory=str(wheels))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        index = f"http://127.0.0.1:{server.server_address[1]}/"
        script = script_of(
            "set -e\n/usr/bin/python3 -m venv .venv\n"
            f".venv/bin/pip install -q --no-index --find-links {index} -e . pytest\n"
        )
        bash = BashTool()
        caches = root / "caches"
        caches.mkdir()
        first = _project(root / "worktrees" / "plan-one")
        cold, built = await _setup(bash, script.text, first, caches)
        kept = root / "built" / environment_key(first, script)
        save_copy(kept, first, built)
        warm_tree = _project(root / "worktrees" / "plan-warm")
        warm, _ = await _setup(bash, script.text, warm_tree, caches)
        second = _project(root / "worktrees" / "plan-two")
        started = time.perf_counter()
        reused = restore_copy(kept, second)
        copied = time.perf_counter() - started
        server.shutdown()
        assert reused == built, (reused, built)
        ok = all(_works(tree) for tree in (first, warm_tree, second))
        print(f"first setup (cold caches):        {cold:7.2f} s")
        print(f"the script again (warm caches):   {warm:7.2f} s  ({warm / cold:.2f} of the first)")
        print(
            f"second plan (the kept copy):      {copied:7.2f} s  ({copied / cold:.2f} of the first)"
        )
        print(f"every worktree's pytest passes:   {ok}")
        print(f"target: second <= 1/5 of first:   {'met' if copied <= cold / 5 else 'NOT met'}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
