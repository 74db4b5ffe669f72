"""``plangate doctor``: check the settings, the folders, the sandbox, the token and the model.

Each check prints one line: ``ok`` or what is wrong and how to fix it. The exit code is 0 only
when every check passed.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from bot.runner import (
    FRONT_ENDS,
    install_problems,
    model_from_settings,
    sandbox_settings,
    wanted_front_ends,
)
from bot.settings import (
    Settings,
    config_path,
    load_run_settings,
    run_problems,
    settings_warnings,
)
from engine.errors import ConfigError
from engine.model.types import ModelError
from engine.tools.disk import DiskReserve
from engine.tools.sandbox import (
    SYSTEM_DIRS,
    SandboxSettings,
    SandboxStatus,
    fallback_limits,
    probe,
    sandbox_path,
)
from engine.worktree.script import suggestion
from storage.db import database_path


def _writable(folder: Path) -> str | None:
    """None when ``folder`` exists (or can be made) and a file can be written in it."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".plangate-doctor-"):
            pass
    except OSError as exc:
        return f"{type(exc).__name__}: {exc.strerror or exc}"
    return None


async def check_model(settings: Settings) -> tuple[bool, str]:
    """The model server answers and knows the model."""
    try:
        provider = model_from_settings(settings)
    except ConfigError as exc:
        return False, f"model: {exc}"
    try:
        status = await provider.check()
    except ModelError as exc:
        return False, f"model: {exc}"
    finally:
        await provider.aclose()
    return True, f"model: ok, {status}"


# What PLANGATE_BASH_APPROVAL means, for the sandbox line (docs/agent.md, "Tool approvals").
_APPROVAL_LINE = {
    "escalation": "bash asks only to leave the sandbox (network, PLANGATE_ASK_BASH)",
    "always": "bash asks for every command no PLANGATE_ALLOW_BASH rule allows",
    "never": "bash never asks; network and PLANGATE_ASK_BASH commands are denied",
}


def memory_line(sandbox: SandboxSettings, status: SandboxStatus) -> str:
    """Which bound holds one bash call's memory (docs/security.md, "Whole-call limits")."""
    if status.memory_limit == "cgroup":
        return f"memory {sandbox.memory_mb} MB per call in total (a memory cgroup)"
    per_process_mb, processes = fallback_limits(sandbox.memory_mb, sandbox.max_processes)
    return (
        f"memory {sandbox.memory_mb} MB per call in total through the fallback (no writable "
        f"memory cgroup here): at most {processes} processes of {per_process_mb} MB address "
        "space each, too little for toolchains such as Node; give plangate a memory cgroup"
    )


def check_disk(settings: Settings) -> tuple[bool, str]:
    """The room on the disk of plangate's home against ``PLANGATE_DISK_RESERVE_MB``."""
    reserve = DiskReserve(settings.home, settings.disk_reserve_mb)
    if not reserve.enabled:
        return (
            True,
            "disk: no reserve (PLANGATE_DISK_RESERVE_MB=0): a full disk fails plangate's writes",
        )
    try:
        free = reserve.free_mb()
    except OSError as exc:
        return False, f"disk: cannot read the free space of {settings.home} ({exc.strerror})"
    line = (
        f"disk: {free} MB free where plangate's home is, {reserve.reserve_mb} MB kept for "
        "plangate (PLANGATE_DISK_RESERVE_MB)"
    )
    # While plangate runs its reserve is a file in the home, not counted as free.
    needed = reserve.reserve_mb if reserve.held() else 2 * reserve.reserve_mb
    if free < needed:
        return False, f"{line}; too little: bash calls stay refused until {needed} MB are free"
    return True, f"{line}; ok"


def check_sandbox(settings: Settings) -> tuple[bool, str]:
    """Whether bash's bubblewrap sandbox works here, and which limits bind."""
    sandbox = sandbox_settings(settings)
    asks = _APPROVAL_LINE[settings.bash_approval_mode]
    if not sandbox.enabled:
        return True, (
            "sandbox: off (PLANGATE_SANDBOX=off): bash runs unconfined; remove the setting "
            f"to confine it; {asks}"
        )
    status = probe(sandbox, refresh=True)
    if status.problem is not None:
        return False, f"sandbox: {status.problem}"
    network = "on" if sandbox.network else "off"
    limits = {
        "cgroup": "processes capped by a pids cgroup",
        "rlimit": "processes capped by RLIMIT_NPROC",
        "none": "processes NOT capped",
    }[status.process_limit]
    line = (
        f"sandbox: ok, bubblewrap works; network {network}, {memory_line(sandbox, status)}, "
        f"{limits}; {asks}"
    )
    if status.notes:
        return False, f"{line}; {'; '.join(status.notes)}"
    return True, line


# Tools a project's setup or checks commonly call; doctor says which the sandbox sees.
TOOLS = ("python3", "pip3", "uv", "node", "npm", "git", "make", "gcc", "go", "cargo")


def check_tools(settings: Settings) -> list[tuple[bool, str]]:
    """Which of :data:`TOOLS` bash and the checks see in the sandbox, and, when this
    machine's ``python3`` or ``node`` is one the sandbox does not see (pyenv, nvm,
    ``~/.local/bin``), the setting that shows it (informational, never a failure)."""
    sandbox = sandbox_settings(settings)
    inside = sandbox_path(sandbox)
    seen = [tool for tool in TOOLS if shutil.which(tool, path=inside)]
    missing = [tool for tool in TOOLS if tool not in seen]
    line = "sandbox tools: " + (", ".join(seen) or "none of " + ", ".join(TOOLS))
    if missing:
        line += f" (not there: {', '.join(missing)})"
    lines = [(True, line)]
    roots = [Path(folder) for folder in SYSTEM_DIRS] + list(sandbox.tool_dirs)
    for tool in ("python3", "node"):
        host = shutil.which(tool)
        if host is None:
            continue
        resolved = Path(host).resolve()
        if any(resolved.is_relative_to(root.resolve()) for root in roots if root.exists()):
            continue
        folder = resolved.parent.parent if resolved.parent.name == "bin" else resolved.parent
        lines.append(
            (
                True,
                f"sandbox tools: {tool} here is {host}, which the sandbox does not see; "
                f"install it under /usr or set PLANGATE_SANDBOX_TOOL_DIRS={folder}",
            )
        )
    return lines


def check_setups(settings: Settings) -> list[tuple[bool, str]]:
    """A line per project with dependencies and no ``.plangate/setup.sh`` (docs/
    environments.md): informational, never a failure."""
    folders = [settings.workspace, *(path for _, path in settings.projects)]
    if settings.projects_root is not None and settings.projects_root.is_dir():
        folders += sorted(p for p in settings.projects_root.iterdir() if p.is_dir())
    lines = []
    for folder in dict.fromkeys(folders):
        line = suggestion(folder) if folder.is_dir() else None
        if line is not None:
            lines.append((True, f"project {folder}: {line}"))
    return lines


async def check_database(settings: Settings) -> tuple[bool, str]:
    """Where the database is; for PostgreSQL, that it answers and which schema it holds."""
    if settings.database_url is None:
        return True, f"database: SQLite in {database_path(settings.home.expanduser())}"
    url = settings.database_url.get_secret_value()
    try:
        from storage.postgres.db import probe as probe_database
        from storage.postgres.migrations import COMPATIBLE_AHEAD, MIGRATIONS
    except ImportError:
        return False, "database: PostgreSQL needs asyncpg; pip install 'plangate[postgres]'"
    try:
        server, found = await probe_database(url)
    except Exception as exc:  # any failure to reach or log in is the line's answer
        return False, f"database: PostgreSQL did not answer ({type(exc).__name__}: {exc})"
    known = len(MIGRATIONS)
    if found > known + COMPATIBLE_AHEAD:
        return False, (
            f"database: PostgreSQL {server}, schema version {found} is newer than this "
            f"plangate knows ({known}); upgrade plangate"
        )
    if found > known:
        state = f"{found}, one ahead of this plangate ({known}): upgrade this replica next"
    else:
        state = "up to date" if found == known else f"{found}, migrated to {known} at start"
    return True, f"database: PostgreSQL {server}, schema version {state}"


async def check_leases(settings: Settings) -> list[tuple[bool, str]]:
    """With PostgreSQL, the chat leases' table (docs/webhook.md, "Several replicas"): which
    replicas hold how many chats now, how many leases lapsed; nothing written. No line with
    SQLite (one process, no leases in the database)."""
    if settings.database_url is None:
        return []
    try:
        import asyncpg
    except ImportError:
        return []  # the database line already says what to install
    try:
        conn = await asyncpg.connect(settings.database_url.get_secret_value(), timeout=5.0)
    except Exception as exc:  # the database line already says why
        return [(False, f"leases: not read, the database did not answer ({type(exc).__name__})")]
    try:
        if not await conn.fetchval("SELECT to_regclass('chat_leases') IS NOT NULL"):
            return [(True, "leases: no lease table yet; the next start creates it")]
        rows = await conn.fetch(
            "SELECT replica, count(*) FILTER (WHERE expires_at > extract(epoch FROM now())),"
            " count(*) FILTER (WHERE expires_at <= extract(epoch FROM now()))"
            " FROM chat_leases GROUP BY replica ORDER BY replica"
        )
    except Exception as exc:  # a table this plangate cannot read is the line's answer
        return [(False, f"leases: the lease table cannot be read ({type(exc).__name__}: {exc})")]
    finally:
        await conn.close()
    live = {str(r[0]): int(r[1]) for r in rows if r[1]}
    lapsed = sum(int(r[2]) for r in rows)
    held = ", ".join(f"{replica} {n}" for replica, n in live.items())
    line = (
        f"leases: {sum(live.values())} chats held by {len(live)} replicas"
        + (f" ({held})" if held else "")
        + f", {lapsed} lapsed or released; lease time {settings.lease_ttl:g} s "
        "(PLANGATE_LEASE_TTL)"
    )
    return [(True, line)]


async def check_shared_volume(settings: Settings) -> list[tuple[bool, str]]:
    """With PostgreSQL, the home is the folder replicas share: its deployment id against the
    database's (``storage.deployment``; nothing written) and whether it can be written. With
    SQLite the database lives in the home, so there is nothing to compare and no line."""
    if settings.database_url is None:
        return []
    from storage.deployment import Ids, mismatch_line, probe_database_id, read_home_id

    home = settings.home.expanduser()
    try:
        database = await probe_database_id(settings.database_url.get_secret_value())
    except Exception as exc:  # the database line already says why; this one cannot compare
        return [
            (
                False,
                f"shared volume {home}: not compared, the database did not answer "
                f"({type(exc).__name__})",
            )
        ]
    ids = Ids(await asyncio.to_thread(read_home_id, home), database)
    problem = await asyncio.to_thread(_writable, home)
    writable = "writable" if problem is None else f"NOT writable ({problem})"
    if ids.match:
        line = f"shared volume {home}: deployment {ids.home}, the database's too; {writable}"
    elif ids.new:
        line = (
            f"shared volume {home}: no deployment id yet; the first start writes one here "
            f"and in the database; {writable}"
        )
    else:
        return [(False, f"shared volume: {mismatch_line(home, ids)}")]
    return [(problem is None, line)]


async def run_doctor(
    out: TextIO = sys.stdout, *, load: Callable[[], Settings] = load_run_settings
) -> int:
    """Run every check and print one line each; 0 when all passed."""
    try:
        settings = load()
    except ConfigError as exc:
        print(f"settings: {exc}", file=out)
        return 1
    results: list[tuple[bool, str]] = [(True, "settings: ok")]
    files = [config_path(), Path(".env")]
    results.extend((False, f"settings: {line}") for line in settings_warnings(files=files))
    results.extend((False, f"settings: {problem}") for problem in run_problems(settings))
    home = settings.home.expanduser()
    home_problem = _writable(home)
    if home_problem is None:
        results.append((True, f"home {home}: ok, writable"))
    else:
        fix = "set PLANGATE_HOME to a folder you own"
        results.append((False, f"home {home}: not writable ({home_problem}); {fix}"))
    workspace = settings.workspace
    held = install_problems(settings)
    results.extend((False, line) for line in held)
    if not workspace.is_dir():
        results.append((False, f"workspace {workspace}: not a folder; set PLANGATE_WORKSPACE"))
    elif not os.access(workspace, os.W_OK):
        results.append((False, f"workspace {workspace}: not writable by this user"))
    elif not held:
        results.append((True, f"workspace {workspace}: ok"))
    results.extend(await asyncio.to_thread(check_setups, settings))
    results.extend(await asyncio.to_thread(check_tools, settings))
    results.append(await asyncio.to_thread(check_sandbox, settings))
    results.append(await asyncio.to_thread(check_disk, settings))
    results.append(await check_database(settings))
    results.extend(await check_leases(settings))
    results.extend(await check_shared_volume(settings))
    # The front ends asked for; with none, the first (Telegram) says what it lacks.
    for front in wanted_front_ends(settings) or FRONT_ENDS[:1]:
        results.extend(await front.doctor(settings))
    results.append(await check_model(settings))
    for _, line in results:
        print(line, file=out)
    failed = sum(not ok for ok, _ in results)
    print("all checks passed" if not failed else f"{failed} problem(s) found", file=out)
    return 0 if not failed else 1
