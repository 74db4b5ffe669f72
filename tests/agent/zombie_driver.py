"""Run the real bash tool N times and report the zombies left: ``python zombie_driver.py WS N``.

The zombie test starts this as PID 1 of its own pid namespace, as plangate is in a container
without an init. Prints one JSON line: this process's pid, the calls' first lines, and every
zombie in the namespace (pid, name, parent).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from engine.events import HumanSource
from engine.tools.base import ToolContext
from engine.tools.bash import BashLimits, BashTool

# A command that ends at once, one that leaves a background job, one killed at its timeout.
COMMANDS = ("true", "sleep 30 & echo started", "sleep 30")


def zombies() -> list[tuple[int, str, int]]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name = stat.split(" (", 1)[1].rsplit(")", 1)[0]
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] == "Z":
            found.append((int(entry.name), name, int(fields[1])))
    return found


async def main() -> None:
    workspace, calls = Path(sys.argv[1]), int(sys.argv[2])
    tool = BashTool(limits=BashLimits(kill_grace_s=0.5))
    ctx = ToolContext(session_id="z", workspace=workspace, turn_id="t", source=HumanSource())
    firsts = []
    for index in range(calls):
        command = COMMANDS[index % len(COMMANDS)]
        out = await tool.run({"command": command, "timeout_s": 0.3}, ctx)
        firsts.append(out.content.splitlines()[0])
    print(json.dumps({"pid": os.getpid(), "firsts": sorted(set(firsts)), "zombies": zombies()}))


if __name__ == "__main__":
    asyncio.run(main())
