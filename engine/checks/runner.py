"""Running checks: in order, in the sandbox bash uses, the workspace read-only (docs/checks.md).

:class:`CheckRunner` is the port the plan and goal services call; :class:`SandboxChecks` runs each
command through :meth:`engine.tools.bash.BashTool.run_check`, so a check gets exactly bash's
confinement (mounts, hidden paths, limits) with the workspace read-only and the network off. The
run stops at the first check that fails; what is written down is plangate's record of the run
(command, exit code, duration, the last lines of output), never the model's account of it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from engine.checks.types import CheckResult, CheckRun
from engine.checks.watch import changed_files, snapshot
from engine.tools.bash import BashTool

# What a result keeps of the output: its last lines, within a character budget.
TAIL_LINES = 40
TAIL_CHARS = 3000


class CheckRunner(Protocol):
    """Runs a list of checks for a session in its workspace."""

    async def run(
        self,
        commands: Sequence[str],
        *,
        session_id: str,
        workspace: Path,
        hidden: Sequence[Path] = (),
        baseline: Mapping[str, str] | None = None,
        watch: Sequence[str] = (),
    ) -> CheckRun:
        """Run ``commands`` in order, stopping at the first failure. With ``baseline`` (the
        :func:`engine.checks.watch.snapshot` of ``watch``'s paths), also list the watched
        files that changed since."""
        ...


def output_tail(text: str, *, lines: int = TAIL_LINES, chars: int = TAIL_CHARS) -> str:
    """The last ``lines`` lines of ``text``, at most ``chars`` characters (cut at the front)."""
    kept = "\n".join(text.rstrip().split("\n")[-lines:])
    return kept if len(kept) <= chars else "…" + kept[-(chars - 1) :]


class SandboxChecks:
    """:class:`CheckRunner` over the bash tool's sandbox runner."""

    def __init__(
        self,
        bash: BashTool,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._bash = bash
        self._clock = clock
        self._monotonic = monotonic

    async def run(
        self,
        commands: Sequence[str],
        *,
        session_id: str,
        workspace: Path,
        hidden: Sequence[Path] = (),
        baseline: Mapping[str, str] | None = None,
        watch: Sequence[str] = (),
    ) -> CheckRun:
        """See :class:`CheckRunner`."""
        results: list[CheckResult] = []
        not_run: list[str] = []
        for index, command in enumerate(commands):
            started = self._monotonic()
            ran = await self._bash.run_check(
                command, session_id=session_id, workspace=workspace, hidden=hidden
            )
            text = ran.output
            if ran.problem is not None:
                text = ran.problem
            elif ran.timed_out:
                text = f"{text}\ntimed out after {ran.timeout_s:g}s; the check was killed"
            result = CheckResult(
                command=command,
                exit_code=ran.exit_code,
                duration_s=round(self._monotonic() - started, 3),
                output_tail=output_tail(text),
                timed_out=ran.timed_out,
                at=datetime.fromtimestamp(self._clock(), UTC).isoformat(),
            )
            results.append(result)
            if not result.passed:
                not_run = list(commands[index + 1 :])
                break
        changed: list[str] = []
        if baseline is not None:
            now = await asyncio.to_thread(snapshot, list(watch or commands), workspace)
            changed = changed_files(baseline, now)
        return CheckRun(results=results, not_run=not_run, changed=changed)


__all__ = ["TAIL_CHARS", "TAIL_LINES", "CheckRunner", "SandboxChecks", "output_tail"]
