"""A project's own environment (docs/environments.md), through the real Application.

Real git, real bubblewrap, real pip: a Python project with a ``src/`` layout whose owner keeps
an editable install in an ignored ``.venv``, and a committed ``.plangate/setup.sh``. The plan's
worktree has no ``.venv`` (git does not carry it); plangate runs the setup script there, in
the sandbox with the network on, before the first step, so the agent's bash and the step's
check run the project's own pytest against the worktree's code. The package index is a folder
of wheels served on loopback (pip reaches it through the setup's network).
"""

from __future__ import annotations

import functools
import http.server
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.app import parts
from engine.app import Engine
from engine.model.script import ScriptStep, call, say
from tests.fakebot.server import FakeBotApi
from tests.projects.support import git, make_repo
from tests.telegram.app_support import GROUP, OWNER, eventually
from tests.telegram.live import Live, button, card, labels, live_bot, until

CHECK = ".venv/bin/python -m pytest -q"
SYSTEM_PYTHON = "/usr/bin/python3"

PLAN = f"""# Fix add

## Context
- **Problem:** `add()` subtracts and its test fails.
- **Target state:** `add()` adds and the project's tests pass.
- **Intent:** The owner wants a green suite.

## Implementation steps
1. Fix add — make add() return the sum.
   Done when: `{CHECK}` passes
"""

PYPROJECT = """[build-system]
requires = ["setuptools>=61", "wheel"]
build-backend = "setuptools.build_meta"

[project]
name = "calc"
version = "0.1"

[tool.setuptools.packages.find]
where = ["src"]
"""
BROKEN = "def add(a, b):\n    return a - b\n"
TEST = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pytest, setuptools and wheel as wheel files, fetched once for the module through the
    machine's own pip configuration (a local index here; skipped where none answers)."""
    if not Path(SYSTEM_PYTHON).exists():
        pytest.skip(f"{SYSTEM_PYTHON} (the sandbox's python3) is not installed")
    folder = tmp_path_factory.mktemp("wheels")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "-d", str(folder)]
        + ["pytest", "setuptools", "wheel"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0 or not list(folder.glob("pytest-*.whl")):
        pytest.skip(f"no package index for pytest's wheels: {done.stderr.strip()[-200:]}")
    return folder


@pytest.fixture
def index(wheels: Path) -> Iterator[str]:
    """The wheel folder as a package index on loopback (``--find-links`` reads its listing)."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(wheels))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def setup_script(index: str) -> str:
    return (
        "set -e\n"
        f"{SYSTEM_PYTHON} -m venv .venv\n"
        f".venv/bin/pip install -q --no-index --find-links {index} -e . pytest\n"
    )


def python_project(root: Path, index: str, wheels: Path) -> Path:
    """The owner's project: git, src layout, an editable install in an ignored .venv."""
    repo = make_repo(
        root,
        {
            ".gitignore": ".venv/\n.pytest_cache/\n*.egg-info/\n__pycache__/\n",
            "pyproject.toml": PYPROJECT,
            "src/calc/__init__.py": BROKEN,
            "tests/test_calc.py": TEST,
            ".plangate/setup.sh": setup_script(index),
            "README.md": "# calc\n\nAdds numbers.\n",
        },
    )
    subprocess.run(
        ["bash", "-c", f"set -e; {SYSTEM_PYTHON} -m venv .venv; "
         f".venv/bin/pip install -q --no-index --find-links {wheels} -e . pytest"],
        cwd=repo,
        env={"PATH": "/usr/bin:/bin", "HOME": str(root), "PIP_CONFIG_FILE": "/dev/null"},
        check=True,
        capture_output=True,
    )
    return repo


def owner_pytest(repo: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [".venv/bin/python", "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"},
    )


PLANNING: list[ScriptStep] = [
    call("list_files", {"path": "."}),
    call("read_file", {"path": ".plangate/setup.sh"}),
    call("plan", {"op": "init", "title": "Fix add", "mode": "design"}),
    call("write_file", {"path": "{plan_md}", "content": PLAN}, expect="Design plan"),
    call("plan", {"op": "submit"}),
    say("The plan is ready for review."),
]

EXECUTION: list[ScriptStep] = [
    call("plan", {"op": "start"}),
    call("list_files", {"path": "."}),
    call("read_file", {"path": "src/calc/__init__.py"}),
    call("read_file", {"path": "tests/test_calc.py"}),
    # The project's own pytest, in the worktree: it runs and fails with pytest's output.
    call("bash", {"command": CHECK}),
    call("plan", {"op": "complete", "evidence": "done"}, expect="1 failed"),
    call("read_file", {"path": "src/calc/__init__.py"}, expect="checks-failed"),
    call(
        "edit_file",
        {"path": "src/calc/__init__.py", "old_text": "a - b", "new_text": "a + b"},
    ),
    call("bash", {"command": CHECK}),
    call("plan", {"op": "complete", "evidence": "green"}, expect="1 passed"),
    say("Fixed add(); the project's tests pass.", expect="Checks passed"),
]


async def _approval_messages(api: FakeBotApi) -> int:
    return sum(1 for m in api.bot_messages(GROUP) if "Allow once" in labels(m))


async def _phase(engine: Engine, sid: str) -> str:
    record = await engine.worktrees.record(sid)
    return record.phase if record is not None else ""


async def test_setup_builds_the_worktree_env_and_its_pytest_proves_the_fix(
    fake_api: FakeBotApi, tmp_path: Path, index: str, wheels: Path
) -> None:
    repo = python_project(tmp_path / "work", index, wheels)
    assert "1 failed" in owner_pytest(repo).stdout
    async with live_bot(fake_api, tmp_path, [*PLANNING, *EXECUTION]) as live:
        engine = live.engine
        fake_api.user_message(GROUP, OWNER, "/plan Fix add")
        await eventually(lambda: any("ready for review" in m.text for m in _all(fake_api)))
        sid = await engine.session_for_chat(GROUP, 0)
        await until(lambda: _review(live, sid))
        await parts(live.app).presenter.flush()
        review = await card(fake_api, live, sid)
        # The review names the script and its hash; approving the plan approves that text.
        script = await engine.worktrees.project_script(repo)
        assert script is not None and f"sha256 {script.short}" in review.text
        fake_api.press(GROUP, review.message_id, button(review, "✅ Approve"), user_id=OWNER)
        await until(lambda: _is_done(engine, sid), timeout_s=240)
        # The main checkout is untouched until Merge.
        assert (repo / "src/calc/__init__.py").read_text() == BROKEN
        sidecar = (await engine.worktrees.record(sid)).sidecar  # type: ignore[union-attr]
        task = sidecar["tasks"][0]
        assert task["status"] == "completed"
        [result] = task["check_results"]
        assert (result["command"], result["exit_code"]) == (CHECK, 0)
        assert "1 passed" in result["output_tail"]
        await parts(live.app).presenter.flush()
        done = await _done_card(fake_api, live, sid)
        fake_api.press(GROUP, done.message_id, button(done, "🔀 Merge"), user_id=OWNER)
        await until(lambda: _merged(engine, sid))
        assert await _approval_messages(fake_api) <= 1
    # Merge brought the fix; the owner's own environment still works and passes now.
    assert (repo / "src/calc/__init__.py").read_text() == BROKEN.replace("a - b", "a + b")
    assert "1 passed" in owner_pytest(repo).stdout
    assert git(repo, "status", "--porcelain") == ""


def _all(api: FakeBotApi) -> list:  # type: ignore[type-arg]
    return api.bot_messages(GROUP)


async def _review(live: Live, sid: str) -> bool:
    data = await live.engine.plan_card(sid)
    return data.state == "review" and data.sidecar is not None and bool(data.sidecar.flow.card_id)


async def _is_done(engine: Engine, sid: str) -> bool:
    return await _phase(engine, sid) == "done" and not engine.agents.is_busy(sid)


async def _merged(engine: Engine, sid: str) -> bool:
    return await _phase(engine, sid) == "merged"


async def _done_card(api: FakeBotApi, live: Live, sid: str):  # type: ignore[no-untyped-def]
    record = await live.engine.worktrees.record(sid)
    assert record is not None and record.sidecar is not None
    card_id = record.sidecar["flow"]["card_id"]
    return api.message(GROUP, card_id)
