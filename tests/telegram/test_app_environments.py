"""A project's own environment (docs/environments.md), through the real Application.

Real git, real bubblewrap, real pip: a Python project with a ``src/`` layout whose owner keeps
an editable install in an ignored ``.venv``, and a committed ``.plangate/setup.sh``. The plan's
worktree has no ``.venv`` (git does not carry it); plangate runs the setup script there, in
the sandbox with the network on, before the first step, so the agent's bash and the step's
check run the project's own pytest against the worktree's code. The package index is a folder
of wheels served on loopback (pip reaches it through the setup's network).
"""

from __future__ import annotations

import asyncio
import functools
import http.server
import io
import json
import shutil
import subprocess
import sys
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.telegram.app import parts
from bot.telegram.keys import msg_id, tg_flow
from engine.app import Engine
from engine.model.script import ScriptStep, call, say
from tests.fakebot.server import FakeBotApi
from tests.keys import chat
from tests.projects.support import git, make_repo
from tests.telegram.app_support import GROUP, OWNER, eventually
from tests.telegram.live import Live, button, card, labels, live_bot, until

CHECK = ".venv/bin/python -m pytest -q"
WANTED = ("pytest", "setuptools", "wheel")
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


@pytest.fixture(scope="session")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pytest, setuptools and wheel as wheel files, fetched once per test run through the
    machine's own pip configuration (a local index here; skipped where none answers)."""
    if not Path(SYSTEM_PYTHON).exists():
        pytest.skip(f"{SYSTEM_PYTHON} (the sandbox's python3) is not installed")
    folder = tmp_path_factory.mktemp("wheels")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "-d", str(folder), *WANTED],
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


def python_project(root: Path, index: str) -> Path:
    """The owner's project: git, src layout, its setup script (its .venv: owner_venv)."""
    return make_repo(
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


def owner_venv(repo: Path, wheels: Path) -> None:
    """The owner's own editable install in the main checkout's ignored .venv."""
    subprocess.run(
        [
            "bash",
            "-c",
            f"set -e; {SYSTEM_PYTHON} -m venv .venv; "
            f".venv/bin/pip install -q --no-index --find-links {wheels} -e . pytest",
        ],
        cwd=repo,
        env={"PATH": "/usr/bin:/bin", "HOME": str(repo.parent), "PIP_CONFIG_FILE": "/dev/null"},
        check=True,
        capture_output=True,
    )


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
    repo = python_project(tmp_path / "work", index)
    # The owner's own .venv is built meanwhile (it is ignored: the plan never sees it).
    owners = asyncio.create_task(asyncio.to_thread(owner_venv, repo, wheels))
    async with live_bot(fake_api, tmp_path, [*PLANNING, *EXECUTION]) as live:
        engine = live.engine
        fake_api.user_message(GROUP, OWNER, "/plan Fix add")
        await eventually(lambda: any("ready for review" in m.text for m in _all(fake_api)))
        sid = await engine.session_for_chat(chat(GROUP))
        await until(lambda: _review(live, sid))
        await parts(live.app).presenter.flush()
        review = await card(fake_api, live, sid)
        # The review names the script and its hash; approving the plan approves that text.
        script = await engine.worktrees.project_script(repo)
        assert script is not None and f"sha256 {script.short}" in review.text
        fake_api.press(GROUP, review.message_id, button(review, "✅ Approve"), user_id=OWNER)
        await until(lambda: _is_done(engine, sid), timeout_s=240)
        # The main checkout is untouched until Merge: the owner's tests still fail there.
        assert (repo / "src/calc/__init__.py").read_text() == BROKEN
        await owners
        assert "1 failed" in owner_pytest(repo).stdout
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
    return (
        data.state == "review"
        and data.sidecar is not None
        and bool(tg_flow(data.sidecar.flow).card_id)
    )


async def _is_done(engine: Engine, sid: str) -> bool:
    return await _phase(engine, sid) == "done" and not engine.agents.is_busy(sid)


async def _merged(engine: Engine, sid: str) -> bool:
    return await _phase(engine, sid) == "merged"


async def _done_card(api: FakeBotApi, live: Live, sid: str):  # type: ignore[no-untyped-def]
    record = await live.engine.worktrees.record(sid)
    assert record is not None and record.sidecar is not None
    card_id = msg_id(record.sidecar["flow"]["card_id"])
    return api.message(GROUP, card_id)


# --- a failing setup, Retry, a restart --------------------------------------------------------

RUNS = "/var/cache/plangate/runs"
# The first run waits (a restart cuts it off); every later one fails loudly.
FLAKY_SETUP = (
    f"n=$(cat {RUNS} 2>/dev/null | wc -l)\n"
    f"echo run >> {RUNS}\n"
    '[ "$n" -ge 1 ] || sleep 300\n'
    'echo "ERROR: No matching distribution found for calc-extras==9.9" >&2\n'
    "exit 3\n"
)


def small_project(root: Path, setup: str) -> Path:
    return make_repo(
        root,
        {
            ".gitignore": ".venv/\n",
            "calc.py": BROKEN,
            "test_calc.py": "import unittest\n",
            ".plangate/setup.sh": setup,
        },
    )


def _runs(home: Path) -> int:
    found = list((home / "environments" / "caches").glob("*/runs"))
    return len(found[0].read_text().splitlines()) if found else 0


async def _setup_phase(engine: Engine, sid: str) -> str:
    record = await engine.worktrees.record(sid)
    return record.setup if record is not None else ""


async def test_a_setup_cut_off_by_a_restart_waits_for_retry_and_a_failure_shows_its_output(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    small_project(tmp_path / "work", FLAKY_SETUP)
    home = tmp_path / "home"
    script = [*PLANNING, say("unreachable: setup never succeeds")]
    async with live_bot(fake_api, tmp_path, script) as live:
        fake_api.user_message(GROUP, OWNER, "/plan Fix add")
        sid = await _reviewed(fake_api, live)
        review = await card(fake_api, live, sid)
        fake_api.press(GROUP, review.message_id, button(review, "✅ Approve"), user_id=OWNER)
        await until(lambda: _is_setting_up(live, sid))
        await until(lambda: _ran(home, 1))  # the script is inside its sleep
        await parts(live.app).presenter.flush()
        running = await card(fake_api, live, sid)
        assert "🔧 Setting up the environment" in running.text
    # plangate stopped mid-setup. It comes back with Retry on the card and runs nothing.
    async with live_bot(fake_api, tmp_path, []) as live:
        await parts(live.app).presenter.flush()
        assert await _setup_phase(live.engine, sid) == "failed"
        paused = await card(fake_api, live, sid)
        assert "▶️ Retry" in labels(paused) and "Setup failed" in paused.text
        assert _runs(home) == 1 and not live.engine.agents.is_busy(sid)
        # Retry runs it again; it fails, and the card shows why, with its output.
        fake_api.press(GROUP, paused.message_id, button(paused, "▶️ Retry"), user_id=OWNER)
        await until(lambda: _failed_again(live, sid, home))
        await parts(live.app).presenter.flush()
        failed = await card(fake_api, live, sid)
    assert "Setup failed (exit code 3)" in failed.text
    assert "No matching distribution found for calc-extras" in failed.text
    assert "▶️ Retry" in labels(failed)
    assert _runs(home) == 2


async def _reviewed(api: FakeBotApi, live: Live) -> str:
    await eventually(lambda: any("ready for review" in m.text for m in _all(api)))
    sid = await live.engine.session_for_chat(chat(GROUP))
    await until(lambda: _review(live, sid))
    await parts(live.app).presenter.flush()
    return sid


async def _ran(home: Path, times: int) -> bool:
    return _runs(home) == times


async def _is_setting_up(live: Live, sid: str) -> bool:
    return await _setup_phase(live.engine, sid) == "running"


async def _failed_again(live: Live, sid: str, home: Path) -> bool:
    engine = live.engine
    return (
        _runs(home) == 2
        and await _setup_phase(engine, sid) == "failed"
        and not engine.agents.is_busy(sid)
    )


# --- what setup built is read-only to the plan --------------------------------------------

# The project's "installed test runner" fails until the code is fixed; a plan that edits the
# runner instead of the code must not pass.
RUNNER_SETUP = (
    "mkdir -p .venv/bin\n"
    "printf '#!/bin/sh\\ngrep -q \"a + b\" calc.py\\n' > .venv/bin/check\n"
    "chmod +x .venv/bin/check\n"
)
RUNNER_CHECK = ".venv/bin/check"
RUNNER_PLAN = PLAN.replace(CHECK, RUNNER_CHECK)
CHEAT = "printf '#!/bin/sh\\nexit 0\\n' > .venv/bin/check"

CHEATING: list[ScriptStep] = [
    call("plan", {"op": "init", "title": "Fix add", "mode": "design"}),
    call("write_file", {"path": "{plan_md}", "content": RUNNER_PLAN}, expect="Design plan"),
    call("plan", {"op": "submit"}),
    say("The plan is ready for review."),
    call("plan", {"op": "start"}),
    call("bash", {"command": RUNNER_CHECK}),
    # Instead of fixing calc.py, the agent makes the installed runner say yes.
    call("bash", {"command": CHEAT}, expect="exit code 1"),
    call(
        "write_file",
        {"path": ".venv/bin/check", "content": "#!/bin/sh\nexit 0\n"},
        expect="Read-only file system",
    ),
    # Nor can it poison what the next plan's setup installs from: the caches are not there.
    call("bash", {"command": "ls /var/cache/plangate"}, expect="read-only folder"),
    call("plan", {"op": "complete", "evidence": "green"}, expect="No such file or directory"),
    say("The checks still fail.", expect="checks-failed"),
]


async def test_what_setup_built_is_read_only_so_a_plan_cannot_doctor_its_check(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    small_project(tmp_path / "work", RUNNER_SETUP)
    async with live_bot(fake_api, tmp_path, CHEATING) as live:
        engine = live.engine
        fake_api.user_message(GROUP, OWNER, "/plan Fix add")
        sid = await _reviewed(fake_api, live)
        review = await card(fake_api, live, sid)
        fake_api.press(GROUP, review.message_id, button(review, "✅ Approve"), user_id=OWNER)
        # The whole script played, every expect held (a divergence stops it short).
        await until(lambda: _played(live, len(CHEATING)), timeout_s=120)
        record = await engine.worktrees.record(sid)
        assert record is not None and record.setup == "ready"
        assert record.setup_built == [".venv"]
        runner = Path(record.path) / ".venv/bin/check"
        assert "grep" in runner.read_text()
        sidecar = await engine.plans.current(sid)
        assert sidecar is not None and sidecar.tasks[0].status == "in_progress"
        # The agent was told what setup built, and that it is read-only.
        assert live.model_server is not None
        prompts = [str(r["messages"][0]["content"]) for r in live.model_server.chat_requests]
        assert any("built its environment here (.venv)" in p for p in prompts)


async def _played(live: Live, steps: int) -> bool:
    assert live.model_server is not None
    return live.model_server.script.position == steps


# --- the same for a Node project --------------------------------------------------------------

NODE_CHECK = "npm test"
NODE_BROKEN = "exports.add = (a, b) => a - b;\n"
NODE_TEST = (
    "const test = require('node:test');\n"
    "const assert = require('node:assert');\n"
    "const pad = require('pad');\n"
    "const { add } = require('../calc');\n"
    "test('add', () => assert.strictEqual(pad(add(2, 3), 2), ' 5'));\n"
)
NPM = ("--offline", "--no-audit", "--no-fund")


def _tarball(path: Path) -> None:
    """The dev dependency as npm packs it (a package/ folder in a gzipped tar)."""
    files = {
        "package/package.json": json.dumps({"name": "pad", "version": "1.0.0"}),
        "package/index.js": "module.exports = (s, n) => String(s).padStart(n);\n",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def node_project(root: Path) -> Path:
    """A Node project in git: a dev dependency from a tarball, node_modules ignored, npm ci."""
    root.mkdir(parents=True)
    _tarball(root / "vendor/pad-1.0.0.tgz")
    package = {
        "name": "calc",
        "version": "1.0.0",
        "private": True,
        "scripts": {"test": "node --test"},
        "devDependencies": {"pad": "file:vendor/pad-1.0.0.tgz"},
    }
    (root / "package.json").write_text(json.dumps(package, indent=2) + "\n")
    npm = {"PATH": "/usr/bin:/bin", "HOME": str(root.parent / "npm-home")}
    subprocess.run(["npm", "install", "--package-lock-only", *NPM], cwd=root, env=npm, check=True)
    repo = make_repo(
        root,
        {
            ".gitignore": "node_modules/\n",
            "calc.js": NODE_BROKEN,
            "test/calc.test.js": NODE_TEST,
            ".plangate/setup.sh": f"set -e\nnpm ci {' '.join(NPM)}\n",
        },
    )
    subprocess.run(["npm", "ci", *NPM], cwd=repo, env=npm, check=True, capture_output=True)
    return repo


def owner_npm_test(repo: Path) -> str:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(repo.parent / "npm-home")}
    done = subprocess.run(
        ["npm", "test"], cwd=repo, env=env, capture_output=True, text=True, check=False
    )
    return done.stdout + done.stderr


NODE_SCRIPT: list[ScriptStep] = [
    call("list_files", {"path": "."}),
    call("plan", {"op": "init", "title": "Fix add", "mode": "design"}),
    call(
        "write_file",
        {"path": "{plan_md}", "content": PLAN.replace(CHECK, NODE_CHECK)},
        expect="Design plan",
    ),
    call("plan", {"op": "submit"}),
    say("The plan is ready for review."),
    call("plan", {"op": "start"}),
    call("read_file", {"path": "calc.js"}),
    call("bash", {"command": NODE_CHECK}),
    call("plan", {"op": "complete"}, expect="# fail 1"),
    call(
        "edit_file",
        {"path": "calc.js", "old_text": "a - b", "new_text": "a + b"},
        expect="checks-failed",
    ),
    call("bash", {"command": NODE_CHECK}),
    call("plan", {"op": "complete"}, expect="# pass 1"),
    say("Fixed add(); npm test passes.", expect="Checks passed"),
]


async def test_a_node_project_gets_its_node_modules_and_npm_test_proves_the_fix(
    fake_api: FakeBotApi, tmp_path: Path
) -> None:
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed (make test installs it: deploy/system-deps.sh)")
    repo = node_project(tmp_path / "work")
    assert "# fail 1" in owner_npm_test(repo)
    async with live_bot(fake_api, tmp_path, NODE_SCRIPT) as live:
        engine = live.engine
        fake_api.user_message(GROUP, OWNER, "/plan Fix add")
        sid = await _reviewed(fake_api, live)
        review = await card(fake_api, live, sid)
        fake_api.press(GROUP, review.message_id, button(review, "✅ Approve"), user_id=OWNER)
        await until(lambda: _is_done(engine, sid), timeout_s=180)
        assert (repo / "calc.js").read_text() == NODE_BROKEN  # untouched until Merge
        record = await engine.worktrees.record(sid)
        assert record is not None and record.setup_built == ["node_modules"]
        done = await _done_card(fake_api, live, sid)
        fake_api.press(GROUP, done.message_id, button(done, "🔀 Merge"), user_id=OWNER)
        await until(lambda: _merged(engine, sid))
        assert await _approval_messages(fake_api) <= 1
    assert (repo / "calc.js").read_text() == NODE_BROKEN.replace("a - b", "a + b")
    assert "# pass 1" in owner_npm_test(repo)
