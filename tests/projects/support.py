"""Real git repositories made in the test, and a model that plays one script per plan.

Git runs with no global or system configuration and an identity given on the command line,
so nothing of the machine's own git setup leaks in (plangate itself needs none either).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.model.script import ScriptedCall, ScriptStep, call, say
from engine.model.scripted import ScriptedProvider
from engine.model.types import ModelReply

IDENTITY = ("-c", "user.name=Test Owner", "-c", "user.email=owner@example.test")


def git(repo: Path, *args: str) -> str:
    """Run git in ``repo`` (as the owner would, by hand); its stdout, stripped."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(repo),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "LANG": "C",
    }
    done = subprocess.run(
        ["git", *IDENTITY, *args],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout.strip()


def make_repo(path: Path, files: dict[str, str]) -> Path:
    """A git repository on branch main with ``files`` in its first commit."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text, encoding="utf-8")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "first")
    return path


def plan_md(title: str, step: str) -> str:
    """A valid one-step design plan (template B)."""
    return (
        f"# {title}\n\n## Context\n- **Problem:** {title} is missing.\n"
        f"- **Target state:** {step}\n- **Intent:** The owner asked for it.\n\n"
        f"## Implementation steps\n1. {step}\n   - Done when: the file exists\n"
    )


def planning(title: str, step: str) -> list[ScriptStep]:
    """A planner that explores a little, writes the plan and submits it."""
    return [
        call("list_files", {"path": "."}),
        call("grep", {"pattern": "def "}),
        call("plan", {"op": "init", "title": title, "mode": "design"}),
        call(
            "write_file",
            {"path": "{plan_md}", "content": plan_md(title, step)},
            expect="Design plan created",
        ),
        call("plan", {"op": "submit"}),
        say(f"{title}: the plan is ready for review."),
    ]


def writing(files: dict[str, str], *, checks: Sequence[ScriptStep] = ()) -> list[ScriptStep]:
    """An execution run: read around, write ``files``, check, complete the one task."""
    steps: list[ScriptStep] = [call("plan", {"op": "start"}), call("list_files", {"path": "."})]
    # One reply may carry many calls: a 200-file change is one step, not 200.
    writes = tuple(ScriptedCall("write_file", {"path": p, "content": t}) for p, t in files.items())
    steps.append(ScriptStep(tool_calls=writes))
    steps += list(checks)
    steps += [call("plan", {"op": "complete", "evidence": "written"}), say("Done.")]
    return steps


class RoutedProvider:
    """Our ModelProvider port with one script per conversation, chosen by a marker in its
    first user message (two sessions run at once and each gets its own replies).

    ``hold`` names a marker whose execution (the first call after its approval) waits for
    ``release``: both plans are then approved and live before either writes.
    """

    def __init__(self, scripts: dict[str, list[ScriptStep]], *, hold: str | None = None) -> None:
        self.scripts = {marker: ScriptedProvider(steps) for marker, steps in scripts.items()}
        self.hold = hold
        self.release = asyncio.Event()
        self.held = asyncio.Event()

    async def complete(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        *,
        max_tokens: int | None = None,
    ) -> ModelReply:
        first = next((str(m.get("content")) for m in messages if m.get("role") == "user"), "")
        marker = next(m for m in self.scripts if m in first)
        executing = any("approved" in str(m.get("content", "")).lower() for m in messages[-1:])
        if marker == self.hold and executing and not self.release.is_set():
            self.held.set()
            await self.release.wait()
        return await self.scripts[marker].complete(messages, tools, max_tokens=max_tokens)
