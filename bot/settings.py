"""Settings from the environment and ``.env`` (docs/configuration.md).

Every variable has the prefix ``PLANGATE_``; the bot token may also come as
``TELEGRAM_BOT_TOKEN`` and the model key as ``OPENAI_API_KEY``. The process environment wins
over ``.env``; an empty value counts as unset. :func:`load_settings` turns any mistake into one
:class:`engine.errors.ConfigError` line that names the variable, and never quotes a secret.
"""

from __future__ import annotations

import contextvars
import difflib
import io
import json
import logging
import os
import re
import stat
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    AliasChoices,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError
from pydantic_settings import (
    BaseSettings,
    DotEnvSettingsSource,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from engine.app import ENGINE_DEFAULTS
from engine.approval.policy import (
    BASH_APPROVALS,
    BashApproval,
    Rule,
    RuleError,
    default_bash_approval,
    parse_rules,
)
from engine.errors import ConfigError
from engine.goal.commands import parse_interval
from engine.projects import PROJECT_NAME
from engine.text import clip
from engine.tools.sandbox import forbidden_env_name
from engine.usage.ledger import parse_tokens
from storage.postgres import is_postgres_url

PREFIX = "PLANGATE_"
# Every default the engine reads lives once, on its configuration; the settings take theirs
# from it (the names here are the PLANGATE_* contracts, the engine's may differ).
_ENGINE = ENGINE_DEFAULTS
DEFAULT_HOME = Path("~/.plangate")
CONFIG_FILE = "config.env"
# The openai SDK refuses to start without a key; local servers (Ollama, vLLM) ignore it.
PLACEHOLDER_MODEL_API_KEY = "plangate-no-key"
DEFAULT_SLACK_API_URL = "https://slack.com/api/"
DEFAULT_TELEGRAM_API_URL = "https://api.telegram.org/bot"
# A chat's lease among replicas: renewed every third of it, so a replica may stall for about
# 20 s before its chats move, and a dead one's chats move within 30 s.
DEFAULT_LEASE_TTL_S = 30.0

_ENVIRON: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar(
    "plangate_settings_environ", default=None
)
# The settings files load_settings reads, later ones winning (the model's own ``env_file`` is
# off: pydantic-settings would open each file itself, blocking, before any source is chosen).
_ENV_FILES: contextvars.ContextVar[tuple[Path, ...]] = contextvars.ContextVar(
    "plangate_settings_files", default=()
)
_INTEGER = re.compile(r"[+-]?\d+")
_PROFILE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_WEBHOOK_SECRET = re.compile(r"[A-Za-z0-9_-]{1,256}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# A settings file is a few lines; past this it is no settings file.
MAX_SETTINGS_FILE_BYTES = 1 << 20


def _fail(detail: str) -> PydanticCustomError:
    """A validation error whose text is exactly ``detail`` (already says what was got)."""
    return PydanticCustomError("plangate", "{detail}", {"detail": detail})


def _shown(value: object) -> str:
    return clip(repr(value), 60)


_SLACK_ID = re.compile(r"[A-Z0-9]{2,12}")


def _parse_slack_ids(value: object) -> object:
    """JSON list or comma-separated Slack ids (``U01ABC``, ``C02XYZ``) -> tuple of str."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    try:
        items = json.loads(text) if text.startswith("[") else text.split(",")
    except json.JSONDecodeError:
        items = None
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise _fail(f"expected Slack ids like U01ABCDEF, comma-separated, got {_shown(value)}")
    ids = tuple(i.strip() for i in items if i.strip())
    if not all(_SLACK_ID.fullmatch(i) for i in ids):
        raise _fail(f"expected Slack ids like U01ABCDEF, comma-separated, got {_shown(value)}")
    return ids


def _parse_ids(value: object, *, kind: str, positive: bool) -> object:
    """JSON list or comma-separated integers -> tuple of ints; other types go to pydantic."""
    if not isinstance(value, str):
        return value
    expected = (
        f"expected {kind} ids as a JSON list or comma-separated integers, got {_shown(value)}"
    )
    text = value.strip()
    if text.startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError:
            raise _fail(expected) from None
        if not isinstance(items, list) or not all(
            isinstance(item, int) and not isinstance(item, bool) for item in items
        ):
            raise _fail(expected)
        ids = tuple(items)
    else:
        parts = [part.strip() for part in text.split(",")]
        if not all(_INTEGER.fullmatch(part) for part in parts if part):
            raise _fail(expected)
        ids = tuple(int(part) for part in parts if part)
    if positive and any(i <= 0 for i in ids):
        raise _fail(
            f"{kind} ids are positive numbers, got {_shown(value)} "
            f"(a group's id belongs in {PREFIX}ALLOWED_CHAT_IDS)"
        )
    return ids


def _parse_projects(value: object) -> object:
    """``name=path`` pairs (comma-separated, a JSON list of them, or a JSON object) -> a
    tuple of ``(name, folder)``; each folder must exist; names are unique plain words."""
    if not isinstance(value, str):
        return value
    expected = (
        "expected name=path pairs, comma-separated or as JSON "
        f'(like "api=/srv/api,web=/srv/web"), got {_shown(value)}'
    )
    text = value.strip()
    pairs: list[tuple[str, str]] = []
    if text.startswith(("[", "{")):
        try:
            loaded = json.loads(text)
        except json.JSONDecodeError:
            raise _fail(expected) from None
        if isinstance(loaded, dict) and all(isinstance(v, str) for v in loaded.values()):
            pairs = [(str(k), v) for k, v in loaded.items()]
        elif isinstance(loaded, list) and all(isinstance(item, str) for item in loaded):
            items = [item.partition("=") for item in loaded]
            if not all(sep for _, sep, _ in items):
                raise _fail(expected)
            pairs = [(name, path) for name, _, path in items]
        else:
            raise _fail(expected)
    else:
        for part in (p.strip() for p in text.split(",")):
            if not part:
                continue
            name, sep, path = part.partition("=")
            if not sep:
                raise _fail(expected)
            pairs.append((name, path))
    found: list[tuple[str, Path]] = []
    for raw_name, raw_path in pairs:
        name, path = raw_name.strip(), raw_path.strip()
        if not PROJECT_NAME.fullmatch(name):
            raise _fail(
                f"a project name is letters, digits, '.', '_' and '-' (at most 64), "
                f"got {_shown(name)}"
            )
        if any(name == seen for seen, _ in found):
            raise _fail(f"the project name {_shown(name)} is given twice")
        folder = Path(path).expanduser().resolve()
        if not path or not folder.is_dir():
            raise _fail(f"project {name}: expected an existing folder, got {_shown(path)}")
        found.append((name, folder))
    return tuple(found)


def _check_http_url(value: str | None) -> str | None:
    if value is None:
        return None
    text = value.strip()
    if not re.fullmatch(r"https?://[^\s/]+(/\S*)?", text):
        raise _fail(f"expected an http:// or https:// URL, got {_shown(value)}")
    return text


class _EnvironSource(EnvSettingsSource):
    """The environment source, reading the mapping given to :func:`load_settings` if any."""

    def _load_env_vars(self) -> Mapping[str, str | None]:
        environ = _ENVIRON.get()
        if environ is None:
            return super()._load_env_vars()
        # What pydantic-settings does to os.environ: fold case, drop empty values.
        return {
            (key if self.case_sensitive else key.lower()): value
            for key, value in environ.items()
            if not (self.env_ignore_empty and value == "")
        }


def read_settings_file(path: Path) -> str | None:
    """The text of the settings file at ``path`` (symbolic links followed), None when there is
    none. Raises :class:`ConfigError` with one line when it is no regular file, too large or
    unreadable.

    The file is opened once, without blocking, and checked on the open file: the agent can put
    a FIFO where plangate starts, even between a look and a read, and a blocking open of it
    would wait for a writer for good, before any refusal is reached.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({type(exc).__name__})") from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigError(
                f"{os.path.abspath(path)}: not a regular file; settings are read from a "
                "regular file only (remove it, or start plangate from a folder that is no "
                "workspace or project)"
            )
        data = fh.read(MAX_SETTINGS_FILE_BYTES + 1)
    if len(data) > MAX_SETTINGS_FILE_BYTES:
        raise ConfigError(
            f"{path}: larger than {MAX_SETTINGS_FILE_BYTES >> 20} MB; "
            "settings files are a few lines"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: cannot be read (not UTF-8 text)") from None


class _DotEnvSource(DotEnvSettingsSource):
    """The settings files' source: the files :func:`load_settings` names, each read through
    :func:`read_settings_file`."""

    def _read_env_files(self) -> Mapping[str, str | None]:
        found: dict[str, str | None] = {}
        for path in _ENV_FILES.get():
            found.update(self._read_env_file(path))
        return found

    def _read_env_file(self, file_path: Path) -> Mapping[str, str | None]:
        from dotenv import dotenv_values
        from pydantic_settings.sources.utils import parse_env_vars

        text = read_settings_file(file_path) or ""
        return parse_env_vars(
            dotenv_values(stream=io.StringIO(text)),
            self.case_sensitive,
            self.env_ignore_empty,
            self.env_parse_none_str,
        )


class Settings(BaseSettings):
    """Everything plangate reads from its environment. Secrets are ``SecretStr``."""

    model_config = SettingsConfigDict(
        env_prefix=PREFIX,
        env_file=None,
        env_ignore_empty=True,
        extra="ignore",
        validate_by_name=True,
        validate_by_alias=True,
    )

    telegram_token: SecretStr | None = Field(
        default=None,
        validation_alias=AliasChoices("PLANGATE_TELEGRAM_TOKEN", "TELEGRAM_BOT_TOKEN"),
    )
    telegram_api_url: str = DEFAULT_TELEGRAM_API_URL
    owner_ids: Annotated[tuple[int, ...], NoDecode] = ()
    allowed_chat_ids: Annotated[tuple[int, ...], NoDecode] = ()
    home: Path = Field(default_factory=lambda: DEFAULT_HOME.expanduser())
    workspace: Path = Field(default_factory=Path.cwd)
    profile: str | None = None
    model: str = "gpt-4o-mini"
    model_base_url: str | None = None
    model_api_key: SecretStr | None = Field(
        default=None,
        validation_alias=AliasChoices("PLANGATE_MODEL_API_KEY", "OPENAI_API_KEY"),
    )
    goal_max_rounds: int = Field(default=_ENGINE.max_goal_rounds, ge=1)
    todo_parallel: bool = _ENGINE.todo_parallel
    max_steps: int = Field(default=_ENGINE.max_steps, ge=1)
    # Seconds between two edits of one card (the env name predates the unit-suffix habit).
    flow_edit_interval: float = Field(default=1.5, gt=0, allow_inf_nan=False)
    # Seconds between two progress edits of one card in a group (about 20 calls a minute
    # there: progress takes at most half, what a person waits for goes first).
    flow_group_edit_interval: float = Field(default=6.0, gt=0, allow_inf_nan=False)
    # Pin the plan card: auto pins in private chats only (a group pin costs a call and pings).
    pin_cards: Literal["auto", "always", "never"] = "auto"
    # When an unattended run is stuck (docs/agent.md "Stuck, not slow"): the loop patterns,
    # then the outer bound on real progress (the old stall-steps name is its alias).
    stuck_repeats: int = Field(default=_ENGINE.stuck.repeats, ge=2)
    stuck_errors: int = Field(default=_ENGINE.stuck.errors, ge=2)
    stuck_monologue: int = Field(default=_ENGINE.stuck.monologue, ge=2)
    progress_steps: int = Field(
        default=_ENGINE.stuck.progress_steps,
        ge=1,
        validation_alias=AliasChoices("PLANGATE_PROGRESS_STEPS", "PLANGATE_CHECKLIST_STALL_STEPS"),
    )
    progress_minutes: float = Field(
        default=_ENGINE.stuck.progress_s / 60, gt=0, allow_inf_nan=False
    )
    task_tokens: int | None = Field(default=_ENGINE.stuck.task_tokens, ge=1)
    webhook_url: str | None = None
    webhook_secret: SecretStr | None = None
    webhook_listen: str | None = None
    # postgresql://... puts the database in PostgreSQL (docs/storage.md); unset: SQLite in
    # the home. A secret: it may carry a password.
    database_url: SecretStr | None = None
    # Several replicas (docs/webhook.md): with PostgreSQL and a webhook, this process's name
    # among them (unset: host name and process id), and how long a chat's lease lives
    # without renewal (seconds; a dead replica's chats move after at most this long).
    replica_id: str | None = Field(default=None, min_length=1, max_length=200)
    lease_ttl: float = Field(default=DEFAULT_LEASE_TTL_S, ge=1, le=3600, allow_inf_nan=False)
    # Slack (docs/slack.md): the bot token serves Slack; Socket Mode with the app token, or the
    # Events API over HTTP on PLANGATE_SLACK_LISTEN, requests checked with the signing secret.
    slack_bot_token: SecretStr | None = None
    slack_app_token: SecretStr | None = None
    slack_signing_secret: SecretStr | None = None
    slack_api_url: str = DEFAULT_SLACK_API_URL
    slack_owner_ids: Annotated[tuple[str, ...], NoDecode] = ()
    slack_allowed_channels: Annotated[tuple[str, ...], NoDecode] = ()
    slack_listen: str | None = None
    # bash's sandbox: "off" runs bash unconfined (on purpose only; a warning at start).
    sandbox: Literal["on", "off"] = "on"
    bash_network: bool = _ENGINE.sandbox.network
    bash_memory_mb: int = Field(default=_ENGINE.sandbox.memory_mb, ge=64)
    bash_max_processes: int = Field(default=_ENGINE.sandbox.max_processes, ge=16)
    # Megabytes kept free on the disk of plangate's home for its own writes: below it no bash
    # call runs and an unattended run pauses (engine/tools/disk.py); 0 turns it off. A running
    # bot's own default: an engine embedded without a home keeps none.
    disk_reserve_mb: int = Field(default=256, ge=0)
    bash_env: Annotated[tuple[str, ...], NoDecode] = ()
    # Files the agent never sees (no tool, not bash): absolute paths, or paths relative to
    # the workspace that are hidden in every workspace (".env.production,config/secrets.yml").
    secret_files: Annotated[tuple[str, ...], NoDecode] = ()
    # Toolchains outside the system folders (pyenv, nvm, rustup, ~/.local): absolute folders
    # the sandbox sees read-only, their bin/ on its PATH (docs/environments.md).
    sandbox_tool_dirs: Annotated[tuple[Path, ...], NoDecode] = ()
    # Usage and budgets (docs/goals.md): prices per million tokens, the bot's daily token cap
    # (UTC day; 200k and 2m are accepted), the closing-reply footer, the no-progress limit.
    price_input: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    price_output: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    daily_tokens: int | None = Field(default=_ENGINE.usage.daily_tokens, ge=1)
    usage_footer: Literal["off", "private", "on"] = _ENGINE.usage.footer
    # The max_tokens of a model call when no limit is near; each call reserves it up front.
    max_output_tokens: int = Field(default=_ENGINE.usage.max_output_tokens, ge=1)
    # The plan .md's size limit in KB: a bigger plan is refused where it is written.
    max_plan_kb: int = Field(default=_ENGINE.max_plan_kb, ge=1)
    goal_idle_rounds: int = Field(default=_ENGINE.goal_idle_rounds, ge=1)
    # When bash asks the owner: escalation (only to leave the sandbox; the default with the
    # sandbox on), always (unless an allow rule matches; the default with it off), never.
    bash_approval: BashApproval | None = None
    # Command prefixes that always ask, wherever they stand in a command ("git push,rm -rf").
    ask_bash: Annotated[tuple[Rule, ...], NoDecode] = ()
    # Command prefixes bash runs without asking ("pytest,git status,ls"), as word tuples.
    allow_bash: Annotated[tuple[Rule, ...], NoDecode] = ()
    # Seconds a tool approval waits for the owner before it is denied ("600", "90s", "10m").
    approval_timeout: Annotated[float, NoDecode] = _ENGINE.approval_timeout_s
    # How long a project's setup script may run (docs/environments.md): seconds or 15m.
    setup_timeout: Annotated[float, NoDecode] = _ENGINE.setup_timeout_s
    # Writes to existing workspace files ask too (with a diff) in NoPlan and Active.
    ask_writes: bool = _ENGINE.ask_writes
    # Approvals by different people a plan needs (docs/roles.md), and whether an owner's
    # approval alone is enough all the same.
    plan_approvals: int = Field(default=_ENGINE.plan_approvals, ge=1, le=10)
    owner_overrides: bool = _ENGINE.owner_overrides
    # Files from the phone (docs/inputs.md): the largest upload kept (Telegram's bots can
    # download at most 20 MB, so more than 20 changes nothing), whether the model sees
    # images, the largest photo side used, a reply longer than this many visible characters
    # goes as a summary plus answer.md, and the speech-to-text endpoint for voice notes.
    max_upload_mb: float = Field(default=20.0, gt=0, allow_inf_nan=False)
    model_vision: bool = _ENGINE.vision
    max_image_px: int = Field(default=2048, ge=64)
    reply_document_chars: int = Field(default=6000, ge=500)
    transcribe_model: str = "whisper-1"
    transcribe_base_url: str | None = None
    # Projects (docs/projects.md): named folders, and a folder whose subfolders are projects;
    # the workspace is the default project.
    projects: Annotated[tuple[tuple[str, Path], ...], NoDecode] = ()
    projects_root: Path | None = None
    # Where Push branch pushes a finished plan's branch (a URL or a path; no Merge then).
    git_remote: str | None = None
    # How much plangate logs; DEBUG also keeps the tracebacks of network errors (--debug).
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    @field_validator("log_level", mode="before")
    @classmethod
    def _log_level(cls, value: object) -> object:
        return value.strip().upper() if isinstance(value, str) else value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (
            init_settings,
            _EnvironSource(settings_cls),
            _DotEnvSource(settings_cls),
            file_secret_settings,
        )

    @field_validator("daily_tokens", "task_tokens", mode="before")
    @classmethod
    def _daily_tokens(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        amount = parse_tokens(value)
        if amount is None:
            raise _fail(f"expected a token count like 500000, 500k or 2m, got {_shown(value)}")
        return amount

    @model_validator(mode="after")
    def _prices(self) -> Settings:
        if (self.price_input is None) != (self.price_output is None):
            raise _fail(
                "PLANGATE_PRICE_INPUT and PLANGATE_PRICE_OUTPUT go together: set both or neither"
            )
        return self

    @field_validator("owner_ids", mode="before")
    @classmethod
    def _owner_ids(cls, value: object) -> object:
        return _parse_ids(value, kind="user", positive=True)

    @field_validator("slack_owner_ids", "slack_allowed_channels", mode="before")
    @classmethod
    def _slack_ids(cls, value: object) -> object:
        return _parse_slack_ids(value)

    @field_validator("allowed_chat_ids", mode="before")
    @classmethod
    def _allowed_chat_ids(cls, value: object) -> object:
        return _parse_ids(value, kind="chat", positive=False)

    @field_validator("bash_approval", mode="before")
    @classmethod
    def _bash_approval(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        text = value.strip().lower()
        if not text:
            return None
        if text not in BASH_APPROVALS:
            raise _fail(f"expected one of {', '.join(BASH_APPROVALS)}, got {_shown(value)}")
        return text

    @property
    def bash_approval_mode(self) -> BashApproval:
        """The policy in force: the setting, else the default for the sandbox setting."""
        return self.bash_approval or default_bash_approval(sandbox=self.sandbox == "on")

    @field_validator("allow_bash", "ask_bash", mode="before")
    @classmethod
    def _allow_bash(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        try:
            return parse_rules(value)
        except RuleError as exc:
            raise _fail(
                f"expected comma-separated command prefixes like 'pytest,git status' with no "
                f"shell operators; {exc}"
            ) from None

    @field_validator("approval_timeout", "setup_timeout", mode="before")
    @classmethod
    def _approval_timeout(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        text = value.strip()
        seconds: float | None = parse_interval(text)
        if seconds is None:
            try:
                seconds = float(text)
            except ValueError:
                seconds = None
        if seconds is None or not 0 < seconds < float("inf"):
            raise _fail(f"expected seconds or a duration like 90s, 10m or 1h, got {_shown(value)}")
        return seconds

    @field_validator(
        "telegram_api_url",
        "model_base_url",
        "webhook_url",
        "transcribe_base_url",
        "slack_api_url",
        mode="after",
    )
    @classmethod
    def _urls(cls, value: str | None) -> str | None:
        return _check_http_url(value)

    @field_validator("telegram_token", mode="after")
    @classmethod
    def _token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None:
            return None
        token = value.get_secret_value().strip()
        if not token or any(ch.isspace() for ch in token):
            raise _fail("the token has spaces in it; paste it exactly as @BotFather gave it")
        return SecretStr(token)

    @field_validator("webhook_secret", mode="after")
    @classmethod
    def _webhook_secret(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not _WEBHOOK_SECRET.fullmatch(value.get_secret_value()):
            raise _fail("Telegram accepts 1-256 characters of A-Z, a-z, 0-9, _ and - here")
        return value

    @field_validator("database_url", mode="after")
    @classmethod
    def _database_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not is_postgres_url(value.get_secret_value()):
            raise _fail("a PostgreSQL URL, postgresql://user:password@host:5432/database")
        return value

    @field_validator("webhook_listen", mode="after")
    @classmethod
    def _listen(cls, value: str | None) -> str | None:
        if value is None:
            return None
        host, colon, port = value.strip().rpartition(":")
        if not colon or not host.strip("[]") or not port.isdigit() or not 0 < int(port) < 65536:
            raise _fail(f"expected host:port, e.g. 0.0.0.0:8443, got {_shown(value)}")
        return f"{host}:{int(port)}"

    @field_validator("sandbox", mode="before")
    @classmethod
    def _sandbox(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("secret_files", mode="before")
    @classmethod
    def _secret_files(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        names = tuple(name.strip() for name in value.split(",") if name.strip())
        for name in names:
            parts = Path(name).parts
            if ".." in parts or name in (".", "/"):
                raise _fail(
                    f"expected file paths separated by commas, without '..', got {_shown(name)}"
                )
        return names

    @field_validator("sandbox_tool_dirs", mode="before")
    @classmethod
    def _sandbox_tool_dirs(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        names = tuple(name.strip() for name in value.split(",") if name.strip())
        for name in names:
            path = Path(name)
            if not path.is_absolute() or ".." in path.parts or name == "/":
                raise _fail(
                    f"expected absolute folders separated by commas (not /), got {_shown(name)}"
                )
        return tuple(Path(name) for name in names)

    @field_validator("bash_env", mode="before")
    @classmethod
    def _bash_env(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        names = tuple(name.strip() for name in value.split(",") if name.strip())
        for name in names:
            if not _ENV_NAME.fullmatch(name):
                raise _fail(f"expected variable names separated by commas, got {_shown(name)}")
            if forbidden_env_name(name):
                raise _fail(
                    f"{name} looks like a secret (PLANGATE_*, or TOKEN/KEY/SECRET/PASSWORD in "
                    "the name) and is never passed to bash"
                )
        return names

    @field_validator("home", mode="after")
    @classmethod
    def _home(cls, value: Path) -> Path:
        return value.expanduser().absolute()

    @field_validator("workspace", mode="after")
    @classmethod
    def _workspace(cls, value: Path) -> Path:
        folder = value.expanduser().resolve()
        if not folder.is_dir():
            raise _fail(f"expected an existing folder, got {_shown(str(value))}")
        return folder

    @field_validator("projects", mode="before")
    @classmethod
    def _projects(cls, value: object) -> object:
        return _parse_projects(value)

    @field_validator("projects_root", mode="after")
    @classmethod
    def _projects_root(cls, value: Path | None) -> Path | None:
        if value is None:
            return None
        folder = value.expanduser().resolve()
        if not folder.is_dir():
            raise _fail(f"expected an existing folder, got {_shown(str(value))}")
        return folder

    @field_validator("git_remote", mode="after")
    @classmethod
    def _git_remote(cls, value: str | None) -> str | None:
        if value is None:
            return None
        text = value.strip()
        # A remote starting with "-" would be read by git as an option.
        if not text or text.startswith("-") or any(ch.isspace() or ord(ch) < 32 for ch in text):
            raise _fail(f"expected a git remote URL or path with no spaces, got {_shown(value)}")
        return text

    @field_validator("profile", mode="after")
    @classmethod
    def _profile(cls, value: str | None) -> str | None:
        if value is not None and not _PROFILE.fullmatch(value):
            raise _fail(
                f"expected a plain name (letters, digits, '.', '_', '-'), got {_shown(value)}"
            )
        return value

    @model_validator(mode="after")
    def _placeholder_key(self) -> Settings:
        if self.model_base_url and self.model_api_key is None:
            self.model_api_key = SecretStr(PLACEHOLDER_MODEL_API_KEY)
        return self


_SECRET_FIELDS = frozenset(
    {
        "telegram_token",
        "model_api_key",
        "webhook_secret",
        "slack_bot_token",
        "slack_app_token",
        "slack_signing_secret",
        "database_url",
    }
)


def env_name(field: str) -> str:
    """The variable that sets ``field`` (the primary one when it has aliases)."""
    info = Settings.model_fields.get(field)
    if info is not None and isinstance(info.validation_alias, AliasChoices):
        first = info.validation_alias.choices[0]
        if isinstance(first, str):
            return first
    return PREFIX + field.upper()


def _field_for(loc: tuple[int | str, ...]) -> str:
    if not loc:
        return ""
    head = str(loc[0]).lower()
    for name, info in Settings.model_fields.items():
        aliases = info.validation_alias
        choices = aliases.choices if isinstance(aliases, AliasChoices) else []
        if head == name or head in {str(c).lower() for c in choices}:
            return name
    return head


def _one_line(exc: ValidationError) -> str:
    """The first error as ``VARIABLE: what was wrong[, got 'value']``; secrets never quoted."""
    lines = []
    for error in exc.errors(include_url=False):
        field = _field_for(error["loc"])
        name = env_name(field) if field in Settings.model_fields else str(field) or "settings"
        message = error["msg"]
        if error["type"] != "plangate":
            message = message[:1].lower() + message[1:]
            if error["type"] == "missing":
                message = "not set"
            elif field not in _SECRET_FIELDS:
                message = f"{message}, got {_shown(error['input'])}"
        lines.append(f"{name}: {message}")
    first = lines[0] if lines else "settings: invalid"
    more = len(lines) - 1
    text = first if not more else f"{first} (and {more} more: {'; '.join(lines[1:])})"
    return " ".join(text.split())


def work_folders(settings: Settings) -> list[tuple[str, Path]]:
    """``(label, folder)`` of every folder the agent may write: the workspace, the projects,
    the projects' root and the plans' worktrees under the home."""
    found = [("the workspace (PLANGATE_WORKSPACE)", settings.workspace)]
    found += [(f"project {name} (PLANGATE_PROJECTS)", path) for name, path in settings.projects]
    if settings.projects_root is not None:
        found.append(("the projects' folder (PLANGATE_PROJECTS_ROOT)", settings.projects_root))
    found.append(("the plans' worktrees", settings.home / "worktrees"))
    return found


def dotenv_refusal(env_file: Path, *seen: Settings) -> str | None:
    """One line refusing ``env_file`` when it lies in a folder the agent may write, as any of
    ``seen`` names them (the settings with the file and without it: a ``.env`` that moves
    the workspace away from itself is caught by the second)."""
    path = Path(os.path.realpath(env_file))
    for settings in seen:
        for label, folder in work_folders(settings):
            root = Path(os.path.realpath(folder))
            if path == root or root in path.parents:
                return (
                    f"{path}: a settings file inside {label} {root} is refused, since the "
                    "agent can write it; put the settings in the environment, or in a .env in a "
                    "folder that is no workspace or project (plangate's home, for one) and start "
                    "plangate from there"
                )
    return None


def config_path(environ: Mapping[str, str] | None = None) -> Path:
    """The settings file ``plangate setup`` writes: ``config.env`` in plangate's home, the home
    taken from ``PLANGATE_HOME`` in the environment (default ``~/.plangate``)."""
    env = os.environ if environ is None else environ
    return Path(env.get(f"{PREFIX}HOME") or DEFAULT_HOME).expanduser() / CONFIG_FILE


def load_settings(
    environ: Mapping[str, str] | None = None,
    *,
    env_file: str | None = ".env",
    config_file: Path | None = None,
) -> Settings:
    """Read settings from ``environ`` (default ``os.environ``), then ``env_file``, then
    ``config_file`` (``plangate setup``'s file): the first that names a setting wins.

    Raises :class:`ConfigError` with one line naming the variable that is missing or wrong,
    or refusing an ``env_file`` that lies where the agent can write (:func:`dotenv_refusal`).
    """
    files = tuple(Path(f) for f in (config_file, env_file) if f is not None)  # later win
    token = _ENVIRON.set(environ)
    files_token = _ENV_FILES.set(files)
    try:
        settings = Settings()
        if env_file is not None and Path(env_file).is_file():
            _ENV_FILES.set(files[:-1])
            try:
                bare = Settings()
            except ValidationError:
                bare = settings
            refusal = dotenv_refusal(Path(env_file), settings, bare)
            if refusal is not None:
                raise ConfigError(refusal)
        return settings
    except ValidationError as exc:
        raise ConfigError(_one_line(exc)) from None
    except SettingsError as exc:
        raise ConfigError(" ".join(str(exc).split())) from None
    except (OSError, UnicodeDecodeError) as exc:
        where = getattr(exc, "filename", None) or env_file
        raise ConfigError(f"{where}: cannot be read ({type(exc).__name__})") from None
    finally:
        _ENV_FILES.reset(files_token)
        _ENVIRON.reset(token)


def setting_names() -> frozenset[str]:
    """Every ``PLANGATE_*`` variable some setting reads (aliases included)."""
    names = set()
    for field, info in Settings.model_fields.items():
        names.add(PREFIX + field.upper())
        if isinstance(info.validation_alias, AliasChoices):
            names |= {c.upper() for c in info.validation_alias.choices if isinstance(c, str)}
    return frozenset(n for n in names if n.startswith(PREFIX))


def unknown_names(names: Iterable[str]) -> list[str]:
    """One line per ``PLANGATE_*`` name no setting reads, with the nearest setting's name: a
    typo (``PLANGATE_MODLE``) would otherwise be ignored without a word."""
    known = setting_names()
    lines = []
    for name in sorted({n.upper() for n in names if n.upper().startswith(PREFIX)} - known):
        near = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
        hint = f" (did you mean {near[0]}?)" if near else ""
        lines.append(f"{name} is not a plangate setting{hint}; it is ignored")
    return lines


def env_file_problem(path: Path) -> str | None:
    """One line naming the file and the line when ``path`` has a line that is not
    ``NAME=value`` (a comment, a blank or an ``export NAME=value`` is fine), or when it is no
    regular readable file (:func:`read_settings_file`); None otherwise."""
    from dotenv.parser import parse_stream

    try:
        text = read_settings_file(path)
    except ConfigError as exc:
        return str(exc)
    for binding in parse_stream(io.StringIO(text or "")):
        if binding.error:
            first = binding.original.string.strip().splitlines()[0:1] or [""]
            return (
                f"{path}:{binding.original.line}: cannot read this line "
                f"({clip(first[0], 40)!r}); expected NAME=value"
            )
    return None


def _env_file_names(path: Path) -> list[str]:
    from dotenv import dotenv_values

    try:
        text = read_settings_file(path)
    except ConfigError:
        return []
    return [k for k in dotenv_values(stream=io.StringIO(text or "")) if k]


def settings_warnings(
    environ: Mapping[str, str] | None = None, files: Sequence[Path] = ()
) -> list[str]:
    """What ``run`` and ``doctor`` warn about before starting: unknown ``PLANGATE_*`` names in
    the environment and in the settings files."""
    env = os.environ if environ is None else environ
    names = list(env)
    for path in files:
        names += _env_file_names(path)
    return unknown_names(names)


def load_run_settings() -> Settings:
    """The settings ``run``, ``doctor`` and ``health`` use: the environment, a ``.env`` in the
    current folder, then ``<home>/config.env``."""
    files = [config_path(), Path(".env")]
    for path in files:
        problem = env_file_problem(path)
        if problem is not None:
            raise ConfigError(problem)
    # python-dotenv's own warning names neither the setting nor plangate; ours came first.
    logging.getLogger("dotenv.main").setLevel(logging.ERROR)
    return load_settings(config_file=files[0])


def run_problems(settings: Settings) -> list[str]:
    """What ``plangate run`` still needs, one line each (empty when it can start): Telegram's
    token or Slack's, and for each channel served, its owners (and Slack's way in)."""
    problems = []
    if settings.telegram_token is None and settings.slack_bot_token is None:
        problems.append(
            f"{env_name('telegram_token')}: not set; `plangate run` needs the bot token from "
            "@BotFather (TELEGRAM_BOT_TOKEN works too), or PLANGATE_SLACK_BOT_TOKEN for Slack"
        )
    if not settings.owner_ids and (
        settings.telegram_token is not None or settings.slack_bot_token is None
    ):
        problems.append(
            f"{env_name('owner_ids')}: not set; `plangate run` needs at least one owner's "
            "Telegram user id (comma-separated or a JSON list)"
        )
    if settings.slack_bot_token is not None:
        if not settings.slack_owner_ids:
            problems.append(
                "PLANGATE_SLACK_OWNER_IDS: not set; Slack needs at least one owner's user id "
                "(U01ABCDEF; in Slack: the profile's ⋮ menu, Copy member ID)"
            )
        if settings.slack_listen is None and settings.slack_app_token is None:
            problems.append(
                "PLANGATE_SLACK_APP_TOKEN: not set; Socket Mode needs the app-level token "
                "(xapp-...), or set PLANGATE_SLACK_LISTEN to receive events over HTTP"
            )
        if settings.slack_listen is not None and settings.slack_signing_secret is None:
            problems.append(
                "PLANGATE_SLACK_SIGNING_SECRET: not set; events over HTTP "
                "(PLANGATE_SLACK_LISTEN) are checked with the app's signing secret"
            )
    return problems


def require_run_settings(settings: Settings) -> None:
    """Raise :class:`ConfigError` with the first of :func:`run_problems`, if any."""
    problems = run_problems(settings)
    if problems:
        raise ConfigError(problems[0])


__all__ = [
    "DEFAULT_TELEGRAM_API_URL",
    "PLACEHOLDER_MODEL_API_KEY",
    "Settings",
    "dotenv_refusal",
    "env_name",
    "load_settings",
    "require_run_settings",
    "run_problems",
    "work_folders",
]
