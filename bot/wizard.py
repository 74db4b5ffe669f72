"""``plangate setup``: the first run, from a terminal (README.md, docs/operations.md).

It asks for the bot token and checks it (``getMe``), pairs the owner with a one-time code sent
to the bot from their phone, asks for the project folder and the model server, and writes the
settings to ``<home>/config.env`` (mode 0600), which ``run`` and ``doctor`` read. Every answer
can also come as a flag, so scripts run it without a terminal.

Pairing is the only way to become owner from the chat: whoever sends the code to the bot in a
private chat within its lifetime is recorded. The code has 40 bits of entropy, lives ten
minutes, and a handful of wrong tries end it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import os
import secrets
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from telegram import Bot
from telegram.error import Conflict, InvalidToken, NetworkError

from bot.settings import config_path
from bot.telegram.app import file_url
from engine.errors import ConfigError
from engine.tools.host import protected_folders

CODE_ALPHABET = "ABCDEFGHJKMNPQRSTVWXYZ23456789"  # no 0/O, 1/I/L, U: read off a screen
CODE_LENGTH = 8  # 30**8 ~ 2**39
CODE_LIFETIME_S = 600.0
CODE_TRIES = 5
POLL_TIMEOUT_S = 10


def new_code() -> str:
    """A one-time pairing code, ``ABCD-EFGH``."""
    raw = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
    return f"{raw[:4]}-{raw[4:]}"


def _normal(code: str) -> str:
    return "".join(ch for ch in code.upper() if ch.isalnum())


@dataclass
class Pairing:
    """One pairing window: the code, its deadline, the wrong tries left."""

    code: str
    expires_at: float
    tries_left: int = CODE_TRIES
    clock: Callable[[], float] = field(default=time.monotonic)

    @classmethod
    def start(cls, clock: Callable[[], float] = time.monotonic) -> Pairing:
        return cls(new_code(), clock() + CODE_LIFETIME_S, clock=clock)

    @property
    def open(self) -> bool:
        return self.tries_left > 0 and self.clock() < self.expires_at

    def attempt(self, text: str) -> bool:
        """True when ``text`` is the code; a wrong attempt spends one try."""
        if not self.open:
            return False
        if secrets.compare_digest(_normal(text), _normal(self.code)):
            return True
        self.tries_left -= 1
        return False


class Terminal:
    """Questions and lines on a terminal (or pipes, for scripts and tests)."""

    def __init__(self, stdin: TextIO = sys.stdin, stdout: TextIO = sys.stdout) -> None:
        self._in, self._out = stdin, stdout

    def say(self, line: str) -> None:
        self._out.write(line + "\n")
        self._out.flush()

    def ask(self, prompt: str, *, default: str = "", secret: bool = False) -> str:
        shown = f"{prompt} [{default}]: " if default else f"{prompt}: "
        if secret and self._in.isatty():
            answer = getpass.getpass(shown, stream=self._out)
        else:
            self._out.write(shown)
            self._out.flush()
            line = self._in.readline()
            if not line:
                raise ConfigError(f"setup: no answer to {prompt!r} (end of input)")
            answer = line.strip()
        return answer or default


@dataclass
class Answers:
    """What setup collected; ``lines()`` is the config file."""

    token: str
    owner_id: int
    workspaces: list[Path]
    model: str
    base_url: str | None
    api_key: str | None
    api_url: str | None

    def lines(self) -> list[str]:
        out = [
            "# Written by `plangate setup`; the environment wins over these lines.",
            f"PLANGATE_TELEGRAM_TOKEN={self.token}",
            f"PLANGATE_OWNER_IDS={self.owner_id}",
            f"PLANGATE_WORKSPACE={self.workspaces[0]}",
            f"PLANGATE_MODEL={self.model}",
        ]
        if len(self.workspaces) > 1:
            pairs = ",".join(f"{p.name}={p}" for p in self.workspaces)
            out.append(f"PLANGATE_PROJECTS={pairs}")
        if self.base_url:
            out.append(f"PLANGATE_MODEL_BASE_URL={self.base_url}")
        if self.api_key:
            out.append(f"PLANGATE_MODEL_API_KEY={self.api_key}")
        if self.api_url:
            out.append(f"PLANGATE_TELEGRAM_API_URL={self.api_url}")
        return out


def write_config(path: Path, lines: Sequence[str]) -> None:
    """Write ``lines`` to ``path`` with mode 0600 from the first byte (it holds the token)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _bot(token: str, api_url: str | None) -> Bot:
    if api_url:
        return Bot(token, base_url=api_url, base_file_url=file_url(api_url))
    return Bot(token)


async def check_token(token: str, api_url: str | None) -> str:
    """The bot's @username, or ConfigError with one line."""
    bot = _bot(token, api_url)
    try:
        async with bot:
            me = await bot.get_me()
    except InvalidToken:
        raise ConfigError(
            "the Telegram server refused the token (getMe: unauthorized); "
            "copy it again from @BotFather"
        ) from None
    except NetworkError as exc:
        raise ConfigError(f"cannot reach the Telegram server: {exc.message}") from None
    return me.username or str(me.id)


async def pair(
    bot: Bot,
    pairing: Pairing,
    terminal: Terminal,
    *,
    poll_timeout_s: int = POLL_TIMEOUT_S,
) -> int:
    """Wait for the code in a private chat; returns the sender's id.

    ``/whoami`` is answered with the sender's id while the window is open. Updates read here are
    acknowledged, so ``run`` does not see the code afterwards. A second reader of the bot's
    updates (a running plangate) is refused by Telegram with 409: say so and stop.
    """
    offset = 0
    while pairing.open:
        try:
            updates = await bot.get_updates(
                offset=offset, timeout=poll_timeout_s, allowed_updates=["message"]
            )
        except Conflict:
            raise ConfigError(
                "another process reads this bot's updates (a running `plangate run` or a "
                "webhook): stop it first, then run `plangate setup` again"
            ) from None
        for update in updates:
            offset = update.update_id + 1
            message = update.message
            if message is None or message.chat.type != "private" or message.from_user is None:
                continue
            text = (message.text or "").strip()
            user = message.from_user
            if text.split("@")[0] == "/whoami":
                await bot.send_message(message.chat.id, f"Your Telegram user id is {user.id}.")
                continue
            if pairing.attempt(text):
                await bot.send_message(
                    message.chat.id,
                    f"✅ Paired: {user.full_name} is plangate's owner. "
                    "Finish the setup in the terminal.",
                )
                await bot.get_updates(offset=offset, timeout=0)  # acknowledge what was read
                return user.id
            if pairing.open:
                await bot.send_message(message.chat.id, "That is not the code on the screen.")
            terminal.say(f"  a wrong code from {user.full_name}; {pairing.tries_left} tries left")
    await bot.get_updates(offset=offset, timeout=0)
    if pairing.tries_left <= 0:
        raise ConfigError("pairing: too many wrong codes; run `plangate setup` again")
    raise ConfigError("pairing: the code expired after 10 minutes; run `plangate setup` again")


def check_folder(raw: str, *, refuse: Sequence[Path]) -> Path:
    """An existing folder that is not plangate's own install or home (nor holds them)."""
    path = Path(raw).expanduser().resolve()
    if not path.is_dir():
        raise ConfigError(f"{raw}: not a folder")
    for own in refuse:
        own = own.expanduser().resolve()
        if own == path or own.is_relative_to(path):
            raise ConfigError(
                f"{path}: holds plangate's own install or home ({own}); "
                "give a project folder elsewhere"
            )
    return path


def own_folders(home: Path) -> list[Path]:
    """plangate's install (interpreter, venv, standard library, packages; taken at start) and
    home: never a project. The same list ``run``, ``doctor`` and ``/project`` refuse."""
    return [folder for _, folder in protected_folders(home)]


async def list_models(base_url: str | None, api_key: str | None) -> list[str]:
    """The model ids the server lists (empty when it lists none)."""
    from openai import AsyncOpenAI, OpenAIError

    client = AsyncOpenAI(base_url=base_url, api_key=api_key or "plangate-no-key", max_retries=0)
    try:
        page = await client.models.list()
        return sorted(m.id for m in page.data)
    except OpenAIError as exc:
        hint = " (does the URL end in /v1?)" if "404" in str(exc) else ""
        raise ConfigError(f"the model server did not list its models{hint}") from None
    finally:
        await client.close()


async def run_setup(args: argparse.Namespace, terminal: Terminal) -> int:
    """Ask, check, pair, write; returns the exit code."""
    env = dict(os.environ)
    if args.home:
        env["PLANGATE_HOME"] = args.home
    path = config_path(env)
    home = path.parent
    api_url = args.telegram_api_url or env.get("PLANGATE_TELEGRAM_API_URL") or None
    terminal.say(f"plangate setup: the settings go to {path}")

    token = args.token or terminal.ask("Bot token from @BotFather", secret=True)
    name = await check_token(token, api_url)
    terminal.say(f"✓ the token works: @{name}")

    if args.owner_id is not None:
        owner = int(args.owner_id)
    else:
        pairing = Pairing.start()
        terminal.say(
            f"Send this code to @{name} from your phone, in a private chat: {pairing.code}\n"
            "  (it expires in 10 minutes; /whoami there shows your id)"
        )
        async with _bot(token, api_url) as bot:
            owner = await pair(bot, pairing, terminal)
        terminal.say(f"✓ paired: owner id {owner}")

    refuse = own_folders(home)
    raw_folders = args.workspace or [
        terminal.ask("Project folder the agent works on", default=str(Path.cwd()))
    ]
    workspaces = [check_folder(raw, refuse=refuse) for raw in raw_folders]
    terminal.say(f"✓ project: {', '.join(str(p) for p in workspaces)}")

    base_url = args.model_base_url
    if base_url is None:
        base_url = terminal.ask("Model server URL (empty for OpenAI)", default="") or None
    api_key = args.model_api_key
    if api_key is None:
        api_key = terminal.ask("Model API key (empty for none)", default="", secret=True) or None
    models = await list_models(base_url, api_key)
    if models:
        shown = ", ".join(models[:12]) + (" …" if len(models) > 12 else "")
        terminal.say(f"✓ the server lists: {shown}")
    model = args.model or terminal.ask(
        "Model", default="gpt-4o-mini" if "gpt-4o-mini" in models or not models else models[0]
    )
    if models and model not in models:
        terminal.say(f"  note: {model} is not in the server's list")

    answers = Answers(token, owner, workspaces, model, base_url, api_key, api_url)
    write_config(path, answers.lines())
    terminal.say(f"✓ wrote {path} (mode 0600)\nNext: plangate doctor, then plangate run")
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``plangate setup``: each answers one question."""
    parser.add_argument("--home", help="plangate's home (default ~/.plangate)")
    parser.add_argument("--token", help="the bot token (else asked)")
    parser.add_argument("--telegram-api-url", help="a self-hosted Bot API server")
    parser.add_argument("--owner-id", type=int, help="skip pairing: the owner's user id")
    parser.add_argument(
        "--workspace", action="append", help="a project folder (repeat for several)"
    )
    parser.add_argument("--model-base-url", help="an OpenAI-compatible server's URL")
    parser.add_argument("--model-api-key", help="the model server's key")
    parser.add_argument("--model", help="the model name")


def main(args: argparse.Namespace) -> int:
    """Entry point for ``plangate setup``."""
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(run_setup(args, Terminal()))
    return 130


__all__ = [
    "Pairing",
    "Terminal",
    "add_arguments",
    "check_folder",
    "main",
    "new_code",
    "pair",
    "run_setup",
    "write_config",
]
