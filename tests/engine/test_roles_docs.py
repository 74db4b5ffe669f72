"""docs/roles.md keeps the permission table and the words table as the code generates them
(engine.roles.policy: one table, and the texts, the read-only set and the presses from it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from engine.api import READ_ONLY_COMMANDS
from engine.roles.policy import (
    ACTIONS,
    ALERT_TEXTS,
    PRESSES,
    READ_COMMANDS,
    ROLE_TEXT,
    ROLES,
    permission_table,
    words_table,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "roles.md"


def _between(name: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    found = re.search(rf"<!-- {name}:[^>]*-->\n(.*?)\n<!-- /{name} -->", text, re.S)
    assert found is not None, f"docs/roles.md has no {name} block"
    return found.group(1)


@pytest.mark.parametrize(("name", "table"), [("permission-table", permission_table),
                                             ("words-table", words_table)])  # fmt: skip
def test_the_docs_tables_are_the_codes(name: str, table: object) -> None:
    assert callable(table)
    assert _between(name) == table(), f"regenerate the {name} block in docs/roles.md"


def test_the_texts_the_read_only_set_and_the_presses_come_from_the_table() -> None:
    # Each role's refusal and alert name what the table lets it do, and nothing more.
    for role in ROLES:
        assert len(ALERT_TEXTS[role]) <= 200  # an alert holds at most 200 characters
        for action, rule in ACTIONS.items():
            if action == "read" or role == "owner":
                continue
            assert (rule.says in ROLE_TEXT[role]) == (role in rule.roles), (role, action)
    assert {"show_plan", "status", "help"} == READ_ONLY_COMMANDS
    assert READ_ONLY_COMMANDS < READ_COMMANDS
    assert all(a in ACTIONS for kinds in PRESSES.values() for a in kinds.values())
