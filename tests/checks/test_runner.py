"""The check runner: bash's sandbox, read-only, offline, the end of the output kept."""

from __future__ import annotations

from pathlib import Path

from engine.checks.runner import SandboxChecks, output_tail
from engine.checks.watch import changed_files, snapshot, watched_files
from engine.tools.bash import BashLimits, BashTool
from engine.tools.sandbox import SandboxSettings


async def test_a_check_keeps_the_end_of_long_output_and_has_no_network(tmp_path: Path) -> None:
    # The network is on for bash here; a check still runs offline (only loopback exists).
    bash = BashTool(sandbox=SandboxSettings(network=True), limits=BashLimits(output_chars=2000))
    checks = SandboxChecks(bash)
    run = await checks.run(
        ["seq 1 50000", "awk 'NR>2{print $1}' /proc/net/dev"], session_id="s", workspace=tmp_path
    )
    assert run.passed
    first, net = run.results
    assert first.output_tail.startswith("49961\n") and first.output_tail.endswith("\n50000")
    assert net.output_tail.split() == ["lo:"]


async def test_a_check_that_times_out_fails_and_stops_the_run(tmp_path: Path) -> None:
    checks = SandboxChecks(BashTool(limits=BashLimits(max_timeout_s=0.5, kill_grace_s=0.2)))
    run = await checks.run(["sleep 5", "true"], session_id="s", workspace=tmp_path)
    assert not run.passed and run.not_run == ["true"]
    [result] = run.results
    assert result.timed_out and result.exit_code is None
    assert "timed out after 0.5s" in result.output_tail


def test_output_tail_keeps_the_last_lines_within_the_budget() -> None:
    text = "\n".join(f"line {n}" for n in range(100))
    assert output_tail(text, lines=3) == "line 97\nline 98\nline 99"
    assert output_tail("x" * 50, chars=10) == "…" + "x" * 9


def test_watched_files_follow_the_arguments_or_the_test_files(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "data.json").write_text("{}")
    (tmp_path / "test_a.py").write_text("a")
    (tmp_path / "app.py").write_text("x")
    (tmp_path / "check.py").write_text("c")
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "test_x.py").write_text("skipped")
    rel = lambda paths: [p.relative_to(tmp_path).as_posix() for p in paths]  # noqa: E731
    assert rel(watched_files(["python3 check.py"], tmp_path)) == ["check.py"]
    assert rel(watched_files(["pytest -q tests::x"], tmp_path)) == ["tests/data.json"]
    assert rel(watched_files(["make test"], tmp_path)) == ["test_a.py", "tests/data.json"]
    before = snapshot(["make"], tmp_path)
    (tmp_path / "test_a.py").write_text("edited")
    (tmp_path / "tests" / "test_new.py").write_text("new")
    (tmp_path / "app.py").write_text("not a test")
    assert changed_files(before, snapshot(["make"], tmp_path)) == [
        "test_a.py",
        "tests/test_new.py",
    ]
