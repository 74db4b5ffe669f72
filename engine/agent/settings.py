"""The agent's limits and standing prompts (:class:`AgentSettings`), a plain record.

Its own module so that the context builder (``engine.agent.context``) can read it without
importing the agent's collaborators (``engine.agent.config``), which import the context back.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.progress.stuck import StuckLimits

# A turn's step cap (PLANGATE_MAX_STEPS): the engine's configuration reads it from here.
DEFAULT_MAX_STEPS = 50


@dataclass(frozen=True, slots=True)
class AgentSettings:
    """Limits of a turn and of the context (sizes in characters, not tokens)."""

    max_steps: int = DEFAULT_MAX_STEPS
    # The verbatim part of the context; older turns become an extractive summary.
    context_budget_chars: int = 120_000
    # The summary's own share; its oldest lines go first when it is over.
    summary_budget_chars: int = 8_000
    # A single tool result in the context is cut here (tools cut their own output first).
    tool_result_cap_chars: int = 16_000
    # The text that opens the execution turn queued when a pending approval commits at a
    # turn's end (an approval committed mid-turn just lets the running turn go on Active).
    execution_prompt: str = (
        "The plan is approved. Work through the checklist: call plan start, do the task, "
        "then plan complete with evidence, and continue with the next task."
    )
    # The text of each continuation of an approved checklist (engine.agent.checklist).
    continue_prompt: str = (
        "Continue the approved plan: call plan start for the next pending task, do it, then "
        "plan complete with evidence."
    )
    # When an unattended run (the checklist run, a goal round) is stuck (engine.progress).
    stuck: StuckLimits = field(default_factory=StuckLimits)
    # The model sees images: an image attachment goes as an image part, else as a note.
    vision: bool = False


__all__ = ["AgentSettings"]
