"""validate_template_b: what a plan lacks before Approve (template B, docs/plan-json-spec.md)."""

from __future__ import annotations

import pytest

from engine.plan.extract import (
    MISSING_CONTEXT,
    MISSING_INTENT,
    MISSING_PROBLEM,
    MISSING_STEPS,
    MISSING_TARGET_STATE,
    MISSING_TITLE,
    extract_work_items,
    validate_template_b,
)

VALID = """\
# Add extraction

## Context
- **Problem:** no checklist
- **Target state:** a checklist from the plan
- **Intent:** approve from a phone
- **Constraints:** none

## Implementation steps
1. Parse — with markdown-it-py
"""


def test_a_complete_template_b_plan_is_valid() -> None:
    assert validate_template_b(VALID) == []


def test_optional_constraints_and_out_of_scope_may_be_omitted() -> None:
    assert validate_template_b(VALID.replace("- **Constraints:** none\n", "")) == []


def test_missing_title_is_reported() -> None:
    assert validate_template_b(VALID.replace("# Add extraction\n", "")) == [MISSING_TITLE]


def test_an_empty_title_is_reported() -> None:
    assert validate_template_b(VALID.replace("# Add extraction", "#")) == [MISSING_TITLE]


def test_missing_context_section_is_reported_once() -> None:
    md = "# T\n## Implementation steps\n1. a\n"
    assert validate_template_b(md) == [MISSING_CONTEXT]


@pytest.mark.parametrize(
    ("label", "missing"),
    [
        ("Problem", MISSING_PROBLEM),
        ("Target state", MISSING_TARGET_STATE),
        ("Intent", MISSING_INTENT),
    ],
)
def test_each_required_context_label_must_have_non_empty_text(label: str, missing: str) -> None:
    lines = [ln for ln in VALID.split("\n") if f"**{label}:**" not in ln]
    assert validate_template_b("\n".join(lines)) == [missing]
    emptied = VALID.replace(
        next(ln for ln in VALID.split("\n") if f"**{label}:**" in ln), f"- **{label}:**   "
    )
    assert validate_template_b(emptied) == [missing]


def test_context_labels_may_be_plain_paragraphs_and_any_case() -> None:
    md = VALID.replace("- **Problem:** no checklist", "**problem:** no checklist")
    md = md.replace("- **Intent:**", "- **Intent**:")
    assert validate_template_b(md) == []


def test_a_label_inside_code_does_not_count() -> None:
    md = VALID.replace("- **Problem:** no checklist", "```\n**Problem:** fake\n```")
    assert validate_template_b(md) == [MISSING_PROBLEM]


def test_at_least_one_numbered_step_is_required() -> None:
    md = VALID.replace("1. Parse — with markdown-it-py", "- Parse (a bullet, not a step)")
    assert validate_template_b(md) == [MISSING_STEPS]


def test_a_numbered_list_inside_a_fence_is_not_a_step() -> None:
    md = VALID.replace("1. Parse — with markdown-it-py", "```\n1. fake\n```")
    assert validate_template_b(md) == [MISSING_STEPS]


def test_everything_missing_is_listed_in_a_fixed_order() -> None:
    assert validate_template_b("") == [MISSING_TITLE, MISSING_CONTEXT, MISSING_STEPS]


def test_context_is_never_converted_into_tasks() -> None:
    assert [i.title for i in extract_work_items(VALID)] == ["Parse"]


def test_validator_and_extractor_agree_on_crlf_input() -> None:
    md = VALID.replace("\n", "\r\n")
    assert validate_template_b(md) == []
    assert extract_work_items(md) == extract_work_items(VALID)


def test_several_labels_in_one_paragraph_each_count() -> None:
    md = VALID.replace(
        "- **Problem:** no checklist\n- **Target state:** a checklist from the plan\n",
        "**Problem:** no checklist\n**Target state:** a checklist from the plan\n",
    )
    assert validate_template_b(md) == []


def test_the_title_must_open_the_plan() -> None:
    later = VALID.replace("# Add extraction\n", "Some words first.\n\n# Add extraction\n")
    assert validate_template_b(later) == [MISSING_TITLE]
    below = VALID.replace("# Add extraction\n", "") + "\n# Add extraction\n"
    assert validate_template_b(below) == [MISSING_TITLE]
    commented = "<!-- draft -->\n" + VALID
    assert validate_template_b(commented) == [MISSING_TITLE]


def test_a_setext_title_is_not_a_hash_title() -> None:
    setext = VALID.replace("# Add extraction\n", "Add extraction\n==============\n")
    assert validate_template_b(setext) == [MISSING_TITLE]


def test_a_level_two_heading_first_is_not_a_title() -> None:
    assert validate_template_b(VALID.replace("# Add extraction\n", "## Add extraction\n")) == [
        MISSING_TITLE
    ]


def test_the_title_is_found_after_trimming_leading_blank_lines_and_spaces() -> None:
    assert validate_template_b("\n\n   \n" + VALID) == []
    assert validate_template_b("    " + VALID) == []  # trimmed first: not indented code
    assert validate_template_b(VALID.replace("# Add extraction", "#\tAdd extraction")) == []
    assert validate_template_b(VALID.replace("# Add extraction", "# Add extraction #")) == []
