"""What the approval gate costs a bash call that a rule allows.

Run: ``python -m bench.approval [--calls N] [--repeat R]``.

The gate's work for an allowed call (``ToolApprovals.check``: the policy's quote-aware scan,
``shlex`` words, prefix match against the settings' and session rules) is timed over N calls,
against the cheapest real bash call plangate can make (``BashTool.run`` of ``true``: spawn,
wait, reap). Interleaved R times; the result is the median ratio gate / bash call, so a burst of
load on a shared machine hits both sides. Target: under 1% (the gate is noise next to a call).

The ``escalation`` row is the default policy: no allow rule is looked at, but every command is
searched for the ``PLANGATE_ASK_BASH`` prefixes (split at operators, quoted words searched
too); the same target holds.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from engine.approval.policy import BashPolicy, parse_rules
from engine.approval.service import ToolApprovals
from engine.events import HumanSource
from engine.testing import InMemoryEventLog
from engine.tools.base import ToolContext
from engine.tools.bash import BashTool
from engine.tools.runtime import ToolCallRequest

RULES = parse_rules("pytest,git status,git diff,ls,make test,npm run,python3 -m pytest")
ASK = parse_rules("git push,rm -rf,npm publish,docker push")
# Most commands quote nothing (a fast split); one with quotes goes through shlex.
PLAIN = "python3 -m pytest tests/unit -q -x --durations=5"
QUOTED = "python3 -m pytest tests/unit -q -x --durations=5 -k 'not slow and not network'"


class _Quiet:
    async def approval_asked(self, session_id: str, view: object) -> None:
        raise AssertionError("an allowed call must not ask")

    async def approval_closed(self, session_id: str, view: object, decision: str) -> None:
        raise AssertionError("an allowed call must not ask")


async def _gate_s(gate: ToolApprovals, ctx: ToolContext, calls: int, command: str) -> float:
    request = ToolCallRequest(call_id="c", name="bash", arguments={"command": command})
    start = time.perf_counter()
    for _ in range(calls):
        assert await gate.check(request, ctx, phase="active") is None
    return (time.perf_counter() - start) / calls


async def _bash_s(tool: BashTool, ctx: ToolContext, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        out = await tool.run({"command": "true"}, ctx)
        assert out.content.startswith("exit code 0"), out.content
    return (time.perf_counter() - start) / calls


async def main(calls: int, repeat: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ctx = ToolContext(session_id="s", workspace=Path(tmp), turn_id="t", source=HumanSource())
        gate = ToolApprovals(InMemoryEventLog(), _Quiet(), rules=RULES)  # type: ignore[arg-type]
        escalation = ToolApprovals(
            InMemoryEventLog(),
            _Quiet(),  # type: ignore[arg-type]
            policy=BashPolicy(mode="escalation", ask=ASK),
        )
        tool = BashTool()
        rows: dict[str, tuple[list[float], list[float]]] = {
            "plain": ([], []),
            "quoted": ([], []),
            "escalation": ([], []),
        }
        bashes = []
        for _ in range(repeat):
            b = await _bash_s(tool, ctx, max(1, calls // 100))
            bashes.append(b)
            for name, command, which in (
                ("plain", PLAIN, gate),
                ("quoted", QUOTED, gate),
                ("escalation", QUOTED, escalation),
            ):
                g = await _gate_s(which, ctx, calls, command)
                rows[name][0].append(g)
                rows[name][1].append(g / b)
    print(f"bash 'true' per call: {statistics.median(bashes) * 1e3:.2f} ms")
    for name, (gates, ratios) in rows.items():
        print(
            f"gate, {name} command: {statistics.median(gates) * 1e6:.1f} us per call, "
            f"ratio to the bash call {statistics.median(ratios):.3%} (target < 1%)"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.calls, args.repeat))
