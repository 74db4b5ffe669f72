from __future__ import annotations

from tests.fakebot.fixtures import fake_api
from tests.fakes.openai_server import fake_openai

__all__ = ["fake_api", "fake_openai"]
