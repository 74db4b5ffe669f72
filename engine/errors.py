"""Engine error tree.

PlangateError
├── Refusal-carrying errors live in their machines (plan, goal) as values, not exceptions
├── AppendConflict      a compare-and-set append lost the race (goal revision taken)
├── CorruptState        a stored log or file that does not fold; fails loudly
├── LeaseLost           a write for a chat whose lease this replica no longer holds
└── ConfigError         a setting that is missing or malformed
"""

from __future__ import annotations


class PlangateError(Exception):
    """Base of plangate's own exceptions."""


class AppendConflict(PlangateError):
    """An append carried a goal revision that is already taken: the caller's ref is stale."""


class CorruptState(PlangateError):
    """Durable state that cannot be folded (a bug or a hand edit); never silently repaired."""


class ConfigError(PlangateError):
    """A setting that is missing or malformed; the message names it."""


class LeaseLost(PlangateError):
    """A write (an event-log append, a plan sidecar write) for a chat whose lease this replica
    no longer holds at the epoch it had: another replica took the chat over. Nothing of the
    write happened; the replica must stop working on that chat (docs/storage.md, "Leases")."""
