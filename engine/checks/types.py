"""What a check is and what running one records (docs/checks.md).

A check is a shell command named by the plan (a step's ``Done when:`` or ``## Checks``) or by
the owner (``/goal --check``). plangate runs it in the sandbox; :class:`CheckResult` is what it
writes down, never the model's words. A leaf module: the plan sidecar, the goal snapshot and the
event log all carry these values.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

# The most checks one task, plan or goal may name, and the longest command (a check is one
# line the owner can read on a phone).
MAX_CHECKS = 20
MAX_CHECK_CHARS = 1000


class CheckResult(BaseModel):
    """One run of one check: the command, how it ended, how long it took, its last lines."""

    model_config = ConfigDict(frozen=True, extra="allow")

    command: str
    # None when the command never ended on its own (timed out, or the sandbox could not start).
    exit_code: int | None
    duration_s: float
    output_tail: str = ""
    timed_out: bool = False
    # ISO time the run ended.
    at: str = ""

    @property
    def passed(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


class CheckRun(BaseModel):
    """One run of a list of checks, in order; it stops at the first that fails."""

    model_config = ConfigDict(frozen=True, extra="allow")

    results: list[CheckResult] = Field(default_factory=list)
    # The commands that were not run because an earlier one failed.
    not_run: list[str] = Field(default_factory=list)
    # Workspace-relative files under the checks' paths that changed since the baseline
    # (docs/checks.md "changed tests").
    changed: list[str] = Field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.not_run and all(r.passed for r in self.results)

    @property
    def failed(self) -> CheckResult | None:
        """The first result that did not pass, if any."""
        return next((r for r in self.results if not r.passed), None)

    @property
    def duration_s(self) -> float:
        return sum(r.duration_s for r in self.results)


def check_problem(commands: list[str] | tuple[str, ...]) -> str | None:
    """Why ``commands`` cannot be a list of checks, or ``None`` when they can."""
    if len(commands) > MAX_CHECKS:
        return f"at most {MAX_CHECKS} checks"
    for command in commands:
        if not command.strip():
            return "a check is an empty command"
        if len(command) > MAX_CHECK_CHARS:
            return f"a check is longer than {MAX_CHECK_CHARS} characters"
        if "\n" in command or "\r" in command or "\x00" in command:
            return "a check is one line"
    return None


__all__ = ["MAX_CHECKS", "MAX_CHECK_CHARS", "CheckResult", "CheckRun", "check_problem"]
