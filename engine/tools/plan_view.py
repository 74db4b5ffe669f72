"""The plan as the tools see it: its derived state, the session ``.md`` and the gate's texts.

Here, below both the plan package and the tools, because the tools read it (``bash`` refuses
post-init, the boundary mounts the workspace read-only pre-init) and the plan package, whose
tool is a tool, imports the tools: the plan gate (``engine.plan.gate``) is built on these.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

PlanState = Literal["none", "pre_init", "post_init", "active"]
"""The derived lifecycle state: NoPlan, Editing pre-init, Editing post-init, Active."""

GATE_TEXTS: dict[str, str] = {
    "gate-pre-init-write": (
        "Denied (gate-pre-init-write): plan mode is on and no plan exists yet, so project "
        "files cannot change. Explore with read_file, grep or bash, then call plan init."
    ),
    "gate-editing-write": (
        "Denied (gate-editing-write): while the plan is being designed only the session plan "
        ".md (the path plan init returned) can be written. Write the plan there."
    ),
    "gate-editing-bash": (
        "Denied (gate-editing-bash): bash is off while the plan is being designed. Use "
        "read_file, list_files and grep; write only the plan .md."
    ),
    "gate-plan-too-big": (
        "Denied (gate-plan-too-big): the plan .md would be over the size limit "
        "(PLANGATE_MAX_PLAN_KB). Keep the plan short: steps, not code or logs; put long "
        "material in project files the steps name."
    ),
    "gate-editing-send": (
        "Denied (gate-editing-send): nothing is sent to the chat while a plan is being "
        "written. Put what the owner should see in the plan; send files once it is approved."
    ),
    "gate-editing-network": (
        "Denied (gate-editing-network): the network is off while the plan is being designed. "
        "Write what you would fetch into the plan as a step."
    ),
    "gate-round-ask": (
        "Denied (gate-round-ask): nobody can answer a question or review a plan in an "
        "autonomous goal round; decide with what you know, or report the goal blocked with "
        "update_goal."
    ),
    "gate-undeclared": (
        "Denied (gate-undeclared): this tool (or this operation of it) does not declare what "
        "it does, so it cannot run while a plan is being written or in a goal round."
    ),
    "gate-active-md-frozen": (
        "Denied (gate-active-md-frozen): the approved plan .md is frozen while the checklist "
        "runs. Record progress with plan complete or plan skip; the owner can Revise the plan."
    ),
}


@dataclass(frozen=True, slots=True)
class PlanGateView:
    """What the gate needs to know: the derived state and the session ``.md``'s path."""

    state: PlanState
    md_path: Path | None = None
    # The plan text's size limit, and the live .md's size now (post-init), both in bytes.
    max_md_bytes: int | None = None
    md_bytes: int = 0


__all__ = ["GATE_TEXTS", "PlanGateView", "PlanState"]
