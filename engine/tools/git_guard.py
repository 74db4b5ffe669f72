"""Git inside the sandbox runs no command the repository's own files name (docs/security.md).

A rule such as ``PLANGATE_ALLOW_BASH="git status"`` allows one command; but git runs other
programs that its configuration names, and the agent may write that configuration (a file
write): ``core.fsmonitor = "rm -f important.txt"`` in ``.git/config`` makes the allowed
``git status`` run it. So every git started in the sandbox gets, through git's own
``GIT_CONFIG_COUNT``/``GIT_CONFIG_KEY_n``/``GIT_CONFIG_VALUE_n`` (which outrank every config
file), two kinds of override:

- fixed keys (:data:`FIXED`), always: the fsmonitor, hooks, pager, editors, ssh and askpass
  commands, credential helpers, signing programs, the ``ext::`` transport;
- keys that have no harmless value, or whose names the repository chooses (an external diff,
  a git proxy, an alternate-refs command, a filter driver's ``clean``/``smudge``/``process``,
  a diff driver's ``textconv``/``command``, a merge driver, a remote's ``uploadpack``/
  ``receivepack``, aliases): :data:`NAMED_GUARD`, run inside the sandbox just before the
  command, lists the repository's keys of those shapes (``git config --list``, which only
  reads files) and blanks each one it finds (``textconv`` becomes ``cat``). A blanked
  external diff makes ``git diff`` fail loudly ("cannot run"), never run the program;
  ``git diff --no-ext-diff`` still works.

Aliases cannot shadow git's own commands; they are blanked so a rule naming one cannot be
redirected either. The named keys are read from the repository the command starts in (the
workspace); a nested repository a command ``cd``s into keeps its drivers, the fixed keys hold
everywhere. Test runners (``pytest`` reads ``conftest.py``) cannot be guarded this way: a rule
for a test runner trusts the project's test configuration.
"""

from __future__ import annotations

# (key, value): git's configuration of commands it would run, switched off.
FIXED: tuple[tuple[str, str], ...] = (
    ("core.fsmonitor", "false"),
    ("core.hooksPath", "/dev/null"),
    ("core.pager", "cat"),
    ("core.editor", "false"),
    ("sequence.editor", "false"),
    ("core.sshCommand", "ssh"),
    ("core.askPass", ""),
    ("credential.helper", ""),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("push.gpgSign", "false"),
    ("gpg.program", "gpg"),
    ("gpg.ssh.program", "ssh-keygen"),
    ("gpg.x509.program", "gpgsm"),
    ("protocol.ext.allow", "never"),
)

# Variables git reads before its configuration, set to harmless programs.
ENV = {
    "GIT_PAGER": "cat",
    "GIT_EDITOR": "false",
    "GIT_SEQUENCE_EDITOR": "false",
    "GIT_SSH_COMMAND": "ssh",
    "GIT_ASKPASS": "false",
    "GIT_TERMINAL_PROMPT": "0",
}


def git_env() -> dict[str, str]:
    """The environment entries that neutralise git's :data:`FIXED` keys."""
    env = dict(ENV)
    env["GIT_CONFIG_COUNT"] = str(len(FIXED))
    for index, (key, value) in enumerate(FIXED):
        env[f"GIT_CONFIG_KEY_{index}"] = key
        env[f"GIT_CONFIG_VALUE_{index}"] = value
    return env


# Keys of these shapes name programs under a name the repository picks (lower-case section
# and key, as git lists them; the subsection keeps its case).
_NAMED = (
    r"^(diff\.external|core\.gitproxy|core\.alternaterefscommand"
    r"|filter\..+\.(clean|smudge|process)"
    r"|diff\..+\.(textconv|command)"
    r"|merge\..+\.driver"
    r"|remote\..+\.(uploadpack|receivepack)"
    r"|alias\..+)$"
)

# bash, run in the sandbox before the command: blank every named key the repository has.
NAMED_GUARD = (
    "if command -v git >/dev/null 2>&1; then "
    "__n=${GIT_CONFIG_COUNT:-0}; "
    "while IFS= read -r -d '' __k; do "
    "__v=; case $__k in *.textconv) __v=cat;; esac; "
    'export "GIT_CONFIG_KEY_$__n=$__k" "GIT_CONFIG_VALUE_$__n=$__v"; __n=$((__n+1)); '
    "done < <(git config --list --name-only -z 2>/dev/null "
    f"| grep -zE '{_NAMED}' | sort -zu); "
    "export GIT_CONFIG_COUNT=$__n; unset __n __k __v; fi"
)


__all__ = ["ENV", "FIXED", "NAMED_GUARD", "git_env"]
