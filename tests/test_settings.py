"""bot.settings: every variable, both list forms, aliases, .env, one-line errors, no secret
ever shown."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bot.runner import engine_config, sandbox_settings, transcriber_from_settings
from bot.settings import (
    DEFAULT_TELEGRAM_API_URL,
    PLACEHOLDER_MODEL_API_KEY,
    Settings,
    load_settings,
    require_run_settings,
    run_problems,
)
from engine.errors import ConfigError

TOKEN = "123456:AAE-secret_token"
KEY = "sk-very-secret"


def load(env: dict[str, str]) -> Settings:
    return load_settings(env, env_file=None)


def error_of(env: dict[str, str], env_file: str | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        load_settings(env, env_file=env_file)
    text = str(caught.value)
    assert "\n" not in text
    return text


def test_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    s = load({})
    assert s.telegram_token is None
    assert s.telegram_api_url == DEFAULT_TELEGRAM_API_URL == "https://api.telegram.org/bot"
    assert (s.owner_ids, s.allowed_chat_ids) == ((), ())
    assert s.home == tmp_path / "user" / ".plangate"
    assert s.workspace == tmp_path.resolve()
    assert (s.profile, s.model_base_url, s.model_api_key) == (None, None, None)
    assert (s.goal_max_rounds, s.todo_parallel, s.max_steps) == (20, True, 50)
    assert s.flow_edit_interval == 1.5
    assert (s.webhook_url, s.webhook_secret, s.webhook_listen) == (None, None, None)
    assert (s.replica_id, s.lease_ttl) == (None, 30.0)


def test_replica_settings_are_read_and_checked() -> None:
    s = load({"PLANGATE_REPLICA_ID": "web-2", "PLANGATE_LEASE_TTL": "4.5"})
    assert (s.replica_id, s.lease_ttl) == ("web-2", 4.5)
    assert "PLANGATE_LEASE_TTL" in error_of({"PLANGATE_LEASE_TTL": "0.5"})
    assert "PLANGATE_LEASE_TTL" in error_of({"PLANGATE_LEASE_TTL": "inf"})
    assert "PLANGATE_REPLICA_ID" in error_of({"PLANGATE_REPLICA_ID": "x" * 201})


def test_every_variable_is_read(tmp_path: Path) -> None:
    s = load(
        {
            "PLANGATE_TELEGRAM_TOKEN": TOKEN,
            "PLANGATE_TELEGRAM_API_URL": "http://127.0.0.1:8081/bot",
            "PLANGATE_OWNER_IDS": "11,22",
            "PLANGATE_ALLOWED_CHAT_IDS": "[-1001, -1002]",
            "PLANGATE_HOME": str(tmp_path / "home"),
            "PLANGATE_WORKSPACE": str(tmp_path),
            "PLANGATE_PROFILE": "work",
            "PLANGATE_MODEL": "qwen2.5-coder",
            "PLANGATE_MODEL_BASE_URL": "http://localhost:11434/v1",
            "PLANGATE_MODEL_API_KEY": KEY,
            "PLANGATE_GOAL_MAX_ROUNDS": "7",
            "PLANGATE_TODO_PARALLEL": "false",
            "PLANGATE_MAX_STEPS": "12",
            "PLANGATE_FLOW_EDIT_INTERVAL": "0.25",
            "PLANGATE_WEBHOOK_URL": "https://bot.example.com/tg",
            "PLANGATE_WEBHOOK_SECRET": "s3cr3t_-X",
            "PLANGATE_WEBHOOK_LISTEN": "127.0.0.1:8443",
        }
    )
    assert s.telegram_token is not None and s.telegram_token.get_secret_value() == TOKEN
    assert s.telegram_api_url == "http://127.0.0.1:8081/bot"
    assert (s.owner_ids, s.allowed_chat_ids) == ((11, 22), (-1001, -1002))
    assert (s.home, s.workspace, s.profile) == (tmp_path / "home", tmp_path.resolve(), "work")
    assert (s.model, s.model_base_url) == ("qwen2.5-coder", "http://localhost:11434/v1")
    assert s.model_api_key is not None and s.model_api_key.get_secret_value() == KEY
    assert (s.goal_max_rounds, s.todo_parallel, s.max_steps) == (7, False, 12)
    assert s.flow_edit_interval == 0.25
    assert s.webhook_url == "https://bot.example.com/tg"
    assert s.webhook_secret is not None and s.webhook_secret.get_secret_value() == "s3cr3t_-X"
    assert s.webhook_listen == "127.0.0.1:8443"


@pytest.mark.parametrize(
    ("raw", "ids"),
    [
        ("42", (42,)),
        ("1, 2 ,3", (1, 2, 3)),
        ("1,2,", (1, 2)),
        ("[5, 6]", (5, 6)),
        (" [ ] ", ()),
    ],
)
def test_id_lists_take_json_or_commas(raw: str, ids: tuple[int, ...]) -> None:
    assert load({"PLANGATE_OWNER_IDS": raw}).owner_ids == ids
    assert load({"PLANGATE_ALLOWED_CHAT_IDS": raw}).allowed_chat_ids == ids


def test_chat_ids_may_be_negative_owner_ids_may_not() -> None:
    assert load({"PLANGATE_ALLOWED_CHAT_IDS": "-100123,-5"}).allowed_chat_ids == (-100123, -5)
    assert error_of({"PLANGATE_OWNER_IDS": "12,-100123"}) == (
        "PLANGATE_OWNER_IDS: user ids are positive numbers, got '12,-100123' "
        "(a group's id belongs in PLANGATE_ALLOWED_CHAT_IDS)"
    )


@pytest.mark.parametrize("raw", ["abc", "1;2", "1,,x", "[1, 2", '["1"]', "[true]", "1.5", "1_000"])
def test_malformed_id_lists_name_the_variable(raw: str) -> None:
    assert error_of({"PLANGATE_OWNER_IDS": raw}) == (
        f"PLANGATE_OWNER_IDS: expected user ids as a JSON list or comma-separated integers, "
        f"got {raw!r}"
    )
    assert error_of({"PLANGATE_ALLOWED_CHAT_IDS": raw}).startswith(
        "PLANGATE_ALLOWED_CHAT_IDS: expected chat ids as a JSON list"
    )


def test_aliases_and_which_name_wins() -> None:
    s = load({"TELEGRAM_BOT_TOKEN": TOKEN, "OPENAI_API_KEY": KEY})
    assert s.telegram_token is not None and s.telegram_token.get_secret_value() == TOKEN
    assert s.model_api_key is not None and s.model_api_key.get_secret_value() == KEY
    both = load(
        {
            "PLANGATE_TELEGRAM_TOKEN": "1:plangate",
            "TELEGRAM_BOT_TOKEN": "2:generic",
            "PLANGATE_MODEL_API_KEY": "sk-plangate",
            "OPENAI_API_KEY": "sk-generic",
        }
    )
    assert both.telegram_token is not None
    assert both.telegram_token.get_secret_value() == "1:plangate"
    assert both.model_api_key is not None
    assert both.model_api_key.get_secret_value() == "sk-plangate"


def test_the_process_environment_is_read_unless_a_mapping_is_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PLANGATE_MAX_STEPS", "3")
    assert load_settings(env_file=None).max_steps == 3
    assert load({}).max_steps == 50


def test_names_are_case_insensitive_and_empty_means_unset() -> None:
    s = load({"plangate_owner_ids": "9", "PLANGATE_PROFILE": "", "PLANGATE_MAX_STEPS": ""})
    assert (s.owner_ids, s.profile, s.max_steps) == ((9,), None, 50)


def test_a_base_url_without_a_key_gets_a_placeholder_key() -> None:
    s = load({"PLANGATE_MODEL_BASE_URL": "http://localhost:8000/v1"})
    assert s.model_api_key is not None
    assert s.model_api_key.get_secret_value() == PLACEHOLDER_MODEL_API_KEY
    assert load({}).model_api_key is None  # no base URL: the key stays missing


def test_dot_env_is_read_and_the_environment_wins(tmp_path: Path) -> None:
    env_file = tmp_path / "conf.env"
    env_file.write_text(
        f"TELEGRAM_BOT_TOKEN={TOKEN}\nPLANGATE_OWNER_IDS=1,2\nPLANGATE_MAX_STEPS=9\n"
        "UNRELATED=1\nPLANGATE_NOT_A_SETTING=x\n"
    )
    s = load_settings({"PLANGATE_MAX_STEPS": "30"}, env_file=str(env_file))
    assert s.telegram_token is not None and s.telegram_token.get_secret_value() == TOKEN
    assert (s.owner_ids, s.max_steps) == ((1, 2), 30)
    assert load_settings({}, env_file=str(tmp_path / "absent.env")).owner_ids == ()
    assert load_settings({}, env_file=None).telegram_token is None


def test_dot_env_defaults_to_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / ".env").write_text("PLANGATE_PROFILE=fromdotenv\n")
    monkeypatch.chdir(tmp_path)
    workspace = tmp_path / "work"  # a folder that is no workspace holds the settings
    workspace.mkdir()
    assert load_settings({"PLANGATE_WORKSPACE": str(workspace)}).profile == "fromdotenv"


def test_a_malformed_dot_env_value_names_the_variable(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("PLANGATE_GOAL_MAX_ROUNDS=lots\n")
    assert error_of({}, env_file=str(env_file)) == (
        "PLANGATE_GOAL_MAX_ROUNDS: input should be a valid integer, unable to parse string as "
        "an integer, got 'lots'"
    )


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"PLANGATE_GOAL_MAX_ROUNDS": "0"}, "PLANGATE_GOAL_MAX_ROUNDS: input should be greater"),
        ({"PLANGATE_MAX_STEPS": "-1"}, "PLANGATE_MAX_STEPS: input should be greater"),
        (
            {"PLANGATE_TODO_PARALLEL": "maybe"},
            "PLANGATE_TODO_PARALLEL: input should be a valid boolean",
        ),
        (
            {"PLANGATE_FLOW_EDIT_INTERVAL": "0"},
            "PLANGATE_FLOW_EDIT_INTERVAL: input should be greater than 0",
        ),
        (
            {"PLANGATE_FLOW_EDIT_INTERVAL": "inf"},
            "PLANGATE_FLOW_EDIT_INTERVAL: input should be a finite",
        ),
        (
            {"PLANGATE_WEBHOOK_LISTEN": "8443"},
            "PLANGATE_WEBHOOK_LISTEN: expected host:port, e.g. 0.0.0.0:8443, got '8443'",
        ),
        ({"PLANGATE_WEBHOOK_LISTEN": "host:99999"}, "PLANGATE_WEBHOOK_LISTEN: expected host:port"),
        ({"PLANGATE_WEBHOOK_LISTEN": ":80"}, "PLANGATE_WEBHOOK_LISTEN: expected host:port"),
        (
            {"PLANGATE_WEBHOOK_URL": "bot.example.com"},
            "PLANGATE_WEBHOOK_URL: expected an http:// or https:// URL, got 'bot.example.com'",
        ),
        (
            {"PLANGATE_TELEGRAM_API_URL": "ftp://x/bot"},
            "PLANGATE_TELEGRAM_API_URL: expected an http:// or https:// URL",
        ),
        (
            {"PLANGATE_MODEL_BASE_URL": "localhost:11434"},
            "PLANGATE_MODEL_BASE_URL: expected an http",
        ),
        (
            {"PLANGATE_WORKSPACE": "/no/such/folder"},
            "PLANGATE_WORKSPACE: expected an existing folder, got '/no/such/folder'",
        ),
        ({"PLANGATE_PROFILE": "../etc"}, "PLANGATE_PROFILE: expected a plain name"),
    ],
)
def test_each_mistake_is_one_line_naming_the_variable(env: dict[str, str], expected: str) -> None:
    assert error_of(env).startswith(expected)


def test_listen_accepts_ipv6_and_normalises_the_port() -> None:
    assert load({"PLANGATE_WEBHOOK_LISTEN": "[::]:08443"}).webhook_listen == "[::]:8443"


def test_several_mistakes_stay_on_one_line() -> None:
    text = error_of({"PLANGATE_MAX_STEPS": "x", "PLANGATE_OWNER_IDS": "y"})
    assert text.count("PLANGATE_") >= 2 and "(and 1 more: " in text


def test_secrets_never_show(tmp_path: Path) -> None:
    s = load(
        {
            "PLANGATE_TELEGRAM_TOKEN": TOKEN,
            "PLANGATE_MODEL_API_KEY": KEY,
            "PLANGATE_WEBHOOK_SECRET": "hooksecret",
        }
    )
    for shown in (repr(s), str(s), s.model_dump_json(), str(s.model_dump())):
        assert TOKEN not in shown and KEY not in shown and "hooksecret" not in shown
    bad_token = "123:has a space"
    text = error_of({"PLANGATE_TELEGRAM_TOKEN": bad_token, "PLANGATE_MAX_STEPS": "x"})
    assert text.startswith("PLANGATE_TELEGRAM_TOKEN: the token has spaces in it")
    assert bad_token not in text and "has a space" not in text
    bad_secret = "no spaces allowed here!"
    text = error_of({"PLANGATE_WEBHOOK_SECRET": bad_secret})
    assert text.startswith("PLANGATE_WEBHOOK_SECRET: Telegram accepts 1-256 characters")
    assert bad_secret not in text


def test_run_needs_a_token_and_an_owner() -> None:
    bare = load({})
    problems = run_problems(bare)
    assert [p.split(":")[0] for p in problems] == [
        "PLANGATE_TELEGRAM_TOKEN",
        "PLANGATE_OWNER_IDS",
    ]
    assert all("\n" not in p for p in problems)
    with pytest.raises(ConfigError, match=r"^PLANGATE_TELEGRAM_TOKEN: not set; `plangate run`"):
        require_run_settings(bare)
    no_owner = load({"TELEGRAM_BOT_TOKEN": TOKEN})
    with pytest.raises(ConfigError, match=r"^PLANGATE_OWNER_IDS: not set; .*at least one owner"):
        require_run_settings(no_owner)
    ready = load({"TELEGRAM_BOT_TOKEN": TOKEN, "PLANGATE_OWNER_IDS": "7"})
    assert run_problems(ready) == []
    require_run_settings(ready)


def test_sandbox_settings_are_read_and_secret_names_refused() -> None:
    s = load(
        {
            "PLANGATE_SANDBOX": "OFF",
            "PLANGATE_BASH_NETWORK": "true",
            "PLANGATE_BASH_MEMORY_MB": "4096",
            "PLANGATE_BASH_MAX_PROCESSES": "64",
            "PLANGATE_BASH_ENV": "GOPATH, CARGO_HOME",
        }
    )
    assert (s.sandbox, s.bash_network, s.bash_memory_mb, s.bash_max_processes) == (
        "off",
        True,
        4096,
        64,
    )
    assert s.bash_env == ("GOPATH", "CARGO_HOME")
    assert load({}).sandbox == "on" and load({}).bash_memory_mb == 2048
    for secret in ("PLANGATE_TELEGRAM_TOKEN", "GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY"):
        text = error_of({"PLANGATE_BASH_ENV": f"PATHX,{secret}"})
        assert "PLANGATE_BASH_ENV" in text and "never passed to bash" in text
    assert "PLANGATE_SANDBOX" in error_of({"PLANGATE_SANDBOX": "maybe"})


def test_secret_files_are_hidden_from_every_tool(tmp_path: Path) -> None:
    s = load({"PLANGATE_SECRET_FILES": f".env.production, config/secrets.yml,{tmp_path}/key"})
    assert s.secret_files == (".env.production", "config/secrets.yml", f"{tmp_path}/key")
    sandbox = sandbox_settings(s)
    assert sandbox.hidden_names == (".env.production", "config/secrets.yml")
    assert tmp_path / "key" in sandbox.hidden and s.home in sandbox.hidden
    assert load({}).secret_files == ()
    text = error_of({"PLANGATE_SECRET_FILES": "ok.txt,../up.txt"})
    assert "PLANGATE_SECRET_FILES" in text and "without '..'" in text


def test_approval_settings_rules_and_timeout() -> None:
    s = load({})
    assert s.allow_bash == () and s.approval_timeout == 600.0
    s = load({"PLANGATE_ALLOW_BASH": "pytest, git status,,ls", "PLANGATE_APPROVAL_TIMEOUT": "10m"})
    assert s.allow_bash == (("pytest",), ("git", "status"), ("ls",))
    assert s.approval_timeout == 600.0
    assert load({"PLANGATE_APPROVAL_TIMEOUT": "90"}).approval_timeout == 90.0
    assert load({"PLANGATE_APPROVAL_TIMEOUT": "2.5"}).approval_timeout == 2.5
    assert load({"PLANGATE_APPROVAL_TIMEOUT": "1h"}).approval_timeout == 3600.0
    assert s.ask_writes is False
    assert load({"PLANGATE_ASK_WRITES": "true"}).ask_writes is True


def test_the_bash_approval_mode_defaults_to_the_sandbox_setting() -> None:
    assert load({}).bash_approval_mode == "escalation"
    assert load({"PLANGATE_SANDBOX": "off"}).bash_approval_mode == "always"
    assert load({"PLANGATE_BASH_APPROVAL": " Never "}).bash_approval_mode == "never"
    chosen = load({"PLANGATE_SANDBOX": "off", "PLANGATE_BASH_APPROVAL": "escalation"})
    assert chosen.bash_approval_mode == "escalation"
    s = load({"PLANGATE_ASK_BASH": "git push, rm -rf"})
    assert s.ask_bash == (("git", "push"), ("rm", "-rf"))
    config = engine_config(s)
    assert config.bash_approval == "escalation" and config.ask_bash == s.ask_bash


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"PLANGATE_ALLOW_BASH": "ls;rm"}, r"^PLANGATE_ALLOW_BASH: expected comma-separated"),
        ({"PLANGATE_ALLOW_BASH": "echo $(id)"}, r"^PLANGATE_ALLOW_BASH: .*no shell operators"),
        ({"PLANGATE_APPROVAL_TIMEOUT": "soon"}, r"^PLANGATE_APPROVAL_TIMEOUT: expected seconds"),
        ({"PLANGATE_APPROVAL_TIMEOUT": "0"}, r"^PLANGATE_APPROVAL_TIMEOUT: expected seconds"),
        ({"PLANGATE_APPROVAL_TIMEOUT": "inf"}, r"^PLANGATE_APPROVAL_TIMEOUT: expected seconds"),
        ({"PLANGATE_APPROVAL_TIMEOUT": "-5m"}, r"^PLANGATE_APPROVAL_TIMEOUT: expected seconds"),
        ({"PLANGATE_BASH_APPROVAL": "sometimes"}, r"^PLANGATE_BASH_APPROVAL: expected one of"),
        ({"PLANGATE_ASK_BASH": "git push;x"}, r"^PLANGATE_ASK_BASH: expected comma-separated"),
    ],
)
def test_bad_approval_settings_name_the_variable(env: dict[str, str], expected: str) -> None:
    assert re.search(expected, error_of(env))


def test_plan_approvals_and_owner_overrides() -> None:
    s = load({})
    assert s.plan_approvals == 1 and s.owner_overrides is False
    s = load({"PLANGATE_PLAN_APPROVALS": "2", "PLANGATE_OWNER_OVERRIDES": "true"})
    assert s.plan_approvals == 2 and s.owner_overrides is True
    assert "PLANGATE_PLAN_APPROVALS" in error_of({"PLANGATE_PLAN_APPROVALS": "0"})
    assert "PLANGATE_PLAN_APPROVALS" in error_of({"PLANGATE_PLAN_APPROVALS": "two"})
    assert "PLANGATE_OWNER_OVERRIDES" in error_of({"PLANGATE_OWNER_OVERRIDES": "maybe"})


def test_the_stuck_settings_and_the_old_stall_name() -> None:
    s = load({})
    assert (s.stuck_repeats, s.stuck_errors, s.stuck_monologue) == (4, 3, 3)
    assert (s.progress_steps, s.progress_minutes, s.task_tokens) == (60, 30.0, None)
    tuned = load(
        {
            "PLANGATE_STUCK_REPEATS": "5",
            "PLANGATE_PROGRESS_STEPS": "90",
            "PLANGATE_PROGRESS_MINUTES": "45",
            "PLANGATE_TASK_TOKENS": "200k",
        }
    )
    assert (tuned.stuck_repeats, tuned.progress_steps) == (5, 90)
    assert (tuned.progress_minutes, tuned.task_tokens) == (45.0, 200_000)
    # The old name still sets the outer bound; the new one wins when both are set.
    assert load({"PLANGATE_CHECKLIST_STALL_STEPS": "40"}).progress_steps == 40
    both = {"PLANGATE_PROGRESS_STEPS": "70", "PLANGATE_CHECKLIST_STALL_STEPS": "40"}
    assert load(both).progress_steps == 70
    assert error_of({"PLANGATE_TASK_TOKENS": "lots"}).startswith(
        "PLANGATE_TASK_TOKENS: expected a token count"
    )
    assert error_of({"PLANGATE_STUCK_REPEATS": "1"}).startswith("PLANGATE_STUCK_REPEATS: input")


def test_projects_take_pairs_json_or_a_root(tmp_path: Path) -> None:
    api, web = tmp_path / "api", tmp_path / "web"
    api.mkdir()
    web.mkdir()
    want = (("api", api.resolve()), ("web", web.resolve()))
    for raw in (
        f"api={api}, web={web}",
        json.dumps({"api": str(api), "web": str(web)}),
        json.dumps([f"api={api}", f"web={web}"]),
    ):
        assert load({"PLANGATE_PROJECTS": raw}).projects == want
    root = load({"PLANGATE_PROJECTS_ROOT": str(tmp_path)})
    assert root.projects_root == tmp_path.resolve()
    assert load({"PLANGATE_GIT_REMOTE": " /srv/git/app.git "}).git_remote == "/srv/git/app.git"


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ("api", "expected name=path pairs"),
        ("api=/no/such/folder", "project api: expected an existing folder"),
        ("bad name=/tmp", "a project name is letters"),
        ("a=/tmp,a=/tmp", "given twice"),
        ('{"a": 1}', "expected name=path pairs"),
    ],
)
def test_bad_projects_name_the_variable(raw: str, says: str) -> None:
    with pytest.raises(ConfigError) as err:
        load({"PLANGATE_PROJECTS": raw})
    assert str(err.value).startswith("PLANGATE_PROJECTS: ") and says in str(err.value)


def test_a_remote_that_reads_as_an_option_is_refused() -> None:
    with pytest.raises(ConfigError, match="PLANGATE_GIT_REMOTE: expected a git remote"):
        load({"PLANGATE_GIT_REMOTE": "--upload-pack=touch x"})


def test_input_settings_defaults_values_and_errors() -> None:
    s = load({})
    assert (s.max_upload_mb, s.model_vision, s.max_image_px) == (20.0, False, 2048)
    assert (s.reply_document_chars, s.transcribe_model, s.transcribe_base_url) == (
        6000,
        "whisper-1",
        None,
    )
    s = load(
        {
            "PLANGATE_MAX_UPLOAD_MB": "5",
            "PLANGATE_MODEL_VISION": "true",
            "PLANGATE_MAX_IMAGE_PX": "1280",
            "PLANGATE_REPLY_DOCUMENT_CHARS": "9000",
            "PLANGATE_TRANSCRIBE_MODEL": "off",
            "PLANGATE_TRANSCRIBE_BASE_URL": "http://127.0.0.1:9000/v1",
        }
    )
    assert (s.max_upload_mb, s.model_vision, s.max_image_px) == (5.0, True, 1280)
    assert (s.reply_document_chars, s.transcribe_model) == (9000, "off")
    assert s.transcribe_base_url == "http://127.0.0.1:9000/v1"
    for env, name in [
        ({"PLANGATE_MAX_UPLOAD_MB": "0"}, "PLANGATE_MAX_UPLOAD_MB"),
        ({"PLANGATE_MAX_IMAGE_PX": "10"}, "PLANGATE_MAX_IMAGE_PX"),
        ({"PLANGATE_REPLY_DOCUMENT_CHARS": "many"}, "PLANGATE_REPLY_DOCUMENT_CHARS"),
        ({"PLANGATE_TRANSCRIBE_BASE_URL": "ftp://x"}, "PLANGATE_TRANSCRIBE_BASE_URL"),
    ]:
        with pytest.raises(ConfigError) as err:
            load(env)
        assert str(err.value).startswith(name)


async def test_the_transcriber_follows_the_model_unless_told_otherwise() -> None:
    assert transcriber_from_settings(load({"PLANGATE_TRANSCRIBE_MODEL": "off"})) is None
    assert transcriber_from_settings(load({})) is None  # no key, no server: nowhere to send
    local = transcriber_from_settings(load({"PLANGATE_MODEL_BASE_URL": "http://127.0.0.1:1/v1"}))
    assert local is not None and local.base_url == "http://127.0.0.1:1/v1"
    other = transcriber_from_settings(
        load(
            {
                "PLANGATE_MODEL_API_KEY": "sk-test",
                "PLANGATE_TRANSCRIBE_BASE_URL": "http://127.0.0.1:2/v1",
                "PLANGATE_TRANSCRIBE_MODEL": "large-v3",
            }
        )
    )
    assert other is not None and other.base_url == "http://127.0.0.1:2/v1"
    assert other.model == "large-v3" and "sk-test" not in repr(other)
    openai_default = transcriber_from_settings(load({"PLANGATE_MODEL_API_KEY": "sk-test"}))
    assert openai_default is not None and openai_default.base_url == "https://api.openai.com/v1"
    for made in (local, other, openai_default):
        await made.aclose()


def test_every_default_the_engine_reads_is_the_engines_own() -> None:
    # Defaults live once, on the engine's configuration: with nothing set, the settings give
    # the engine exactly its defaults (only what a running bot adds differs: the owners, the
    # home, its worktrees, hidden paths and disk reserve, the approval mode the sandbox implies).
    from dataclasses import fields, replace

    from engine.app import ENGINE_DEFAULTS

    config = engine_config(load({}))
    built = replace(
        config,
        workspace=ENGINE_DEFAULTS.workspace,
        owner_ids=ENGINE_DEFAULTS.owner_ids,
        worktree_root=ENGINE_DEFAULTS.worktree_root,
        bash_approval=ENGINE_DEFAULTS.bash_approval,
        home=ENGINE_DEFAULTS.home,
        disk_reserve_mb=ENGINE_DEFAULTS.disk_reserve_mb,
        sandbox=replace(config.sandbox, hidden=(), hidden_names=()),
    )
    differing = [
        f.name
        for f in fields(ENGINE_DEFAULTS)
        if getattr(built, f.name) != getattr(ENGINE_DEFAULTS, f.name)
    ]
    assert differing == []


def test_a_settings_file_swapped_for_a_fifo_after_the_look_is_refused_not_waited_on(
    tmp_path: Path,
) -> None:
    """``run`` looks at ``.env`` first (its lines, that it is a regular file), then reads it:
    the agent can swap in a FIFO between the two, and the read opened it blocking and waited
    for a writer for good. Every read now opens without blocking and checks the open file."""
    import os
    import threading

    from bot.settings import env_file_problem

    dotenv = tmp_path / ".env"
    dotenv.write_text("PLANGATE_MAX_STEPS=7\n")
    assert env_file_problem(dotenv) is None  # the look
    dotenv.unlink()
    os.mkfifo(dotenv)  # the swap
    outcome: list[BaseException | Settings] = []

    def read() -> None:
        try:
            outcome.append(load_settings({}, env_file=str(dotenv)))
        except BaseException as exc:  # the thread reports what it got
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(30)
    if reader.is_alive():
        with open(dotenv, "w"):  # a writer frees the stuck reader, so the suite goes on
            pass
        pytest.fail("the settings read waited on a FIFO")
    [got] = outcome
    assert isinstance(got, ConfigError)
    assert str(got) == (
        f"{dotenv}: not a regular file; settings are read from a regular file only (remove "
        "it, or start plangate from a folder that is no workspace or project)"
    )


def test_settings_files_are_read_as_before(tmp_path: Path) -> None:
    """Through the one reader: values, precedence (environment over ``.env`` over the home's
    ``config.env``), a symbolic link followed, an oversized or non-UTF-8 file in one line."""
    home_conf = tmp_path / "config.env"
    home_conf.write_text("PLANGATE_MAX_STEPS=5\nPLANGATE_PROFILE=fromconfig\n")
    target = tmp_path / "real.env"
    target.write_text("export PLANGATE_PROFILE=fromdotenv\nPLANGATE_GOAL_IDLE_ROUNDS=4\n")
    link = tmp_path / ".env"
    link.symlink_to(target)

    got = load_settings(
        {"PLANGATE_GOAL_IDLE_ROUNDS": "6"}, env_file=str(link), config_file=home_conf
    )
    assert (got.max_steps, got.profile, got.goal_idle_rounds) == (5, "fromdotenv", 6)

    target.write_bytes(b"PLANGATE_PROFILE=\xff\n")
    assert error_of({}, str(link)) == f"{link}: cannot be read (not UTF-8 text)"
    target.write_bytes(b"#" * (1 << 20) + b"\n")
    assert error_of({}, str(link)) == f"{link}: larger than 1 MB; settings files are a few lines"
