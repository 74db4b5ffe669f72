"""A real PostgreSQL for the tests: one throwaway cluster per test session, on a unix socket in a
temporary folder, no TCP port; each test that asks gets a database of its own.

Debian's server binaries (``deploy/system-deps.sh`` installs the ``postgresql`` package; ``make
test`` runs it). As root the cluster runs as the ``postgres`` user, since PostgreSQL refuses to
run as root. Use the ``pg_dsn`` fixture (``from tests.pg import pg_cluster, pg_dsn`` in a conftest).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

FIX = "install PostgreSQL's server (Debian: apt-get install postgresql; make test does it as root)"


@dataclass(frozen=True)
class Cluster:
    socket_dir: Path
    user: str

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql:///{database}?host={self.socket_dir}&user={self.user}"


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}")) or [shutil.which(name) or ""]
    if not found[-1]:
        pytest.fail(f"PostgreSQL's {name} is missing: {FIX}", pytrace=False)
    return found[-1]


def _as_owner(argv: list[str], owner: str | None) -> list[str]:
    return (
        ["setpriv", f"--reuid={owner}", f"--regid={owner}", "--init-groups", *argv]
        if owner
        else argv
    )


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    """initdb + postgres on a unix socket; stopped (fast) at the end of the session."""
    owner = "postgres" if os.geteuid() == 0 else None
    root = Path(tempfile.mkdtemp(prefix="plangate-pg-"))
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    if owner is not None:
        pw = pwd.getpwnam(owner)
        os.chown(root, pw.pw_uid, pw.pw_gid)
        os.chown(sock, pw.pw_uid, pw.pw_gid)
    user = owner or pwd.getpwuid(os.geteuid()).pw_name
    subprocess.run(
        _as_owner(
            [_bin("initdb"), "-D", str(data), "-U", user, "-A", "trust", "-E", "UTF8", "--no-sync"],
            owner,
        ),
        check=True,
        capture_output=True,
        cwd="/",
    )
    subprocess.run(
        _as_owner(
            [
                _bin("pg_ctl"),
                "-D",
                str(data),
                "-w",
                "-s",
                "-l",
                str(root / "log"),
                "-o",
                f"-k {sock} -c listen_addresses='' -c fsync=off -c max_connections=200",
                "start",
            ],
            owner,
        ),
        check=True,
        capture_output=True,
        cwd="/",
    )
    try:
        yield Cluster(sock, user)
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            subprocess.run(
                _as_owner(
                    [_bin("pg_ctl"), "-D", str(data), "-m", "immediate", "-s", "stop"], owner
                ),
                check=True,
                capture_output=True,
                cwd="/",
            )
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
async def pg_dsn(pg_cluster: Cluster) -> AsyncIterator[str]:
    """A fresh, empty database in the session's cluster; dropped after the test."""
    import asyncpg

    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(pg_cluster.dsn())
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    try:
        yield pg_cluster.dsn(name)
    finally:
        admin = await asyncpg.connect(pg_cluster.dsn())
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


__all__ = ["Cluster", "pg_cluster", "pg_dsn"]
