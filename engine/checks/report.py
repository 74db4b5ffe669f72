"""Check runs in words: for the model, for the evidence field, for a one-line card entry."""

from __future__ import annotations

from collections.abc import Sequence

from engine.checks.types import CheckResult, CheckRun


def how_it_ended(result: CheckResult) -> str:
    """``exit 0 in 1.2s``, ``exit 1 in 0.3s`` or ``timed out after 600s``."""
    if result.timed_out:
        return f"timed out after {result.duration_s:.1f}s"
    if result.exit_code is None:
        return "could not run"
    return f"exit {result.exit_code} in {result.duration_s:.1f}s"


def result_line(result: CheckResult) -> str:
    """``✅ `pytest -q` exit 0 in 1.2s`` (plain text)."""
    mark = "✅" if result.passed else "❌"
    return f"{mark} `{result.command}` {how_it_ended(result)}"


def evidence_text(results: Sequence[CheckResult]) -> str:
    """The evidence plangate writes for a task its checks completed."""
    lines = ["Checks passed (run by plangate):"]
    for result in results:
        lines.append(f"- `{result.command}`: {how_it_ended(result)}")
        tail = result.output_tail.strip().split("\n")[-3:]
        lines.extend(f"  | {line}" for line in tail if line.strip())
    return "\n".join(lines)


def failure_report(run: CheckRun) -> str:
    """What the model is told when a run failed: every check run, the failing output in full
    (its tail), and what was not run."""
    lines = [result_line(r) for r in run.results]
    failed = run.failed
    if failed is not None:
        lines += ["", f"$ {failed.command}", failed.output_tail.rstrip() or "(no output)"]
    if run.not_run:
        lines += ["", "Not run after the failure: " + ", ".join(f"`{c}`" for c in run.not_run)]
    return "\n".join(lines)


__all__ = ["evidence_text", "failure_report", "how_it_ended", "result_line"]
