"""The ``plangate`` command line: ``run``, ``demo``, ``doctor`` (README.md, docs/operations.md).

A bare ``plangate`` runs the bot when a token is set and the offline demo otherwise. This
module is the composition root: the only place that knows engine, storage and bot at once.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence

from engine.errors import ConfigError

_log = logging.getLogger("plangate.cli")


def _fail(line: str, code: int = 2) -> int:
    print(f"plangate: {line}", file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line and run the chosen command; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="plangate",
        description="A coding agent steered from Telegram. Without a command: run the bot "
        "when a token is set, else the offline demo.",
    )
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("run", help="run the Telegram bot (polling, or a webhook when configured)")
    sub.add_parser("demo", help="play the whole flow offline in the terminal")
    sub.add_parser("doctor", help="check the token, the model, the folders and the settings")
    args = parser.parse_args(argv)
    command = args.command
    try:
        if command is None:
            from bot.settings import load_settings

            command = "run" if load_settings().telegram_token is not None else "demo"
        if command == "demo":
            from bot.demo import main as demo_main

            return demo_main()
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
