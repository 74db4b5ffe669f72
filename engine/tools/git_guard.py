"""Git inside the sandbox runs no command the repository's own files name (docs/security.md).

A rule such as ``PLANGATE_ALLOW_BASH="git status"`` allows one command; but git runs other
programs that its configuration names, and the agent may write that configuration (a file
write): ``core.fsmonitor = "rm -f important.txt"`` in ``.git/config`` makes the allowed
``git status`` run it. The settings that do so, and what the sandbox does with each, are the
sandbox column of the one table in ``engine.git_safety``; this module hands the sandbox its
two parts:

- :func:`git_env`: the forced settings (``GIT_CONFIG_COUNT``/``GIT_CONFIG_KEY_n``/
  ``GIT_CONFIG_VALUE_n``, which outrank every configuration file) and the variables git reads
  before its configuration (``GIT_PAGER``, ``GIT_EDITOR``...);
- :data:`NAMED_GUARD`: bash run inside the sandbox just before the command, which lists the
  repository's keys whose names it picks (a filter driver's ``clean``, an alias, a
  ``.gitmodules`` ``update``) and blanks each one it finds (``textconv`` becomes ``cat``). A
  blanked external diff makes ``git diff`` fail loudly ("cannot run"), never run the program.

The named keys are read from the repository the command starts in (the workspace); a nested
repository a command ``cd``s into keeps its drivers, the forced keys hold everywhere (and
status and diff do not look inside submodules' working trees). Test runners (``pytest``
reads ``conftest.py``) cannot be guarded this way: a rule for a test runner trusts the
project's test configuration.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from engine.git_safety import NAMED_GUARD, SANDBOX_ENV, sandbox_env, sandbox_forced

# (key, value): git's configuration of commands it would run, switched off.
FIXED: tuple[tuple[str, str], ...] = sandbox_forced()
# Variables git reads before its configuration, set to harmless programs.
ENV = SANDBOX_ENV


def git_env(repos: Sequence[Path] = ()) -> dict[str, str]:
    """The environment entries that neutralise git's :data:`FIXED` keys; ``repos`` are
    trusted whoever owns them (``safe.directory``)."""
    return sandbox_env(repos)


__all__ = ["ENV", "FIXED", "NAMED_GUARD", "git_env"]
