"""The bubblewrap sandbox ``bash`` runs in: mounts, environment, limits, and a start-up probe.

One call = one ``bwrap`` process with fresh user, pid, ipc, uts (and, unless the network is
on, network) namespaces. Only the system folders (read-only), a short list of ``/etc`` files, a
private ``/tmp`` and the workspace are mounted; the workspace is read-only or writable as the
caller asks. Paths the caller names as hidden (the plangate home, the plan folder, the settings
file) are masked when they lie inside something mounted. The environment is rebuilt from
nothing. A call's memory is bounded as a whole: by a memory cgroup of its own where one can be
made (then no process gets an address-space limit), else by the fallback, a lowered process
cap times a per-process address-space limit (:func:`fallback_limits`). The process count is
``ulimit -u``, and where a pids cgroup can be created (running as root, when ``RLIMIT_NPROC``
does not bind) the call's cgroup has ``pids.max`` too. Everything is decided by the mounts,
never by reading the command.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from engine.tools.git_guard import NAMED_GUARD, git_env
from engine.tools.search import path_visible
from engine.tools.workspace import is_within, real_path

log = logging.getLogger("plangate.tools.sandbox")

# System folders mounted read-only (a symlink such as /bin -> usr/bin is recreated as a link).
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt")
# The /etc entries programs need; the rest of /etc (shadow, service env files with tokens in
# them) stays out.
ETC_ENTRIES = (
    "alternatives",
    "bash.bashrc",
    "ca-certificates",
    "ca-certificates.conf",
    "debian_version",
    "gitconfig",
    "group",
    "host.conf",
    "hostname",
    "hosts",
    "inputrc",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "mime.types",
    "nsswitch.conf",
    "os-release",
    "passwd",
    "profile",
    "protocols",
    "python3",
    "resolv.conf",
    "services",
    "ssl",
    "terminfo",
    "timezone",
)
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Names never passed in, whatever the settings say.
_SECRET_MARKERS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")

FIX = "install bubblewrap (apt-get install bubblewrap) or set PLANGATE_SANDBOX=off on purpose"


def forbidden_env_name(name: str) -> bool:
    """``True`` for a variable that must never reach bash: ``PLANGATE_*``, tokens, keys."""
    upper = name.upper()
    return upper.startswith("PLANGATE_") or any(mark in upper for mark in _SECRET_MARKERS)


@dataclass(frozen=True, slots=True)
class SandboxSettings:
    """How ``bash`` is confined. ``enabled=False`` is the unconfined mode, set on purpose."""

    enabled: bool = True
    network: bool = False
    memory_mb: int = 2048
    max_processes: int = 256
    # Variables copied from the bot's environment on purpose (secret-looking names never are).
    env_pass: tuple[str, ...] = ()
    # Never visible to any tool: the plangate home, the settings file, absolute secret files.
    hidden: tuple[Path, ...] = ()
    # Relative paths hidden inside every workspace (secret files named in the settings).
    hidden_names: tuple[str, ...] = ()
    # Toolchains outside the system folders, seen read-only (each one's bin/ on the PATH).
    tool_dirs: tuple[Path, ...] = ()
    bwrap: str = "bwrap"


@dataclass(frozen=True, slots=True)
class SandboxStatus:
    """What the probe found: ``problem`` is the one-line refusal, ``None`` when usable."""

    problem: str | None
    process_limit: str = "rlimit"  # "cgroup", "rlimit" or "none"
    notes: tuple[str, ...] = field(default_factory=tuple)
    # "cgroup": a memory cgroup bounds each call's total (RLIMIT_AS off); "fallback": the
    # process cap times the address space per process does (:func:`fallback_limits`).
    memory_limit: str = "fallback"


def helper_env() -> dict[str, str]:
    """The environment of a process plangate itself starts outside the sandbox (the grep
    search, ``bwrap`` and the cgroup shell before it): a ``PATH`` and a locale, nothing of the
    bot's (no token or key, no ``PYTHONPATH``, no ``HOME`` to find configuration in)."""
    return {"PATH": SANDBOX_PATH, "LANG": "C.UTF-8"}


def sandbox_path(settings: SandboxSettings) -> str:
    """The sandbox's ``PATH``: each tool folder's ``bin`` (or the folder, when it is a
    ``bin``) first, then the system's."""
    extra = []
    for folder in settings.tool_dirs:
        found = folder if folder.name == "bin" else folder / "bin"
        extra.append(str(found))
    return ":".join([*dict.fromkeys(extra), SANDBOX_PATH])


def sandbox_env(
    settings: SandboxSettings, environ: Mapping[str, str], *, workspace: Path | None = None
) -> dict[str, str]:
    """The whole environment inside the sandbox; git there trusts ``workspace`` whoever owns
    it (a mounted volume)."""
    env = {
        "PATH": sandbox_path(settings),
        "HOME": "/tmp",
        "LANG": environ.get("LANG") or "C.UTF-8",
        "TERM": "dumb",
        # No .pyc files left in the project by the agent's test runs.
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    for name in settings.env_pass:
        if not forbidden_env_name(name) and name in environ:
            env[name] = environ[name]
    # Last, so no passed variable undoes it: git runs none of the commands its config names.
    env.update(git_env((workspace,) if workspace is not None else ()))
    return env


def guarded(command_var: str = '"$1"', limits: str = "") -> str:
    """bash that neutralises the repository's named git drivers, then (after ``limits``,
    shell commands such as ``ulimit``) execs the command. The guard runs before the limits:
    under the fallback's small address space per process its git could not start."""
    then = f"{limits} && " if limits else ""
    return f"{{ {NAMED_GUARD}; }} && {then}exec bash -c {command_var}"


def _system_mounts() -> list[str]:
    args: list[str] = []
    for folder in SYSTEM_DIRS:
        path = Path(folder)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), folder]
        elif path.is_dir():
            args += ["--ro-bind", folder, folder]
    for entry in ETC_ENTRIES:
        path = Path("/etc") / entry
        if path.exists():
            args += ["--ro-bind", str(path), str(path)]
    return args


def _system_roots() -> list[Path]:
    roots = []
    for folder in SYSTEM_DIRS:
        path = Path(folder)
        if path.is_dir() and not path.is_symlink():
            roots.append(real_path(path))
    roots.append(Path("/etc"))
    return roots


# Size of a tmpfs that masks a hidden folder: it only ever holds mount points.
_MASK_BYTES = 64 * 1024
# /dev holds device nodes, links and mount points only; /dev/shm is its own tmpfs.
_DEV_BYTES = 1024 * 1024
# The device nodes bwrap's --dev would give (its --dev tmpfs cannot be sized).
_DEVICES = ("null", "zero", "full", "random", "urandom", "tty")


def tmpfs_sizes(memory_mb: int) -> dict[str, int]:
    """Bytes of each writable tmpfs inside, together within the memory setting.

    A tmpfs holds memory that ``ulimit -v`` does not count, so each is sized: half of the
    memory setting for ``/tmp``, a quarter for ``/var/tmp``, an eighth for ``/dev/shm``.
    """
    total = memory_mb * 1024 * 1024
    return {"/tmp": total // 2, "/var/tmp": total // 4, "/dev/shm": total // 8}


def _scratch_mounts(memory_mb: int) -> list[str]:
    sizes = tmpfs_sizes(memory_mb)
    args = ["--proc", "/proc", "--size", str(_DEV_BYTES), "--tmpfs", "/dev"]
    for name in _DEVICES:
        if Path("/dev", name).exists():
            args += ["--dev-bind", f"/dev/{name}", f"/dev/{name}"]
    for link, target in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ):
        args += ["--symlink", target, f"/dev/{link}"]
    args += ["--size", str(sizes["/dev/shm"]), "--tmpfs", "/dev/shm"]
    args += ["--remount-ro", "/dev"]
    for folder in ("/tmp", "/var/tmp"):
        args += ["--size", str(sizes[folder]), "--tmpfs", folder]
    return args


def _mask(path: Path) -> list[str]:
    if path.is_dir():
        return ["--size", str(_MASK_BYTES), "--tmpfs", str(path)]
    return ["--ro-bind", "/dev/null", str(path)]


def _pinned_folders(
    workspace: Path, read_only: Sequence[Path], masked: Sequence[Path]
) -> list[Path]:
    """The folders of the writable workspace that hold a mask: each becomes a mount point.

    A mask sticks to its directory entry, and the kernel lets a folder that merely contains a
    mount point be renamed: ``mv config config2`` would carry the mask along and leave the
    hidden file on disk at a path no hidden entry names, for the next call and the file tools
    to read. A folder that is a mount point itself cannot be renamed (``EBUSY``), so every
    folder strictly between the workspace and a mask is bound onto itself. Folders inside a
    read-only root (renames there fail anyway) or inside a mask are left alone.
    """
    roots = [str(workspace), *(str(root) for root in read_only)]
    secrets = [str(path) for path in masked]
    pinned: dict[Path, None] = {}
    for path in masked:
        for folder in reversed(path.parents):
            if folder == workspace or not is_within(folder, workspace):
                continue
            if any(is_within(folder, root) for root in read_only):
                break
            if not path_visible(str(folder), roots, secrets):
                break
            pinned[folder] = None
    return list(pinned)


def _mount_plan(
    workspace: Path, read_only: Sequence[Path], hidden: Iterable[Path], *, writable: bool
) -> list[str]:
    """The workspace, the read-only roots and the masks over every hidden path, in order.

    Every mount is made after the mounts of the folders around it (ordered by depth, a root
    before a mask of the same path), so a hidden folder that holds a root (an inbox or a
    workspace under plangate's home) is masked first and the root then shows through it,
    while a hidden path inside a root is masked over it. A hidden path outside everything
    mounted needs no mask: it is simply not there. Masks end read-only. In a writable
    workspace the folders around each mask are mount points too (:func:`_pinned_folders`).
    """
    roots = [workspace, *(root for root in read_only if root != workspace)]
    mounted = [*_system_roots(), *roots]
    bind = "--bind" if writable else "--ro-bind"
    steps: list[tuple[int, int, list[str]]] = [
        (len(workspace.parts), 0, [bind, str(workspace), str(workspace)])
    ]
    for root in roots[1:]:  # -try: an inbox is made when the first upload comes
        steps.append((len(root.parts), 0, ["--ro-bind-try", str(root), str(root)]))
    masked = [
        path
        for path in dict.fromkeys(real_path(raw) for raw in hidden)
        if path.exists() and any(is_within(path, root) for root in mounted)
    ]
    read_only_dirs: list[str] = []
    for path in masked:
        steps.append((len(path.parts), 1, _mask(path)))
        if path.is_dir():
            read_only_dirs.append(str(path))
    if writable:
        for pinned in _pinned_folders(workspace, roots[1:], masked):
            steps.append((len(pinned.parts), 0, ["--bind", str(pinned), str(pinned)]))
    args: list[str] = []
    for _, _, step in sorted(steps, key=lambda item: (item[0], item[1])):
        args += step
    for folder in read_only_dirs:
        args += ["--remount-ro", folder]
    return args


def bwrap_argv(
    settings: SandboxSettings,
    *,
    workspace: Path,
    writable: bool,
    command: str,
    hidden: Sequence[Path] = (),
    read_only: Sequence[Path] = (),
    network: bool | None = None,
    environ: Mapping[str, str] | None = None,
    info_fd: int | None = None,
    memory_cgroup: bool = False,
    binds: Sequence[tuple[Path, str]] = (),
) -> list[str]:
    """The ``bwrap`` command line that runs ``command`` with ``bash -c`` in the sandbox.

    ``hidden`` adds to ``settings.hidden``; ``network`` overrides ``settings.network`` (one
    call's decision); ``binds`` are extra writable mounts (a setup run's caches).
    ``memory_cgroup``: the call runs in a cgroup whose memory limit bounds its total, so no
    process gets an address-space limit (runtimes that reserve a large address space, such
    as Node's WebAssembly, need that); without one the fallback limits apply
    (:func:`fallback_limits`). Tools get this through :class:`engine.tools.boundary.Boundary`.
    """
    ws = real_path(workspace)
    args = [
        settings.bwrap,
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        # Root outside is nobody special inside: no capability, and no new user namespace
        # to gain them back in (so mount, umount and unshare fail).
        "--cap-drop",
        "ALL",
        "--disable-userns",
        "--hostname",
        "sandbox",
    ]
    if not (settings.network if network is None else network):
        args.append("--unshare-net")
    if info_fd is not None:
        args += ["--info-fd", str(info_fd)]
    args += _system_mounts()
    if memory_cgroup:
        # The cgroup counts every process and the tmpfs pages they write, together.
        limits = f"ulimit -u {settings.max_processes}"
        args += _scratch_mounts(settings.memory_mb)
    else:
        # No cgroup to add them up: processes x address space within half the setting, the
        # tmpfs mounts sized within the other half.
        per_process_mb, processes = fallback_limits(settings.memory_mb, settings.max_processes)
        limits = f"ulimit -v {per_process_mb * 1024} && ulimit -u {processes}"
        args += _scratch_mounts(settings.memory_mb // 2)
    args += _mount_plan(
        ws,
        [real_path(p) for p in read_only],
        [*settings.hidden, *hidden],
        writable=writable,
    )
    for source, target in binds:  # a setup run's package caches, outside every root
        args += ["--bind", str(source), target]
    args += ["--chdir", str(ws), "--clearenv"]
    environment = sandbox_env(settings, os.environ if environ is None else environ, workspace=ws)
    for name, value in environment.items():
        args += ["--setenv", name, value]
    # ulimit sets soft and hard limits together; nothing inside can raise a hard limit again.
    args += ["--", "bash", "-c", guarded(limits=limits), "bash", command]
    return args


# --- orphans ----------------------------------------------------------------------------------


def reap_adopted(pid: int) -> bool:
    """Reap ``pid`` if it is a zombie this process adopted; ``True`` when it was reaped.

    The sandbox's init (the inner ``bwrap``) can outlive the outer ``bwrap`` that started it
    by a moment; it is then re-parented to the nearest reaper. When plangate is that reaper
    (PID 1 of a container without an init), nobody else would ever wait for it, and each call
    would leave a zombie. Only a pid the sandbox reported (bwrap's ``--info-fd``) is reaped,
    and only when it is already a zombie whose parent is this process: asyncio's child watcher
    owns the pids plangate started itself and waits for them by pid, so none of those is ever
    taken from it (the outer bwrap is asyncio's; the inner one never was).
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] != "Z" or int(fields[1]) != os.getpid():
        return False
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return False
    return True


# --- the call's cgroups --------------------------------------------------------------------


def _own_cgroups() -> list[tuple[str, str]]:
    """``(controllers, path)`` pairs of this process (``controllers`` is empty for v2)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    pairs = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3:
            pairs.append((parts[1], parts[2]))
    return pairs


def _cgroup_mounts() -> list[tuple[str, str, str]]:
    """``(mount point, fstype, super options)`` of the cgroup file systems."""
    mounts = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            mounts.append((fields[4], tail[0], tail[2]))
    return mounts


def find_cgroup_parent(controller: str) -> Path | None:
    """A writable cgroup folder under which a child with ``controller`` (``pids`` or
    ``memory``) can be made, if any: this process's own cgroup in the v1 hierarchy that has
    the controller, or in the v2 hierarchy when it hands the controller to its children."""
    own = _own_cgroups()
    for point, fstype, options in _cgroup_mounts():
        if fstype == "cgroup" and controller in options.split(","):
            path = next((p for c, p in own if controller in c.split(",")), None)
        elif fstype == "cgroup2":
            path = next((p for c, p in own if c == ""), None)
        else:
            continue
        if path is None:
            continue
        folder = Path(point) / path.lstrip("/")
        if fstype == "cgroup2":
            try:
                enabled = (folder / "cgroup.subtree_control").read_text().split()
            except OSError:
                continue
            if controller not in enabled:
                continue
        if folder.is_dir() and os.access(folder, os.W_OK):
            return folder
    return None


def find_pids_cgroup() -> Path | None:
    """A writable cgroup folder under which a child with ``pids.max`` can be made, if any."""
    return find_cgroup_parent("pids")


def _limit_memory(folder: Path, memory_mb: int) -> None:
    """Bound the cgroup's memory (tmpfs pages its processes write included) and keep swap
    from stretching it; raises OSError when the kernel refuses the limit itself."""
    limit = str(memory_mb * 1024 * 1024)
    if (folder / "memory.max").exists():  # v2
        (folder / "memory.max").write_text(limit)
        with contextlib.suppress(OSError):
            (folder / "memory.swap.max").write_text("0")
        return
    (folder / "memory.limit_in_bytes").write_text(limit)
    with contextlib.suppress(OSError):  # only with swap accounting on
        (folder / "memory.memsw.limit_in_bytes").write_text(limit)


# The outer bwrap and the sandbox's init are in the call's cgroup too, besides the processes
# the setting counts.
_BWRAP_PROCESSES = 2


class CallCgroup:
    """One call's cgroup: ``pids.max`` and/or a memory limit, in one folder (v2) or one per
    hierarchy (v1); :meth:`enter_argv` puts the sandbox in every one of them."""

    def __init__(self, folders: Sequence[Path], *, memory: bool = False) -> None:
        self.folders = tuple(folders)
        # True when a memory limit bounds the whole call (then RLIMIT_AS is left off).
        self.memory = memory

    @property
    def folder(self) -> Path:
        """The first folder (the only one on v2)."""
        return self.folders[0]

    @classmethod
    def create(
        cls,
        parents: Mapping[str, Path],
        *,
        max_processes: int,
        memory_mb: int,
    ) -> CallCgroup | None:
        """Fresh child cgroups of ``parents`` (controller -> parent folder), ``None`` when
        the kernel says no to any of them (none is left behind then)."""
        name = f"plangate-bash-{uuid.uuid4().hex[:12]}"
        by_parent: dict[Path, list[str]] = {}
        for controller, parent in parents.items():
            by_parent.setdefault(parent, []).append(controller)
        made: list[Path] = []
        try:
            for parent, controllers in by_parent.items():
                folder = parent / name
                folder.mkdir()
                made.append(folder)
                if "pids" in controllers:
                    limit = max_processes + _BWRAP_PROCESSES
                    (folder / "pids.max").write_text(str(limit))
                if "memory" in controllers:
                    _limit_memory(folder, memory_mb)
        except OSError as exc:
            log.warning("plangate.tools.sandbox.cgroup_failed folder=%s error=%s", name, exc)
            for folder in made:
                with contextlib.suppress(OSError):
                    folder.rmdir()
            return None
        if not made:
            return None
        return cls(made, memory="memory" in parents)

    def enter_argv(self, argv: Sequence[str]) -> list[str]:
        """``argv`` prefixed by a shell that moves itself into the cgroups, then execs it."""
        procs = [str(folder / "cgroup.procs") for folder in self.folders]
        enter = 'for f in "$@"; do [ "$f" = -- ] && break; echo $$ > "$f" || exit 125; done'
        script = f'{enter}; while [ "$1" != -- ]; do shift; done; shift; exec "$@"'
        return ["/bin/sh", "-c", script, "plangate-cgroup", *procs, "--", *argv]

    def empty(self) -> bool:
        """No process is left in any of the call's cgroups."""
        for folder in self.folders:
            try:
                if (folder / "cgroup.procs").read_text().split():
                    return False
            except OSError:
                continue
        return True

    def remove(self) -> bool:
        """Remove every folder; ``False`` when one is still busy."""
        removed = True
        for folder in self.folders:
            try:
                folder.rmdir()
            except FileNotFoundError:
                continue
            except OSError:
                removed = False
        return removed


def cgroup_parents(*, memory_mb: int | None = None) -> dict[str, Path]:
    """Where a call's cgroups can be made: ``pids`` as root (a normal user's process count
    is bound by RLIMIT_NPROC), ``memory`` wherever a writable hierarchy has it."""
    parents: dict[str, Path] = {}
    if os.geteuid() == 0 and (pids := find_pids_cgroup()) is not None:
        parents["pids"] = pids
    if memory_mb is not None and (memory := find_cgroup_parent("memory")) is not None:
        parents["memory"] = memory
    return parents


def new_call_cgroup(settings: SandboxSettings) -> CallCgroup | None:
    """A fresh cgroup for one call as the probe found them, ``None`` where none can be had."""
    parents = cgroup_parents(memory_mb=settings.memory_mb)
    if not parents:
        return None
    processes = settings.max_processes
    if "memory" not in parents:  # the fallback: the process cap is what bounds the sum
        processes = fallback_limits(settings.memory_mb, settings.max_processes)[1]
    return CallCgroup.create(parents, max_processes=processes, memory_mb=settings.memory_mb)


# Without a memory cgroup the sum is bounded by the process cap: half the setting is shared
# out as address space, this much per process, but never to fewer processes than the floor
# (a shell, git under the guard and a pipeline need a few; threads count as processes); the
# tmpfs mounts take their fractions of the other half.
FALLBACK_PROCESS_MB = 256
FALLBACK_MIN_PROCESSES = 8


def fallback_limits(memory_mb: int, max_processes: int) -> tuple[int, int]:
    """``(address space per process in MB, processes)`` when no memory cgroup can be had:
    their product stays within half of ``memory_mb`` (the tmpfs mounts hold the rest)."""
    budget = memory_mb // 2
    wanted = max(FALLBACK_MIN_PROCESSES, budget // FALLBACK_PROCESS_MB)
    processes = max(1, min(max_processes, wanted))
    return budget // processes, processes


# --- the probe -------------------------------------------------------------------------------

_PROBES: dict[SandboxSettings, SandboxStatus] = {}


def probe(settings: SandboxSettings, *, refresh: bool = False) -> SandboxStatus:
    """Can ``bwrap`` create its namespaces here? Runs ``true`` in a sandbox once, cached.

    Blocking (a short subprocess): call it from a thread inside the event loop.
    """
    if not refresh and settings in _PROBES:
        return _PROBES[settings]
    status = _probe(settings)
    _PROBES[settings] = status
    return status


def _reap_reported(info_fd: int) -> None:
    """Read bwrap's ``--info-fd`` report to its end and reap the sandbox init it names."""
    with os.fdopen(info_fd, "rb") as handle:
        raw = handle.read()
    try:
        pid = json.loads(raw.decode("utf-8", "replace")).get("child-pid")
    except (ValueError, AttributeError):
        return
    if isinstance(pid, int):
        for _ in range(100):  # it is gone, or a zombie, a moment after the outer bwrap
            if reap_adopted(pid) or not Path(f"/proc/{pid}").exists():
                return
            time.sleep(0.01)


# The probe's command: fails with _NOT_POWERLESS unless the sandbox holds no capability.
_NOT_POWERLESS = 86
_POWERLESS = (
    "grep -Eq '^CapEff:[[:space:]]*0+$' /proc/self/status || "
    f"{{ grep CapEff /proc/self/status >&2; exit {_NOT_POWERLESS}; }}"
)


def _probe(settings: SandboxSettings) -> SandboxStatus:
    with tempfile.TemporaryDirectory(prefix="plangate-probe-") as folder:
        info_r, info_w = os.pipe()
        argv = bwrap_argv(
            settings,
            workspace=Path(folder),
            writable=True,
            command=_POWERLESS,
            info_fd=info_w,
        )
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                timeout=20,
                check=False,
                cwd="/",
                env=helper_env(),
                pass_fds=(info_w,),
            )
        except FileNotFoundError:
            return SandboxStatus(f"bash is unavailable: {settings.bwrap} is not installed; {FIX}")
        except (OSError, subprocess.TimeoutExpired) as exc:
            return SandboxStatus(f"bash is unavailable: bubblewrap failed to start ({exc}); {FIX}")
        finally:
            os.close(info_w)
            _reap_reported(info_r)
    why = done.stderr.decode("utf-8", "replace").strip().splitlines()
    reason = why[-1] if why else f"exit code {done.returncode}"
    if done.returncode == _NOT_POWERLESS:
        return SandboxStatus(
            "bash is unavailable: a process inside bubblewrap still holds capabilities "
            f"({reason}); {FIX}"
        )
    if done.returncode != 0 and "disable-userns" in reason:
        return SandboxStatus(
            "bash is unavailable: this bubblewrap cannot turn off user namespaces inside the "
            f"sandbox ({reason}), so root inside could regain capabilities; install "
            "bubblewrap 0.8.0 or newer, or set PLANGATE_SANDBOX=off on purpose"
        )
    if done.returncode != 0:
        return SandboxStatus(
            f"bash is unavailable: bubblewrap cannot create its namespaces here ({reason}); "
            "allow unprivileged user namespaces (see the README's security model) or "
            "set PLANGATE_SANDBOX=off on purpose"
        )
    cgroup = new_call_cgroup(settings)
    if cgroup is not None and not _enters(cgroup):
        cgroup.remove()
        cgroup = None
    pids = cgroup is not None and any((folder / "pids.max").exists() for folder in cgroup.folders)
    memory = "cgroup" if cgroup is not None and cgroup.memory else "fallback"
    if cgroup is not None:
        cgroup.remove()
    if os.geteuid() != 0:
        return SandboxStatus(None, "rlimit", memory_limit=memory)
    if pids:
        return SandboxStatus(None, "cgroup", memory_limit=memory)
    notes = [
        "running as root without a writable pids cgroup: the process-count limit does "
        "not bind; run plangate as a normal user (the Docker image does)"
    ]
    if memory == "fallback":
        notes.append("so neither does the memory total of a call")
    return SandboxStatus(None, "none", tuple(notes), memory_limit=memory)


def _enters(cgroup: CallCgroup) -> bool:
    """A process can move itself into ``cgroup`` (a delegated v2 tree may refuse it)."""
    try:
        done = subprocess.run(
            cgroup.enter_argv(["/bin/true"]),
            capture_output=True,
            timeout=10,
            check=False,
            cwd="/",
            env=helper_env(),
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


__all__ = [
    "FALLBACK_MIN_PROCESSES",
    "FALLBACK_PROCESS_MB",
    "FIX",
    "CallCgroup",
    "SandboxSettings",
    "SandboxStatus",
    "bwrap_argv",
    "cgroup_parents",
    "fallback_limits",
    "find_cgroup_parent",
    "find_pids_cgroup",
    "forbidden_env_name",
    "guarded",
    "helper_env",
    "new_call_cgroup",
    "probe",
    "reap_adopted",
    "sandbox_env",
    "sandbox_path",
]
