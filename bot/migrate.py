"""``plangate migrate --from sqlite:PATH [--to postgresql://...]``: a home's SQLite database
copied into PostgreSQL, every table counted on both sides (docs/storage.md, "PostgreSQL")."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from bot.settings import load_run_settings
from engine.errors import ConfigError


async def run_migrate(source: str, target: str | None, out: TextIO = sys.stdout) -> int:
    """Copy the SQLite database ``source`` names into ``target`` (default: the
    ``PLANGATE_DATABASE_URL`` setting); prints the counts, 0 when they match."""
    if not source.startswith("sqlite:"):
        raise ConfigError("--from: expected sqlite:PATH, e.g. sqlite:~/.plangate/plangate.db")
    path = Path(source.removeprefix("sqlite:")).expanduser()
    if target is None:
        url = load_run_settings().database_url
        if url is None:
            raise ConfigError("--to: give postgresql://... or set PLANGATE_DATABASE_URL")
        target = url.get_secret_value()
    from storage.postgres import is_postgres_url

    if not is_postgres_url(target):
        raise ConfigError("--to: expected postgresql://user:password@host:5432/database")
    try:
        from storage.postgres.copy import CopyRefused, copy_sqlite_to_postgres
        from storage.postgres.db import PgDatabase
    except ImportError:
        raise ConfigError("PostgreSQL needs asyncpg: pip install 'plangate[postgres]'") from None
    async with await PgDatabase.open(target) as db:
        try:
            report = await copy_sqlite_to_postgres(path, db)
        except CopyRefused as exc:
            print(f"migrate: {exc}; nothing was copied", file=out)
            return 1
    for table, count in report.counts.items():
        print(f"{table}: {count} rows, the same on both sides", file=out)
    print(f"migrate: {path} copied into PostgreSQL", file=out)
    return 0
