"""The one table of git settings that run programs, reach the network or enter other
repositories, and what each context does with them (docs/security.md, "Git").

git runs in two places, both on trees the agent may have written:

- **the sandbox**: the agent's own ``git`` in bash, and the checks. What it runs would stay in
  the sandbox anyway; the guard is there because a rule such as
  ``PLANGATE_ALLOW_BASH="git status"`` allows one command, and must not let the repository's
  configuration run another. Each setting is *forced* to a harmless value for every git
  started there (git's ``GIT_CONFIG_COUNT``/``GIT_CONFIG_KEY_n``/``GIT_CONFIG_VALUE_n``, which
  outrank every configuration file), or, when it has no harmless value or its name is the
  repository's choice (``filter.<name>.clean``), *blanked* when found: :data:`NAMED_GUARD`
  lists the repository's keys (and ``.gitmodules``') just before the command, inside the
  sandbox, and overrides each one it finds.
- **the host**: plangate's own git (worktrees, the commit at Done, Merge, Push, the progress
  snapshot), which runs outside the sandbox as plangate's user, so nothing in the repository
  may make it run a program. Each setting is *forced* with ``-c`` on every command
  (:data:`HOST_CONFIG`), or its presence *refuses* the repository (:func:`unsafe_config`: the
  command is not run and the project works in place), or it is *left* with the reason it does
  no harm there. The host's git reads no system or global configuration, gets a clean
  environment (:func:`host_env`) and never enters a nested repository or submodule (see
  :data:`ENTERS` and ``engine.worktree.git``).

:data:`TABLE` is the only list; the sandbox's environment, the guard's pattern, the host's
``-c`` overrides and its refusal pattern are all generated from it, and docs/security.md's
table is checked against it (``tests/agent/test_git_table.py``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Force:
    """Set to ``value`` for every git command of the context."""

    value: str


@dataclass(frozen=True, slots=True)
class Blank:
    """Sandbox only: when the repository sets a key of this shape, it is set to ``value``;
    ``also``: a setting forced as well then (for a key git takes the first value of, which
    no later setting can replace)."""

    value: str = ""
    also: tuple[str, str] | None = None


@dataclass(frozen=True, slots=True)
class Refuse:
    """Host only: a repository whose configuration sets it is refused (works in place)."""


@dataclass(frozen=True, slots=True)
class Left:
    """Nothing is done, for the reason given."""

    why: str


Action = Force | Blank | Refuse | Left

RUNS = "runs a program"
NETWORK = "reaches the network"
ENTERS = "enters a nested repository"
READS = "reads more configuration"


@dataclass(frozen=True, slots=True)
class GitSetting:
    """One row: ``key`` as git documents it (``<name>`` where the repository picks the part),
    why it is in the table, and what the sandbox and the host do with it."""

    key: str
    kind: str
    why: str
    sandbox: Action
    host: Action

    @property
    def named(self) -> bool:
        """The repository picks part of the name: only found by listing, never forced."""
        return "<" in self.key

    def pattern(self) -> str:
        """A regular expression for the key as ``git config --list`` prints it (section and
        key lower-case; a subsection keeps its case, so it matches anything)."""
        parts = re.split(r"(<[^>]+>)", self.key)
        return "".join(".+" if part.startswith("<") else re.escape(part.lower()) for part in parts)


# git keeps the first uploadpack/receivepack it reads (the repository's), so a blank cannot
# replace it: the transport that would run it here, a remote that is a path, is turned off.
_NO_LOCAL = ("protocol.file.allow", "never")
_NO_TTY = "its output is a pipe, never a terminal, so no pager starts (and GIT_PAGER=cat)"
_NOT_RUN = "plangate never runs the command that uses it"
_MOUNTS = "the sandbox's mounts confine what it points at"
_AGENT_NET = "the agent can name any address itself; the call's network decision applies"

TABLE: tuple[GitSetting, ...] = (
    # --- programs under a fixed name ------------------------------------------------------
    GitSetting(
        "core.fsmonitor",
        RUNS,
        "a hook run by every command that reads the working tree (status, diff, add)",
        Force("false"),
        Force("false"),
    ),
    GitSetting(
        "core.hooksPath",
        RUNS,
        "where hooks live; a hook runs on commit, merge, checkout, push",
        Force("/dev/null"),
        Force("/dev/null"),
    ),
    GitSetting("core.pager", RUNS, "the pager of every command", Force("cat"), Force("cat")),
    GitSetting(
        "pager.<command>",
        RUNS,
        "one command's pager",
        Blank(""),
        Left(_NO_TTY),
    ),
    GitSetting("core.editor", RUNS, "commit and tag messages", Force("false"), Force("true")),
    GitSetting("sequence.editor", RUNS, "rebase's todo list", Force("false"), Force("true")),
    GitSetting(
        "core.sshCommand",
        RUNS,
        "the ssh of fetch and push",
        Force("ssh"),
        Force("ssh"),
    ),
    GitSetting("core.askPass", RUNS, "asked for passwords", Force(""), Force("")),
    GitSetting(
        "credential.helper",
        RUNS,
        "stores and gives passwords",
        Force(""),
        Force(""),
    ),
    GitSetting(
        "credential.<url>.helper",
        RUNS,
        "one address's password helper",
        Blank(""),
        Refuse(),
    ),
    GitSetting("commit.gpgSign", RUNS, "signs every commit", Force("false"), Force("false")),
    GitSetting("tag.gpgSign", RUNS, "signs every tag", Force("false"), Force("false")),
    GitSetting("push.gpgSign", RUNS, "signs pushes", Force("false"), Force("false")),
    GitSetting(
        "log.showSignature",
        RUNS,
        "verifies signatures (runs the signing program) in log and show",
        Force("false"),
        Force("false"),
    ),
    GitSetting("gpg.program", RUNS, "signs and verifies", Force("gpg"), Force("gpg")),
    GitSetting("gpg.openpgp.program", RUNS, "signs and verifies", Force("gpg"), Force("gpg")),
    GitSetting(
        "gpg.ssh.program", RUNS, "signs and verifies", Force("ssh-keygen"), Force("ssh-keygen")
    ),
    GitSetting("gpg.x509.program", RUNS, "signs and verifies", Force("gpgsm"), Force("gpgsm")),
    GitSetting("gpg.ssh.defaultKeyCommand", RUNS, "names the signing key", Force(""), Force("")),
    GitSetting("interactive.diffFilter", RUNS, "filters add -p's diff", Force("cat"), Force("cat")),
    GitSetting(
        "protocol.ext.allow",
        RUNS,
        "the ext:: transport runs any command a remote address names",
        Force("never"),
        Force("never"),
    ),
    GitSetting(
        "diff.external",
        RUNS,
        "replaces every diff (no harmless value: a blanked one makes git diff fail loudly)",
        Blank(""),
        Refuse(),
    ),
    GitSetting("core.gitProxy", RUNS, "the git:// transport's proxy", Blank(""), Refuse()),
    GitSetting(
        "core.alternateRefsCommand",
        RUNS,
        "lists an alternate store's refs",
        Blank(""),
        Refuse(),
    ),
    GitSetting(
        "uploadpack.packObjectsHook",
        RUNS,
        "runs instead of pack-objects when serving a fetch",
        Blank(""),
        Refuse(),
    ),
    GitSetting("sendemail.smtpServer", RUNS, "may name a program", Force(""), Left(_NOT_RUN)),
    GitSetting("sendemail.toCmd", RUNS, "send-email's addresses", Force(""), Left(_NOT_RUN)),
    GitSetting("sendemail.ccCmd", RUNS, "send-email's addresses", Force(""), Left(_NOT_RUN)),
    GitSetting("sendemail.headerCmd", RUNS, "send-email's headers", Force(""), Left(_NOT_RUN)),
    GitSetting("imap.tunnel", RUNS, "imap-send's connection", Force(""), Left(_NOT_RUN)),
    GitSetting("web.browser", RUNS, "help -w and instaweb", Force(""), Left(_NOT_RUN)),
    # --- programs under a name the repository picks -----------------------------------------
    GitSetting(
        "filter.<name>.clean",
        RUNS,
        "a driver the attributes name, run by status, add, diff on each matching file",
        Blank(""),
        Refuse(),
    ),
    GitSetting("filter.<name>.smudge", RUNS, "the same, on checkout", Blank(""), Refuse()),
    GitSetting("filter.<name>.process", RUNS, "the same, long-running", Blank(""), Refuse()),
    GitSetting(
        "diff.<name>.textconv",
        RUNS,
        "converts a file the attributes name before diffing it",
        Blank("cat"),
        Refuse(),
    ),
    GitSetting(
        "diff.<name>.command", RUNS, "diffs a file the attributes name", Blank(""), Refuse()
    ),
    GitSetting(
        "merge.<name>.driver", RUNS, "merges a file the attributes name", Blank(""), Refuse()
    ),
    GitSetting(
        "remote.<name>.uploadpack",
        RUNS,
        "the program fetch runs (locally, for a remote that is a path)",
        Blank("", also=_NO_LOCAL),
        Refuse(),
    ),
    GitSetting(
        "remote.<name>.receivepack",
        RUNS,
        "the program push runs (locally, for a remote that is a path)",
        Blank("", also=_NO_LOCAL),
        Refuse(),
    ),
    GitSetting(
        "remote.<name>.vcs", RUNS, "a git-remote-<vcs> helper from PATH", Blank(""), Refuse()
    ),
    GitSetting(
        "alias.<name>",
        RUNS,
        "a new command; '!' runs a shell (git's own commands cannot be shadowed)",
        Blank(""),
        Left("plangate runs git's own commands, which no alias can shadow"),
    ),
    GitSetting("difftool.<name>.cmd", RUNS, "difftool's program", Blank(""), Refuse()),
    GitSetting("difftool.<name>.path", RUNS, "difftool's program", Blank(""), Refuse()),
    GitSetting("mergetool.<name>.cmd", RUNS, "mergetool's program", Blank(""), Refuse()),
    GitSetting("mergetool.<name>.path", RUNS, "mergetool's program", Blank(""), Refuse()),
    GitSetting("guitool.<name>.cmd", RUNS, "git gui's tools", Blank(""), Refuse()),
    GitSetting("browser.<name>.cmd", RUNS, "help -w's browser", Blank(""), Refuse()),
    GitSetting("browser.<name>.path", RUNS, "help -w's browser", Blank(""), Refuse()),
    GitSetting("man.<name>.cmd", RUNS, "help's man viewer", Blank(""), Refuse()),
    GitSetting("man.<name>.path", RUNS, "help's man viewer", Blank(""), Refuse()),
    GitSetting(
        "trailer.<name>.command",
        RUNS,
        "commit --trailer and interpret-trailers",
        Blank(""),
        Refuse(),
    ),
    GitSetting(
        "trailer.<name>.cmd", RUNS, "commit --trailer and interpret-trailers", Blank(""), Refuse()
    ),
    # --- more configuration from elsewhere --------------------------------------------------
    GitSetting(
        "include.path",
        READS,
        "reads another file as configuration",
        Left("git config --list follows it, so the keys it brings are blanked like the rest"),
        Refuse(),
    ),
    GitSetting(
        "includeIf.<condition>.path",
        READS,
        "the same, when a condition holds",
        Left("git config --list follows it, so the keys it brings are blanked like the rest"),
        Refuse(),
    ),
    GitSetting(
        "extensions.worktreeConfig",
        READS,
        "makes git read config.worktree as well",
        Left("git config --list reads config.worktree too"),
        Refuse(),
    ),
    GitSetting(
        "core.attributesFile",
        READS,
        "attributes from another file (they name drivers)",
        Left("the drivers it could name are blanked"),
        Force("/dev/null"),
    ),
    GitSetting(
        "core.worktree",
        READS,
        "points git at another working tree",
        Left(_MOUNTS),
        Left("GIT_WORK_TREE, always set, outranks it"),
    ),
    GitSetting(
        "safe.bareRepository",
        READS,
        "a bare repository inside the workspace, entered with cd, brings its own configuration",
        Force("explicit"),
        Left("GIT_DIR names the repository on every command"),
    ),
    # --- the network --------------------------------------------------------------------------
    GitSetting(
        "url.<base>.insteadOf",
        NETWORK,
        "rewrites remote addresses (a push can go elsewhere, or to ext::)",
        Left(_AGENT_NET),
        Refuse(),
    ),
    GitSetting(
        "url.<base>.pushInsteadOf",
        NETWORK,
        "rewrites push addresses",
        Left(_AGENT_NET),
        Refuse(),
    ),
    GitSetting(
        "http.<setting>",
        NETWORK,
        "proxies, cookie files, extra headers, certificates of http remotes",
        Left(_AGENT_NET),
        Refuse(),
    ),
    GitSetting("remote.<name>.proxy", NETWORK, "one remote's proxy", Left(_AGENT_NET), Refuse()),
    GitSetting(
        "remote.<name>.promisor",
        NETWORK,
        "a partial clone fetches missing objects from it on any read",
        Left(_AGENT_NET),
        Refuse(),
    ),
    GitSetting(
        "extensions.partialClone",
        NETWORK,
        "the same, for the whole repository",
        Left(_AGENT_NET),
        Refuse(),
    ),
    GitSetting(
        "remote.<name>.url",
        NETWORK,
        "where fetch and push go",
        Left(_AGENT_NET),
        Left(
            "Push goes to PLANGATE_GIT_REMOTE; give it as an address, not a remote's name, "
            "to keep the repository from choosing where"
        ),
    ),
    # --- nested repositories: their own configuration applies there ---------------------------
    GitSetting(
        "submodule.recurse",
        ENTERS,
        "checkout, pull and others enter submodules",
        Force("false"),
        Force("false"),
    ),
    GitSetting(
        "diff.ignoreSubmodules",
        ENTERS,
        "status and diff run git status inside each submodule",
        Force("dirty"),
        Force("all"),
    ),
    GitSetting(
        "status.submoduleSummary",
        ENTERS,
        "status summarises each submodule's log",
        Force("false"),
        Force("false"),
    ),
    GitSetting(
        "fetch.recurseSubmodules", ENTERS, "fetch enters submodules", Force("false"), Force("false")
    ),
    GitSetting(
        "push.recurseSubmodules", ENTERS, "push enters submodules", Force("no"), Force("no")
    ),
    GitSetting(
        "submodule.<name>.ignore",
        ENTERS,
        "outranks diff.ignoreSubmodules for one submodule (in .gitmodules too)",
        Blank("dirty"),
        Left("every status and diff passes --ignore-submodules=all, and add leaves gitlinks out"),
    ),
    GitSetting(
        "submodule.<name>.update",
        RUNS,
        "'!command' is run by git submodule update (in .gitmodules too)",
        Blank("none"),
        Refuse(),
    ),
)

# Environment variables git reads before its configuration, per context.
SANDBOX_ENV: dict[str, str] = {
    "GIT_PAGER": "cat",
    "GIT_EDITOR": "false",
    "GIT_SEQUENCE_EDITOR": "false",
    "GIT_SSH_COMMAND": "ssh",
    "GIT_ASKPASS": "false",
    "GIT_TERMINAL_PROMPT": "0",
}
HOST_ENV: dict[str, str] = {
    # No system or global configuration, no system attributes: only the repository's own,
    # which :func:`unsafe_config` has checked.
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_ATTR_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_PAGER": "cat",
    "GIT_EDITOR": "true",
    "GIT_SEQUENCE_EDITOR": "true",
    "GIT_SSH_COMMAND": "ssh",
    "GIT_ASKPASS": "",
    "GIT_MERGE_AUTOEDIT": "no",
}


def sandbox_forced() -> tuple[tuple[str, str], ...]:
    """``(key, value)`` of every setting forced inside the sandbox."""
    return tuple((row.key, row.sandbox.value) for row in TABLE if isinstance(row.sandbox, Force))


def host_forced() -> tuple[tuple[str, str], ...]:
    """``(key, value)`` of every setting forced on the host's git commands."""
    return tuple((row.key, row.host.value) for row in TABLE if isinstance(row.host, Force))


def sandbox_env(repos: Sequence[Path] = ()) -> dict[str, str]:
    """The environment entries of every git inside the sandbox: :data:`SANDBOX_ENV` and the
    forced settings as ``GIT_CONFIG_*`` (:data:`NAMED_GUARD` adds the blanked ones).

    ``repos`` (the workspace) are trusted whoever owns them (``safe.directory``, exactly those
    folders): a mounted volume's owner is nobody inside the sandbox's user namespace."""
    env = dict(SANDBOX_ENV)
    forced = (*sandbox_forced(), *(("safe.directory", str(repo)) for repo in repos))
    env["GIT_CONFIG_COUNT"] = str(len(forced))
    for index, (key, value) in enumerate(forced):
        env[f"GIT_CONFIG_KEY_{index}"] = key
        env[f"GIT_CONFIG_VALUE_{index}"] = value
    return env


def host_env(home: Path) -> dict[str, str]:
    """The whole environment of a host git command (``home``: an empty folder of plangate's)."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C",
        "LC_ALL": "C",
        **HOST_ENV,
    }


# Settings of the host's commands that run nothing but keep output and identity fixed.
HOST_PLAIN: tuple[tuple[str, str], ...] = (
    ("color.ui", "false"),
    ("core.quotePath", "false"),
    ("advice.detachedHead", "false"),
    ("core.untrackedCache", "false"),
)


def host_config(author: tuple[str, str]) -> tuple[str, ...]:
    """The ``key=value`` settings every host git command gets as ``-c`` (forced, plain
    output, and ``author`` as the identity)."""
    name, email = author
    pairs = (*host_forced(), *HOST_PLAIN, ("user.name", name), ("user.email", email))
    return tuple(f"{key}={value}" for key, value in pairs)


_HOST_REFUSED = re.compile(
    "^(?:" + "|".join(row.pattern() for row in TABLE if isinstance(row.host, Refuse)) + ")$"
)


def unsafe_config(listing: str, *, scoped: bool = False) -> list[str]:
    """The keys of ``git config --list --null`` output that refuse the repository on the host;
    ``scoped``: the output of ``--show-scope`` (scope and entry alternate; plangate's own
    ``-c`` overrides come back as ``command`` and are skipped)."""
    entries = listing.split("\0")
    if scoped:
        pairs = zip(entries[0::2], entries[1::2], strict=False)
        entries = [entry for scope, entry in pairs if scope.strip() != "command"]
    keys = []
    for entry in entries:
        key = entry.split("\n", 1)[0].strip().lower()
        if key and _HOST_REFUSED.match(key):
            keys.append(key)
    return keys


def _guard_script() -> str:
    blanked = [row for row in TABLE if isinstance(row.sandbox, Blank)]
    pattern = "^(" + "|".join(row.pattern() for row in blanked) + ")$"
    # Each blanked shape's value, by the key's last part (the patterns' ends are distinct
    # enough: only textconv, ignore and update differ from the empty value).
    cases = ""
    for row in blanked:
        assert isinstance(row.sandbox, Blank)
        end = row.key.rsplit(".", 1)[1].lower()
        also = row.sandbox.also
        if also is not None:
            cases += f"*.{end}) __v={row.sandbox.value}; __a='{also[0]}={also[1]}';; "
        elif row.sandbox.value:
            cases += f"*.{end}) __v={row.sandbox.value};; "
    return (
        "if command -v git >/dev/null 2>&1; then "
        "__n=${GIT_CONFIG_COUNT:-0}; "
        "while IFS= read -r -d '' __k; do "
        f"__v=; __a=; case $__k in {cases}esac; "
        'export "GIT_CONFIG_KEY_$__n=$__k" "GIT_CONFIG_VALUE_$__n=$__v"; __n=$((__n+1)); '
        'if [ -n "$__a" ]; then export "GIT_CONFIG_KEY_$__n=${__a%%=*}" '
        '"GIT_CONFIG_VALUE_$__n=${__a#*=}"; __n=$((__n+1)); fi; '
        "done < <({ git config --list --name-only -z; "
        "[ -f .gitmodules ] && git config -f .gitmodules --list --name-only -z; "
        # A submodule's own git, which add and status start inside it, gets these settings
        # too (git passes them on to submodules): its keys are blanked the same way.
        "git ls-files -s -z | while IFS= read -r -d '' __e; do case $__e in 160000*) "
        "__p=${__e#*$'\\t'}; [ -e \"$__p/.git\" ] "
        '&& git -C "$__p" config --list --name-only -z;; '
        "esac; done; } 2>/dev/null "
        f"| grep -zE '{pattern}' | sort -zu); "
        "export GIT_CONFIG_COUNT=$__n; unset __n __k __v __a __e __p; fi"
    )


# bash, run in the sandbox before each command: blank every named key the repository (its
# configuration, the files that includes, .gitmodules, and its submodules' configuration) has.
NAMED_GUARD = _guard_script()


def markdown_table() -> str:
    """The table as docs/security.md shows it (a test keeps the page equal to this)."""

    def say(action: Action) -> str:
        match action:
            case Force(value):
                return f"forced to `{value}`" if value else "forced empty"
            case Blank(value, also):
                text = f"blanked when set (`{value}`)" if value else "blanked when set"
                return text + (f", and `{also[0]}={also[1]}`" if also else "")
            case Refuse():
                return "refused"
            case Left(why):
                return f"left: {why}"

    lines = [
        "| setting | what it does | sandbox | host |",
        "|---|---|---|---|",
    ]
    for row in TABLE:
        lines.append(
            f"| `{row.key}` | {row.kind}: {row.why} | {say(row.sandbox)} | {say(row.host)} |"
        )
    return "\n".join(lines)


__all__ = [
    "ENTERS",
    "HOST_ENV",
    "HOST_PLAIN",
    "NAMED_GUARD",
    "NETWORK",
    "READS",
    "RUNS",
    "SANDBOX_ENV",
    "TABLE",
    "Blank",
    "Force",
    "GitSetting",
    "Left",
    "Refuse",
    "host_config",
    "host_env",
    "host_forced",
    "markdown_table",
    "sandbox_env",
    "sandbox_forced",
    "unsafe_config",
]
