"""docker-compose.yml: it validates with ``docker-compose config``, and its settings are the app's.

``docker-compose config`` (Debian's docker-compose package, installed by ``.ci/install-redis``)
validates and resolves the file without a Docker engine. The test never skips: a missing
``docker-compose`` fails it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from mailer.factory import build_limiter
from mailer.mail.address import normalise_address
from mailer.settings import KNOWN, Settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
SECRET = "deploy-test-secret"
_KIND_VARIABLE = re.compile(r"MAILGUARD_KIND_[A-Z0-9_]+?_(MAX_WAIT|SUBJECT|BODY|HTML)")


def compose_config(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``docker-compose config`` on the repository's file with only ``env`` as settings."""
    exe = shutil.which("docker-compose")
    if exe is None:
        pytest.fail("docker-compose is not installed: run `sh .ci/install-redis` (make test does)")
    # An empty env file, so a developer's .env cannot change what the test sees; host MAILGUARD_*
    # variables are dropped for the same reason.
    env_file = tmp_path / "empty.env"
    env_file.write_text("")
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MAILGUARD_")}
    environ.update(env)
    return subprocess.run(
        [exe, "--env-file", str(env_file), "-f", str(COMPOSE), "config"],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The resolved compose file (anchors merged, ``${...}`` substituted), parsed."""
    result = compose_config(tmp_path_factory.mktemp("compose"), MAILGUARD_SECRET=SECRET)
    assert result.returncode == 0, result.stderr
    yield yaml.safe_load(result.stdout)


def service_env(config: Mapping[str, Any], name: str) -> dict[str, str]:
    """One service's environment as a dict (compose may give a list of NAME=value)."""
    env = config["services"][name].get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


def unread_variables(names: list[str]) -> list[str]:
    """The MAILGUARD_* names among ``names`` that ``Settings.from_env`` does not read."""
    return [
        name
        for name in names
        if name.startswith("MAILGUARD_")
        and name not in KNOWN
        and not _KIND_VARIABLE.fullmatch(name)
    ]


def test_compose_file_validates(tmp_path: Path) -> None:
    """``docker-compose -f docker-compose.yml config`` exits 0 and lists the four services."""
    result = compose_config(tmp_path, MAILGUARD_SECRET=SECRET)
    assert result.returncode == 0, result.stderr
    assert set(yaml.safe_load(result.stdout)["services"]) == {
        "redis",
        "worker",
        "mailpit",
        "flower",
    }


def test_compose_refuses_to_run_without_a_secret(tmp_path: Path) -> None:
    """Without MAILGUARD_SECRET the file does not resolve, and the error names the variable."""
    result = compose_config(tmp_path)
    assert result.returncode != 0
    assert "set MAILGUARD_SECRET" in result.stderr


def test_the_variable_check_catches_misspellings() -> None:
    """The checker used below refuses names the app would refuse and accepts the kinds' pattern."""
    assert unread_variables(["MAILGUARD_BROKER", "MAILGUARD_KIND_CODE_WAIT", "PATH"]) == [
        "MAILGUARD_BROKER",
        "MAILGUARD_KIND_CODE_WAIT",
    ]
    assert unread_variables(["MAILGUARD_SMTP_URL", "MAILGUARD_KIND_PASSWORD_RESET_MAX_WAIT"]) == []
    with pytest.raises(ValueError, match="unknown setting MAILGUARD_BROKER"):
        Settings.from_env({"MAILGUARD_BROKER": "redis://redis"})


def test_every_variable_set_is_one_the_app_reads(config: dict[str, Any]) -> None:
    """Every MAILGUARD_* variable of every service is one Settings.from_env reads and accepts."""
    seen = 0
    for name in config["services"]:
        env = service_env(config, name)
        mailguard = [k for k in env if k.startswith("MAILGUARD_")]
        seen += len(mailguard)
        assert unread_variables(mailguard) == [], name
        if mailguard:
            Settings.from_env(env)  # raises on an unknown name or a bad value
    assert seen > 0


def test_worker_settings_point_at_the_stack(config: dict[str, Any]) -> None:
    """The worker's settings parse: broker, results, limiter on redis; SMTP to mailpit:1025."""
    settings = Settings.from_env(service_env(config, "worker"))
    for url in (settings.broker_url, settings.result_backend, settings.limiter_url):
        assert urlsplit(url).scheme == "redis"
        assert urlsplit(url).hostname == "redis"
    assert len({settings.broker_url, settings.result_backend, settings.limiter_url}) == 3
    assert (urlsplit(settings.smtp_url).hostname, urlsplit(settings.smtp_url).port) == (
        "mailpit",
        1025,
    )
    assert settings.secret == SECRET
    assert settings.fail_mode == "fail_closed"
    assert settings.metrics_port == 9808


def test_flower_watches_the_workers_broker(config: dict[str, Any]) -> None:
    """Flower runs on the same settings as the worker, so it sees the same broker and queue."""
    worker = Settings.from_env(service_env(config, "worker"))
    flower = Settings.from_env(service_env(config, "flower"))
    assert (flower.broker_url, flower.result_backend, flower.queue) == (
        worker.broker_url,
        worker.result_backend,
        worker.queue,
    )
    assert config["services"]["flower"]["build"]["target"] == "flower"


def test_worker_settings_limit_on_a_real_redis(config: dict[str, Any], redis_url: str) -> None:
    """With the test's redis-server as host, the worker's settings build a limiter that limits."""
    server = urlsplit(redis_url).netloc
    env = {k: v.replace("redis:6379", server) for k, v in service_env(config, "worker").items()}
    settings = Settings.from_env(env)
    limiter = build_limiter(settings)
    try:
        key = normalise_address("ada@example.com").limit_key
        first, second = limiter.acquire(key), limiter.acquire(key)
        assert first.allowed
        assert not second.allowed
        assert second.tier == settings.policy.tiers[0]
    finally:
        limiter.close()


def test_redis_and_mailpit_are_healthchecked_and_awaited(config: dict[str, Any]) -> None:
    """redis and mailpit have healthchecks; the worker starts only once both are healthy."""
    services = config["services"]
    assert services["redis"]["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]
    assert "readyz" in services["mailpit"]["healthcheck"]["test"]
    for name in ("worker", "flower"):
        assert services[name]["healthcheck"]["test"]
    assert services["worker"]["depends_on"] == {
        "redis": {"condition": "service_healthy"},
        "mailpit": {"condition": "service_healthy"},
    }
    assert services["flower"]["depends_on"]["redis"] == {"condition": "service_healthy"}


def test_worker_can_be_scaled(config: dict[str, Any]) -> None:
    """The worker has no fixed container name and no host ports, so ``--scale worker=3`` works."""
    worker = config["services"]["worker"]
    assert "container_name" not in worker
    assert "ports" not in worker
    assert worker["command"][:4] == ["celery", "-A", "workers.app", "worker"]


def test_the_image_runs_as_a_user_and_leaves_secrets_out() -> None:
    """The Dockerfile drops root in the stage both targets share; .env never enters the build."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    base = dockerfile.split("FROM base AS flower")[0]
    users = re.findall(r"^USER (\S+)", base, flags=re.MULTILINE)
    assert users
    assert users[-1] not in {"root", "0"}
    assert re.findall(r"^USER (\S+)", dockerfile, flags=re.MULTILINE)[-1] not in {"root", "0"}
    assert 'pip install ".[fast]"' in dockerfile
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".env", ".venv", ".git"} <= set(ignored)
