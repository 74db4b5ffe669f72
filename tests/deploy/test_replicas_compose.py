"""deploy/compose.replicas.yml is the topology docs/scaling.md describes: two replicas of one
image with one database and one shared volume at the same path, in webhook mode behind a proxy
that routes to both, and a PostgreSQL the replicas wait for. Read as Docker Compose reads it
(YAML with anchors and merge keys, ``${VAR}`` interpolation); there is no Docker engine here."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from bot.settings import load_settings, run_problems
from tests.deploy.test_deploy_files import docker_env_file

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
COMPOSE = DEPLOY / "compose.replicas.yml"

# What an operator puts in deploy/.env for this file, besides env.example's settings.
SAMPLE = {"PLANGATE_PUBLIC_HOST": "bot.example.org", "PLANGATE_DB_PASSWORD": "s3cret"}

_VARIABLE = re.compile(r"\$\{(?P<name>\w+)(?:(?P<op>:\?|:-)(?P<arg>[^}]*))?\}")


class Missing(Exception):
    """A required variable (``${NAME:?message}``) is not set: compose refuses to start."""


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose's interpolation of ``${NAME}``, ``${NAME:-default}`` and ``${NAME:?error}``."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(match: re.Match[str]) -> str:
        name, op, arg = match["name"], match["op"], match["arg"]
        if env.get(name):
            return env[name]
        if op == ":?":
            raise Missing(f"{name}: {arg}")
        return arg if op == ":-" else ""

    return _VARIABLE.sub(one, value)


def load(env: dict[str, str] = SAMPLE) -> dict[str, Any]:
    raw = yaml.safe_load(COMPOSE.read_text())
    return interpolate(raw, env)  # type: ignore[no-any-return]


def replicas(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n: s for n, s in compose["services"].items() if s.get("command") == ["run"]}


def mounts(service: dict[str, Any]) -> dict[str, str]:
    """target -> source of a service's short-syntax volumes."""
    found = {}
    for entry in service.get("volumes", []):
        source, target = entry.split(":")[:2]
        found[target] = source
    return found


def test_two_replicas_of_one_image_with_one_definition() -> None:
    compose = load()
    found = replicas(compose)
    assert sorted(found) == ["replica-1", "replica-2"]
    one, two = found.values()
    assert one == two  # the same image, build, settings, mounts and limits
    assert one["image"] == "plangate:latest"
    assert one["build"]["dockerfile"] == "deploy/Dockerfile"


def test_replicas_agree_on_the_database_and_the_shared_paths_and_load_as_settings(
    tmp_path: Path,
) -> None:
    compose = load()
    [replica, *_] = replicas(compose).values()
    env = replica["environment"]
    # The home and the workspace are on the shared volume, at the same path in each replica.
    shared = {t for t, s in mounts(replica).items() if s == "shared"}
    assert shared == {"/shared"}
    for setting in ("PLANGATE_HOME", "PLANGATE_WORKSPACE"):
        assert Path(env[setting]).is_relative_to("/shared"), setting
    assert env["PLANGATE_HOME"] != env["PLANGATE_WORKSPACE"]
    # The database is the compose file's PostgreSQL, as its own settings name it.
    url = urlsplit(env["PLANGATE_DATABASE_URL"])
    postgres = compose["services"]["postgres"]["environment"]
    assert url.scheme == "postgresql" and url.hostname == "postgres" and url.port == 5432
    assert url.username == postgres["POSTGRES_USER"]
    assert url.password == postgres["POSTGRES_PASSWORD"] == SAMPLE["PLANGATE_DB_PASSWORD"]
    assert url.path == "/" + postgres["POSTGRES_DB"]
    # With env.example's settings filled in (deploy/.env), the environment compose gives a
    # replica loads cleanly; the compose file's own lines win over .env, as in compose.
    assert replica["env_file"] == ".env"
    loaded = docker_env_file((DEPLOY / "env.example").read_text())
    loaded |= {"PLANGATE_TELEGRAM_TOKEN": "123:abc", "PLANGATE_OWNER_IDS": "12345"}
    loaded |= {k: str(v) for k, v in env.items()}
    for setting in ("PLANGATE_HOME", "PLANGATE_WORKSPACE"):
        loaded[setting] = str(tmp_path / loaded[setting].lstrip("/"))
        Path(loaded[setting]).mkdir(parents=True)
    settings = load_settings(loaded, env_file=None)
    assert run_problems(settings) == []
    assert settings.database_url is not None
    assert settings.database_url.get_secret_value() == env["PLANGATE_DATABASE_URL"]
    assert settings.webhook_url == "https://bot.example.org/telegram"


def test_webhook_mode_and_no_default_for_what_must_be_chosen() -> None:
    [replica, *_] = replicas(load()).values()
    env = replica["environment"]
    assert urlsplit(env["PLANGATE_WEBHOOK_URL"]).scheme == "https"
    port = env["PLANGATE_WEBHOOK_LISTEN"].rsplit(":", 1)[1]
    assert replica["expose"] == [port]
    assert "ports" not in replica  # only the proxy is reachable from outside
    # The secret is optional: the replicas then share the one the first made (in the database).
    assert env["PLANGATE_WEBHOOK_SECRET"] == ""
    assert (
        load(SAMPLE | {"PLANGATE_WEBHOOK_SECRET": "abc"})["services"]["replica-2"]["environment"][
            "PLANGATE_WEBHOOK_SECRET"
        ]
        == "abc"
    )
    for name in SAMPLE:
        with pytest.raises(Missing, match=name):
            load({k: v for k, v in SAMPLE.items() if k != name})


def _caddy_routes(text: str) -> dict[str, list[str]]:
    """Path matcher of each ``handle`` block -> the upstreams of its ``reverse_proxy``."""
    routes: dict[str, list[str]] = {}
    for match in re.finditer(r"handle (\S+) \{\s*reverse_proxy ([^{\n]+)", text):
        routes[match[1]] = match[2].split()
    return routes


def test_the_proxy_routes_the_webhook_path_to_both_replicas() -> None:
    compose = load()
    proxy = compose["services"]["proxy"]
    source = mounts(proxy)["/etc/caddy/Caddyfile"]
    caddyfile = (DEPLOY / source).read_text()
    [replica, *_] = replicas(compose).values()
    env = replica["environment"]
    path = urlsplit(env["PLANGATE_WEBHOOK_URL"]).path
    port = env["PLANGATE_WEBHOOK_LISTEN"].rsplit(":", 1)[1]
    assert _caddy_routes(caddyfile) == {path: [f"replica-1:{port}", f"replica-2:{port}"]}
    assert "{$PLANGATE_PUBLIC_HOST} {" in caddyfile
    assert proxy["environment"]["PLANGATE_PUBLIC_HOST"] == SAMPLE["PLANGATE_PUBLIC_HOST"]
    assert sorted(p.split(":")[-1] for p in proxy["ports"]) == ["443", "80"]
    assert sorted(proxy["depends_on"]) == sorted(replicas(compose))


def test_postgresql_has_a_health_check_the_replicas_wait_for_and_its_own_volume() -> None:
    compose = load()
    postgres = compose["services"]["postgres"]
    check = postgres["healthcheck"]
    assert check["test"][0] == "CMD-SHELL" and "pg_isready" in check["test"][1]
    assert mounts(postgres)["/var/lib/postgresql/data"] == "postgres-data"
    for replica in replicas(compose).values():
        assert replica["depends_on"]["postgres"] == {"condition": "service_healthy"}
    assert set(compose["volumes"]) == {"shared", "postgres-data", "caddy-data"}


def test_the_image_installs_postgresql_and_owns_the_shared_mount_point() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    install = re.search(r'pip install .*"\.\[(?P<extras>[^\]]+)\]"', dockerfile)
    assert install is not None and {"webhooks", "postgres"} <= set(install["extras"].split(","))
    # A named volume starts as a copy of the image's folder, owner included: plangate's user.
    assert re.search(r"mkdir -p [^\n]*/shared", dockerfile)
    assert re.search(r"chown plangate:plangate [^\n]*/shared", dockerfile)


def test_every_unconfined_option_says_why() -> None:
    lines = COMPOSE.read_text().splitlines()
    for line in lines:
        if "unconfined" in line and "- " in line:
            assert "#" in line, f"no reason given for: {line.strip()}"
