from __future__ import annotations

from tests.fakebot.fixtures import fake_api

__all__ = ["fake_api"]
