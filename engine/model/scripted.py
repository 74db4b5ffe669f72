"""The scripted provider: plays a ``Script`` in process, for tests and the offline demo."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.model.script import Script, ScriptStep
from engine.model.types import ModelError, ModelReply
from engine.model.validate import validate_request


class InvalidRequest(ModelError):
    """The conversation would be refused by a real server (HTTP 400); the message says why."""


class ScriptedProvider:
    """A ModelProvider that answers from a script and records every request it was sent.

    By default each request is first checked like the real API would (``validate=True``), so a
    malformed conversation fails here as it would against a real server.
    """

    def __init__(self, script: Script | Sequence[ScriptStep], *, validate: bool = True) -> None:
        self.script = script if isinstance(script, Script) else Script(script)
        self.validate = validate
        # One entry per complete() call: deep copies, so later mutation by the caller
        # cannot rewrite what the test reads.
        self.requests: list[list[dict[str, Any]]] = []
        self.tool_specs: list[list[dict[str, Any]]] = []
        self.max_tokens: list[int | None] = []

    @classmethod
    def from_file(cls, path: Path) -> ScriptedProvider:
        """Load a JSON script file (see engine.model.script for the format)."""
        return cls(Script.load(path))

    @property
    def last_messages(self) -> list[dict[str, Any]]:
        """The messages of the most recent request; ``[]`` before the first."""
        return self.requests[-1] if self.requests else []

    async def complete(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        *,
        max_tokens: int | None = None,
    ) -> ModelReply:
        """Record the request, check it, and return the script's next reply."""
        recorded = copy.deepcopy(list(messages))
        self.max_tokens.append(max_tokens)
        self.requests.append(recorded)
        self.tool_specs.append(copy.deepcopy(list(tools)))
        if self.validate:
            problems = validate_request(recorded, list(tools) or None)
            if problems:
                raise InvalidRequest("invalid chat request: " + "; ".join(problems))
        offered = {str((spec.get("function") or {}).get("name")) for spec in tools}
        return self.script.next_reply(recorded, offered=offered)
