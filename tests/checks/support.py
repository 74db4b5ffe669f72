"""A small project with a failing test, a plan whose step names a check, and an agent script
that explores, runs the tests, is refused, fixes the code and completes (docs/checks.md)."""

from __future__ import annotations

from pathlib import Path

from engine.model.script import ScriptStep, call, say

CHECK = "python3 -m unittest -q"

APP_PY = 'def health():\n    return "down"\n'
FIXED_APP_PY = 'def health():\n    return "ok"\n'
TEST_PY = (
    "import unittest\n\nimport app\n\n\n"
    "class HealthTest(unittest.TestCase):\n"
    "    def test_health(self):\n"
    '        self.assertEqual(app.health(), "ok")\n'
)
# The agent adds a second test while it works: the Done card names the test file.
MORE_TESTS = (
    "\n    def test_health_is_text(self):\n        self.assertIsInstance(app.health(), str)\n"
)

CHECKED_PLAN = f"""# Health check

## Context
- **Problem:** `health()` reports "down" and its test fails.
- **Target state:** `health()` returns "ok" and the test suite passes.
- **Intent:** The owner wants a green suite before the release.

## Implementation steps
1. Fix health — make health() return "ok".
   Done when: `{CHECK}` passes
"""

PLANNING = [
    call("plan", {"op": "init", "title": "Health check", "mode": "design"}),
    call("write_file", {"path": "{plan_md}", "content": CHECKED_PLAN}, expect="Design plan"),
    call("plan", {"op": "submit"}),
    say("The plan is ready for review."),
]


def make_project(workspace: Path) -> None:
    """A tiny project whose one test fails until ``health()`` is fixed."""
    workspace.mkdir(exist_ok=True)
    (workspace / "app.py").write_text(APP_PY)
    (workspace / "test_app.py").write_text(TEST_PY)
    (workspace / "README.md").write_text("# Service\n\nhealth() says whether we are up.\n")
    docs = workspace / "docs"
    docs.mkdir(exist_ok=True)
    for n in range(6):
        (docs / f"note{n}.md").write_text(f"Note {n}: health is checked by the monitor.\n")


def explore() -> list[ScriptStep]:
    """What a real agent does before it writes: list, read and grep, about twenty times."""
    steps: list[ScriptStep] = [call("list_files", {}), call("list_files", {"path": "docs"})]
    for name in ("README.md", "app.py", "test_app.py"):
        steps.append(call("read_file", {"path": name}))
    for n in range(6):
        steps.append(call("read_file", {"path": f"docs/note{n}.md"}))
    for pattern in ("def health", "health", "unittest", "down", "ok", "assert"):
        steps.append(call("grep", {"pattern": pattern}))
    steps += [call("read_file", {"path": "app.py"}), call("read_file", {"path": "test_app.py"})]
    return steps


def execution() -> list[ScriptStep]:
    """The approved run: explore, see the test fail, claim done too early (refused with the
    failure), fix the code and add a test, run the tests, complete."""
    return [
        call("plan", {"op": "start"}),
        *explore(),
        call("bash", {"command": CHECK}),
        call("plan", {"op": "complete", "evidence": "looks fine"}, expect="FAILED"),
        call(
            "edit_file",
            {"path": "app.py", "old_text": 'return "down"', "new_text": 'return "ok"'},
            expect="checks-failed",
        ),
        call(
            "edit_file",
            {
                "path": "test_app.py",
                "old_text": '"ok")\n',
                "new_text": '"ok")\n' + MORE_TESTS,
            },
        ),
        call("bash", {"command": CHECK}),
        call("plan", {"op": "complete", "evidence": "all green"}, expect="OK"),
        say("Fixed: health() returns ok and the suite passes.", expect="archived"),
    ]


ALLOW_CHECK: tuple[tuple[str, ...], ...] = (("python3", "-m", "unittest"),)
