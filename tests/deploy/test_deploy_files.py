"""The deploy files work as written: each env file loads the way its deployment loads it, the
image carries no local environment and has a health check, the compose file explains itself."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bot.settings import load_settings, run_problems

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
ROOT = DEPLOY.parent


def systemd_environment_file(text: str) -> dict[str, str]:
    """Parse ``text`` by systemd's EnvironmentFile= rules: ``#`` and ``;`` start a comment only
    at the start of a line; a ``# ...`` after a value is part of the value; one pair of
    surrounding quotes is removed; a trailing backslash joins the next line."""
    env: dict[str, str] = {}
    lines = iter(text.splitlines())
    for raw in lines:
        line = raw
        while line.endswith("\\"):
            line = line[:-1] + next(lines, "")
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        name, sep, value = line.partition("=")
        assert sep, f"not NAME=value: {raw!r}"
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        env[name.strip()] = value
    return env


def docker_env_file(text: str) -> dict[str, str]:
    """Parse ``text`` as docker's ``--env-file`` does: a line starting with ``#`` is a comment,
    everything after the first ``=`` is the value, verbatim."""
    env: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.lstrip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        assert sep, f"not NAME=value: {raw!r}"
        env[name] = value
    return env


@pytest.mark.parametrize(
    ("name", "parse"),
    [("env.example", docker_env_file), ("plangate.env.example", systemd_environment_file)],
)
def test_each_env_file_loads_cleanly_once_the_two_required_values_are_filled(
    name: str, parse: object, tmp_path: Path
) -> None:
    assert callable(parse)
    env = parse((DEPLOY / name).read_text())
    # The folders it names exist on the deployment; here they stand under tmp_path.
    for setting in ("PLANGATE_HOME", "PLANGATE_WORKSPACE"):
        if setting in env:
            env[setting] = str(tmp_path / env[setting].lstrip("/"))
            Path(env[setting]).mkdir(parents=True)
    assert "PLANGATE_TELEGRAM_TOKEN" in env
    assert "PLANGATE_OWNER_IDS" in env
    # No value carries a comment: an inline "# ..." would become part of the value.
    assert not [k for k, v in env.items() if "#" in v]
    env |= {"PLANGATE_TELEGRAM_TOKEN": "123:abc", "PLANGATE_OWNER_IDS": "12345"}
    settings = load_settings(env, env_file=None)
    assert run_problems(settings) == []
    assert settings.owner_ids == (12345,) or list(settings.owner_ids) == [12345]


def test_the_systemd_env_file_names_a_home_and_a_workspace_the_unit_may_write() -> None:
    env = systemd_environment_file((DEPLOY / "plangate.env.example").read_text())
    unit = (DEPLOY / "plangate.service").read_text()
    writable = re.search(r"^ReadWritePaths=(.*)$", unit, re.M)
    assert writable is not None
    roots = writable.group(1).split()
    for setting in ("PLANGATE_HOME", "PLANGATE_WORKSPACE"):
        path = env[setting]
        assert any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots), setting
    # The workspace is neither the home nor inside it, nor the unit's working folder.
    assert not env["PLANGATE_WORKSPACE"].startswith(env["PLANGATE_HOME"])
    assert "EnvironmentFile=/etc/plangate.env" in unit
    assert "plangate.env.example /etc/plangate.env" in unit
    assert "RestartPreventExitStatus=2" in unit


def test_the_image_leaves_the_local_environment_out_and_checks_its_health() -> None:
    ignored = (ROOT / ".dockerignore").read_text().split()
    for entry in (".venv/", ".env", ".git/"):
        assert entry in ignored
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    check = re.search(r"^HEALTHCHECK .*CMD \[\"plangate\", \"health\"\]$", dockerfile, re.M)
    assert check is not None


def test_every_unconfined_option_in_the_compose_file_says_why() -> None:
    lines = (DEPLOY / "docker-compose.yml").read_text().splitlines()
    unconfined = [i for i, line in enumerate(lines) if "unconfined" in line and "- " in line]
    for i in unconfined:
        assert "#" in lines[i], f"no reason given for: {lines[i].strip()}"


def test_the_toolchain_image_extends_plangates_and_runs_as_its_user() -> None:
    # docs/environments.md: a toolchain the sandbox should see goes into the image's /usr.
    text = (DEPLOY / "Dockerfile.toolchain").read_text()
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    base = (DEPLOY / "Dockerfile").read_text()
    final_user = [line for line in base.splitlines() if line.startswith("USER ")][-1]
    assert lines[0] == "FROM plangate"
    assert any("apt-get install" in line and "nodejs npm" in line for line in lines)
    assert lines[-1] == final_user  # back to plangate's own user, never root at run time
