"""One test per extraction rule of docs/extraction.md.

Each test is named after the rule it checks.
"""

from __future__ import annotations

import pytest

from engine.plan.extract import WorkItem, extract_work_items


def _bodies(md: str) -> list[str]:
    return [i.work_body for i in extract_work_items(md)]


def _titles(md: str) -> list[str]:
    return [i.title for i in extract_work_items(md)]


def _one(md: str) -> WorkItem:
    items = extract_work_items(md)
    assert len(items) == 1, items
    return items[0]


# --- heading paths ---------------------------------------------------------------------------


def test_heading_path_is_every_enclosing_work_section_heading_verbatim() -> None:
    md = "# Plan\n## Phase *one*\n### Step  A \n#### Deep\n- do it\n"
    assert _one(md).heading_path == ["Phase *one*", "Step  A", "Deep"]


def test_the_hash_title_names_the_plan_and_is_not_in_the_heading_path() -> None:
    md = "# Ship the parser\n## Work\n- write it\n"
    assert _one(md).heading_path == ["Work"]


def test_content_under_the_title_alone_is_not_a_work_section() -> None:
    md = "# Plan\nSome preamble.\n\n- not work\n## Work\n- work\n"
    assert _titles(md) == ["work"]


def test_sibling_heading_pops_the_path() -> None:
    md = "## A\n### A1\n- x\n## B\n- y\n"
    assert [i.heading_path for i in extract_work_items(md)] == [["A", "A1"], ["B"]]


def test_setext_level_two_heading_is_a_work_section() -> None:
    md = "Plan\n====\nWork\n----\n- x\n"
    assert _one(md).heading_path == ["Work"]


# --- which sections are work -----------------------------------------------------------------


@pytest.mark.parametrize("name", ["Context", "Risks", "Open questions", "Notes"])
def test_context_risks_open_questions_and_notes_are_not_work_sections(name: str) -> None:
    md = f"# P\n## {name}\n- not a task\n\nprose\n## Work\n- task\n"
    assert _titles(md) == ["task"]


@pytest.mark.parametrize("name", ["  CONTEXT ", "notes:", "Open Questions :", "RISKS"])
def test_non_work_names_match_case_insensitively_trimmed_and_without_trailing_colon(
    name: str,
) -> None:
    md = f"## {name}\n- not a task\n## Work\n- task\n"
    assert _titles(md) == ["task"]


def test_subsections_of_a_non_work_section_are_not_work() -> None:
    md = "## Notes\n### Detail\n- not a task\n## Work\n- task\n"
    assert _titles(md) == ["task"]


def test_every_other_hash_hash_and_deeper_section_is_a_work_section() -> None:
    md = "## Design\nProse here.\n## Rollout\n- a\n### Later\n- b\n"
    assert [i.heading_path for i in extract_work_items(md)] == [
        ["Design"],
        ["Rollout"],
        ["Rollout", "Later"],
    ]


# --- work bodies -----------------------------------------------------------------------------


def test_a_bullet_with_its_nested_lines_is_one_item() -> None:
    md = "## W\n- top\n  more text\n  - nested\n    deeper\n\n  para\n- next\n"
    assert _bodies(md) == ["top\nmore text\n- nested\n  deeper\n\npara", "next"]


def test_ordered_items_are_items_too() -> None:
    assert _bodies("## W\n1. one\n2. two\n") == ["one", "two"]


def test_work_body_of_a_prose_only_section_is_its_prose_and_code() -> None:
    md = "## W\nDo the thing.\n\n```sh\nmake\n```\n"
    item = _one(md)
    assert item.work_body == "Do the thing.\n\n```sh\nmake\n```"
    assert item.title == "W"


def test_prose_in_a_section_with_bullets_is_its_own_item_and_scopes_the_bullets() -> None:
    md = "## W\nShared prose.\n\n- a\n- b\n"
    assert _bodies(md) == ["Shared prose.", "Shared prose.\n\na", "Shared prose.\n\nb"]
    assert _titles(md)[0] == "W"


def test_colon_lead_in_scopes_its_bullets_without_a_label_only_item() -> None:
    md = "## W\nDo these:\n- a\n- b\n"
    assert _bodies(md) == ["Do these:\n\na", "Do these:\n\nb"]


def test_colon_lead_in_scopes_only_the_list_it_introduces() -> None:
    md = "## W\nFirst:\n- a\n\nSecond:\n\n1. b\n"
    assert _bodies(md) == ["First:\n\na", "Second:\n\nb"]


def test_leading_code_scopes_subsequent_bullets() -> None:
    md = "## W\n```py\nimport x\n```\n- a\n"
    assert _bodies(md) == ["```py\nimport x\n```\n\na"]


def test_a_code_only_section_is_one_heading_named_item() -> None:
    md = "## Example run\n```\n- not a task\n- nor this\n```\n"
    item = _one(md)
    assert item.title == "Example run"
    assert item.work_body == "```\n- not a task\n- nor this\n```"


def test_shared_work_context_from_enclosing_sections_prefixes_the_body() -> None:
    md = "## Outer\nOuter prose.\n### Inner\nUse:\n- a\n"
    items = extract_work_items(md)
    assert [i.work_body for i in items] == ["Outer prose.", "Outer prose.\n\nUse:\n\na"]


def test_enclosing_context_prefixes_a_subsection_prose_item() -> None:
    md = "## Outer\n```\ncfg\n```\n### Inner\nInner prose.\n"
    items = extract_work_items(md)
    assert items[-1].work_body == "```\ncfg\n```\n\nInner prose."


def test_an_ancestor_list_is_not_context_for_a_subsection() -> None:
    md = "## Outer\n- a\n### Inner\n- b\n"
    assert _bodies(md) == ["a", "b"]


def test_scoping_context_is_prepended_in_document_order() -> None:
    md = "## A\nA prose.\n### B\n```\ncode\n```\nB prose.\n\nList:\n- x\n"
    assert _bodies(md)[-1] == "A prose.\n\n```\ncode\n```\n\nB prose.\n\nList:\n\nx"


# --- exact slices and normalisation ----------------------------------------------------------


def test_crlf_is_normalised() -> None:
    assert _bodies("## W\r\n- a\r\n  b\r\n") == _bodies("## W\n- a\n  b\n") == ["a\nb"]


def test_lines_split_on_newline_only() -> None:
    # A form feed or a lone \r inside a line stays inside that line.
    assert _bodies("## W\n- a\x0cb\n- c\rd\n") == ["a\x0cb", "c\rd"]


def test_trailing_blank_lines_are_trimmed() -> None:
    assert _bodies("## W\n- a\n  \n\n- b\n\n   \n") == ["a", "b"]


def test_marker_removed_so_renumbering_keeps_identity() -> None:
    assert _bodies("## W\n1. a\n   x\n2. b\n") == _bodies("## W\n7) a\n   x\n8) b\n")


def test_marker_removed_so_dash_to_star_keeps_identity() -> None:
    assert _bodies("## W\n- a\n  - n\n") == _bodies("## W\n* a\n  - n\n")


def test_container_indentation_removed_from_nested_lines() -> None:
    md = "## W\n10. a\n    nested\n        code\n"
    assert _one(md).work_body == "a\nnested\n    code"


def test_trailing_whitespace_and_inline_markup_are_kept_verbatim() -> None:
    md = "## W\n- **bold** `x`  \n  tail\n"
    assert _one(md).work_body == "**bold** `x`  \ntail"


# --- template B ------------------------------------------------------------------------------

TEMPLATE_B = """\
# Add extraction

## Context
- **Problem:** no checklist
- **Target state:** checklist from Markdown
- **Intent:** approve from a phone

## Implementation steps
1. Write the parser — markdown-it-py, slice by map
   details here
   - Done when: tests pass
2. Wire approve — call it from the service
- Done when: approve seeds tasks
3. Bench it

## Risks
- slow
"""


def test_template_b_numbered_steps_become_tasks() -> None:
    assert _titles(TEMPLATE_B) == ["Write the parser", "Wire approve", "Bench it"]


def test_template_b_title_is_text_before_the_first_spaced_em_dash() -> None:
    md = "## Implementation steps\n1. A — b — c\n"
    item = _one(md)
    assert (item.title, item.description) == ("A", "b — c")


def test_template_b_title_is_whole_first_line_without_em_dash() -> None:
    item = _one("## Implementation steps\n1. Just—this - line\n   more\n")
    assert (item.title, item.description) == ("Just—this - line", "more")


def test_template_b_description_is_the_rest_plus_nested_lines() -> None:
    first = extract_work_items(TEMPLATE_B)[0]
    assert first.description == "markdown-it-py, slice by map\ndetails here"


def test_done_when_nested_in_a_step_is_its_acceptance_criterion_and_body() -> None:
    first = extract_work_items(TEMPLATE_B)[0]
    assert first.acceptance_criteria == ["tests pass"]
    assert first.work_body.endswith("- Done when: tests pass")


def test_done_when_bullet_at_column_zero_after_a_step_belongs_to_that_step() -> None:
    second = extract_work_items(TEMPLATE_B)[1]
    assert second.acceptance_criteria == ["approve seeds tasks"]
    assert (
        second.work_body
        == "Wire approve — call it from the service\n- Done when: approve seeds tasks"
    )
    assert "Done when" not in second.description


def test_done_when_is_never_a_task_of_its_own() -> None:
    md = "## W\n- a\n- Done when: x\n\nDone when: y\n"
    item = _one(md)
    assert item.acceptance_criteria == ["x", "y"]


def test_done_when_alone_takes_the_bullets_under_it() -> None:
    md = "## Implementation steps\n1. Step\n   Done when:\n   - one\n   - two\n"
    assert _one(md).acceptance_criteria == ["one", "two"]


def test_done_when_inside_code_is_not_a_criterion() -> None:
    md = "## W\n1. a\n   ```\n   Done when: fake\n   ```\n"
    assert _one(md).acceptance_criteria == []


def test_every_work_section_bullet_gets_step_titles_not_only_implementation_steps() -> None:
    md = "## Rollout\n- Flip flag — in prod\n"
    assert (_one(md).title, _one(md).description) == ("Flip flag", "in prod")


# --- fences ----------------------------------------------------------------------------------


def test_backtick_fence_cannot_close_an_outer_tilde_fence_or_create_a_fake_item() -> None:
    md = "## W\n~~~~\n```\n- fake\n```\n- fake too\n~~~~\n- real\n"
    assert _titles(md) == ["real"]


def test_shorter_run_cannot_close_a_four_backtick_fence() -> None:
    md = "## W\n````\n```\n- fake\n```\n````\n- real\n"
    assert _titles(md) == ["real"]


def test_fence_closes_only_with_its_own_character() -> None:
    md = "## W\n```\n~~~\n- fake\n```\n- real\n"
    assert _titles(md) == ["real"]


def test_fence_indentation_is_relative_to_its_container() -> None:
    # Inside the item the fence sits at the item's content column; its closing line may be
    # indented up to three columns more and still close it.
    md = "## W\n- a\n  ```\n  - fake\n     ```\n  tail\n- b\n"
    items = extract_work_items(md)
    assert [i.title for i in items] == ["a", "b"]
    assert items[0].work_body == "a\n```\n- fake\n   ```\ntail"


def test_unclosed_fence_in_a_list_item_ends_with_its_container() -> None:
    md = "## W\n- a\n  ```\n  - fake\n- b\n"
    assert _titles(md) == ["a", "b"]
    assert _bodies(md) == ["a\n```\n- fake", "b"]


def test_unclosed_root_fence_swallows_the_rest_of_the_document() -> None:
    md = "## W\n- a\n\n```\n- fake\n## Fake heading\n- fake\n"
    items = extract_work_items(md)
    # The trailing code is the section's own heading-named item; nothing in it is a task.
    assert [(i.title, i.heading_path) for i in items] == [("a", ["W"]), ("W", ["W"])]
    assert items[1].work_body == "```\n- fake\n## Fake heading\n- fake"


def test_context_scopes_only_the_bullets_after_it() -> None:
    md = "## W\nFirst.\n\n- a\n\nSecond.\n\n- b\n"
    assert _bodies(md) == ["First.\n\nSecond.", "First.\n\na", "First.\n\nSecond.\n\nb"]


def test_code_after_every_bullet_becomes_the_sections_own_item() -> None:
    md = "## W\n- a\n\n```\nexample\n```\n"
    assert [(i.title, i.work_body) for i in extract_work_items(md)] == [
        ("a", "a"),
        ("W", "```\nexample\n```"),
    ]


def test_root_four_space_indented_code_is_not_a_fence() -> None:
    md = "## W\n    ```\n    - fake\n- real\n- also real\n"
    assert _titles(md) == ["real", "also real"]


def test_root_indented_code_is_code_that_scopes_subsequent_bullets() -> None:
    md = "## W\n    make test\n\n- real\n"
    assert _bodies(md) == ["    make test\n\nreal"]


def test_bullets_inside_a_root_fence_are_never_items() -> None:
    md = "## W\nIntro.\n\n```\n- x\n1. y\n```\n"
    assert _titles(md) == ["W"]


def test_bullets_inside_a_fence_inside_an_item_are_never_items() -> None:
    md = "## W\n1. step\n   ```\n   - x\n   2. y\n   ```\n2. next\n"
    assert _titles(md) == ["step", "next"]


def test_heading_inside_a_fence_is_not_a_section() -> None:
    md = "## W\n```\n## Context\n```\n- a\n"
    items = extract_work_items(md)
    assert [i.heading_path for i in items] == [["W"]]


@pytest.mark.parametrize("label", ["Done when:", "**Done when:**", "**Done when**:", "done WHEN:"])
def test_done_when_label_forms(label: str) -> None:
    md = f"## W\n1. a\n   - {label} it works\n"
    assert _one(md).acceptance_criteria == ["it works"]


def test_bare_done_when_after_a_step_takes_the_list_under_it() -> None:
    md = "## Implementation steps\n1. Step\n\nDone when:\n- one\n- two\n\n2. Next\n"
    items = extract_work_items(md)
    assert [i.title for i in items] == ["Step", "Next"]
    assert items[0].acceptance_criteria == ["one", "two"]
    assert items[0].work_body == "Step\n\nDone when:\n- one\n- two"


def test_an_html_comment_is_not_work() -> None:
    md = "## Implementation steps\n<!-- fill in -->\n\n1. Step\n"
    assert [(i.title, i.work_body) for i in extract_work_items(md)] == [("Step", "Step")]
