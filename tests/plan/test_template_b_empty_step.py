"""validate_template_b: a numbered step needs text; an empty ``1.`` is not a step."""

from __future__ import annotations

import pytest

from engine.plan.extract import MISSING_STEPS, validate_template_b

HEAD = """\
# Add extraction

## Context
- **Problem:** no checklist
- **Target state:** a checklist from the plan
- **Intent:** approve from a phone

## Implementation steps
"""


@pytest.mark.parametrize("steps", ["1. \n", "1.\n", "1.   \n2.\n", "1. \n\n2.\t\n"])
def test_empty_numbered_steps_are_not_steps(steps: str) -> None:
    assert validate_template_b(HEAD + steps) == [MISSING_STEPS]


@pytest.mark.parametrize("steps", ["1. \n2. Parse it\n", "1.\n   Parse it on the next line\n"])
def test_one_step_with_text_is_enough(steps: str) -> None:
    assert validate_template_b(HEAD + steps) == []
