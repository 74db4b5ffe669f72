"""The ``plangate`` command line: ``run``, ``demo``, ``doctor``, ``migrate`` (README.md,
docs/operations.md).

A bare ``plangate`` runs the bot when a token is set and the offline demo otherwise. This
module is the composition root: the only place that knows engine, storage and bot at once.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence

from engine.errors import ConfigError

_log = logging.getLogger("plangate.cli")


def _fail(line: str, code: int = 2) -> int:
    print(f"plangate: {line}", file=sys.stderr)
    return code


def installed_version() -> str:
    """plangate's version as installed (the wheel's metadata), or "unknown" from a bare checkout."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("plangate")
    except PackageNotFoundError:
        return "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line and run the chosen command; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="plangate",
        description="A coding agent steered from Telegram. Without a command: run the bot "
        "when a token is set, else the offline demo.",
    )
    parser.add_argument("--version", action="version", version=f"plangate {installed_version()}")
    parser.add_argument(
        "--debug", action="store_true", help="log everything, with tracebacks (PLANGATE_LOG_LEVEL)"
    )
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("run", help="run the Telegram bot (polling, or a webhook when configured)")
    demo = sub.add_parser("demo", help="play the whole flow offline in the terminal")
    demo.add_argument("--fast", action="store_true", help="no pauses between the lines")
    sub.add_parser("doctor", help="check the token, the model, the folders and the settings")
    from bot.wizard import add_arguments

    add_arguments(
        sub.add_parser("setup", help="first run: check the token, pair the owner, write settings")
    )
    sub.add_parser("health", help="exit 0 when a running bot's heartbeat is fresh (Docker)")
    migrate = sub.add_parser(
        "migrate", help="copy a home's SQLite database into PostgreSQL and verify the counts"
    )
    migrate.add_argument(
        "--from", dest="source", required=True, help="sqlite:PATH (a home's plangate.db)"
    )
    migrate.add_argument(
        "--to", dest="target", help="postgresql://... (default: PLANGATE_DATABASE_URL)"
    )
    args = parser.parse_args(argv)
    command = args.command
    if args.debug:
        os.environ["PLANGATE_LOG_LEVEL"] = "DEBUG"
    try:
        if command is None:
            from bot.settings import load_run_settings

            found = load_run_settings()
            # Either channel's token means "serve": Telegram, Slack, or both.
            served = found.telegram_token is not None or found.slack_bot_token is not None
            command = "run" if served else "demo"
        if command == "demo":
            from bot.demo import main as demo_main

            return demo_main(fast=getattr(args, "fast", False))
        if command == "setup":
            from bot.wizard import main as setup_main

            return setup_main(args)
        if command == "health":
            from bot.health import check, heartbeat_name
            from bot.settings import load_run_settings

            found = load_run_settings()
            name = heartbeat_name(replicated=found.database_url is not None)
            problem = check(found.home.expanduser(), name=name)
            if problem is not None:
                return _fail(problem, 1)
            print("plangate: ok")
            return 0
        if command == "migrate":
            from bot.migrate import run_migrate

            return asyncio.run(run_migrate(args.source, args.target))
        if command == "doctor":
            from bot.doctor import run_doctor

            return asyncio.run(run_doctor())
        from bot.runner import run_bot

        return asyncio.run(run_bot())
    except ConfigError as exc:
        return _fail(str(exc))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
