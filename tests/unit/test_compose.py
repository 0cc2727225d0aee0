"""docker-compose.yml and the Dockerfile, checked by structure (no Docker engine needed).

What is checked is what would otherwise only fail on someone else's machine:
pinned images, the health and start order of the stack, the worker's
environment and volumes, the search attributes the stack registers (against
``loop.contracts``), and an image that runs ``worker.py`` as a non-root user.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from loop.contracts import SEARCH_ATTRIBUTES
from loop.devserver import DYNAMIC_CONFIG
from tests.support.repos import ROOT
from worker import DRAIN

SERVICES = {"postgres", "temporal", "temporal-ui", "search-attributes", "worker"}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    return compose["services"]


@pytest.fixture(scope="module")
def dockerfile() -> list[str]:
    """Instructions, one per item, with continuation lines joined and comments dropped."""
    text = (ROOT / "Dockerfile").read_text()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    return [i.strip() for i in "\n".join(lines).replace("\\\n", " ").splitlines() if i.strip()]


def seconds(duration: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    total = 0.0
    for value, unit in re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", duration):
        total += float(value) * units[unit]
    return total


def test_the_stack_has_its_services(services: dict[str, Any]) -> None:
    assert set(services) >= SERVICES


def test_every_image_is_pinned(services: dict[str, Any]) -> None:
    for name, service in services.items():
        image = service.get("image")
        assert image, f"{name} has no image (a built service is tagged too)"
        repo, _, tag = image.rpartition(":")
        assert repo and "/" not in tag, f"{name}: {image} has no tag"
        assert tag != "latest" and re.match(r"\d+(\.\d+)+", tag), f"{name}: {image} is not pinned"
    assert services["postgres"]["image"].startswith("postgres:16.")
    assert re.fullmatch(r"temporalio/auto-setup:1\.2\d\.\d+", services["temporal"]["image"])
    assert services["temporal-ui"]["image"].startswith("temporalio/ui:")
    assert services["search-attributes"]["image"].startswith("temporalio/admin-tools:1.2")


def test_ports(services: dict[str, Any]) -> None:
    assert any(p.endswith(":7233:7233") or p == "7233:7233" for p in services["temporal"]["ports"])
    assert any(p.endswith("8233:8080") for p in services["temporal-ui"]["ports"])
    assert services["temporal-ui"]["environment"]["TEMPORAL_ADDRESS"] == "temporal:7233"
    assert "ports" not in services["postgres"]  # reached only inside the stack


def test_healthchecks(services: dict[str, Any]) -> None:
    def check(name: str) -> str:
        test = services[name]["healthcheck"]["test"]
        return " ".join(test) if isinstance(test, list) else test

    assert "pg_isready" in check("postgres")
    assert "temporal operator cluster health" in check("temporal")
    worker = services["worker"]["healthcheck"]["test"]
    assert worker[:3] == ["CMD", "python", "-c"]
    compile(worker[3], "worker healthcheck", "exec")  # the script is valid Python
    assert "describe_task_queue" in worker[3] and "LOOP_TASK_QUEUE" in worker[3]


def test_start_order(services: dict[str, Any]) -> None:
    def after(name: str) -> dict[str, str]:
        return {k: v["condition"] for k, v in services[name]["depends_on"].items()}

    assert after("temporal") == {"postgres": "service_healthy"}
    assert after("temporal-ui") == {"temporal": "service_healthy"}
    assert after("search-attributes") == {"temporal": "service_healthy"}
    assert after("worker") == {
        "temporal": "service_healthy",
        "search-attributes": "service_completed_successfully",
    }


def test_temporal_runs_on_postgres(services: dict[str, Any]) -> None:
    env = services["temporal"]["environment"]
    assert env["DB"] == "postgres12" and env["POSTGRES_SEEDS"] == "postgres"
    assert env["SQL_PLUGIN"] == "postgres12" and env["SQL_HOST"] == "postgres"
    assert any(v.endswith(":/var/lib/postgresql/data") for v in services["postgres"]["volumes"])


def test_server_dynamic_config(compose: dict[str, Any], services: dict[str, Any]) -> None:
    """The stack's server gets the dev server's fast polling and the features Loopwork uses."""
    mounted = services["temporal"]["configs"][0]
    assert services["temporal"]["environment"]["DYNAMIC_CONFIG_FILE_PATH"] == (
        "config/dynamicconfig/" + Path(mounted["target"]).name
    )
    config = yaml.safe_load(compose["configs"][mounted["source"]]["content"])
    for key, value in DYNAMIC_CONFIG.items():
        assert config[key] == [{"value": value}], key
    assert config["frontend.enableUpdateWorkflowExecution"] == [{"value": True}]
    assert config["frontend.enableExecuteMultiOperation"] == [{"value": True}]


def test_search_attribute_registration(services: dict[str, Any]) -> None:
    service = services["search-attributes"]
    script = "\n".join(service["command"])
    for key in SEARCH_ATTRIBUTES:
        kind = key.indexed_value_type.name.title()  # KEYWORD -> Keyword, the CLI's spelling
        create = f"temporal operator search-attribute create --name {key.name} --type {kind}"
        assert create in script, create
        # Idempotent: an attribute that exists already is not a failure.
        assert f"{create} || temporal operator search-attribute list | grep -qw {key.name}" in (
            script
        )
    # Shell variables are escaped from Compose's interpolation ($$), none left bare.
    assert "$" not in script.replace("$$", "")
    assert service["environment"]["TEMPORAL_ADDRESS"] == "temporal:7233"
    assert service["restart"].startswith("on-failure")


def test_worker_service(compose: dict[str, Any], services: dict[str, Any]) -> None:
    worker = services["worker"]
    assert worker["build"]["context"] == "."
    env = worker["environment"]
    assert env["TEMPORAL_ADDRESS"] == "temporal:7233"
    assert env["LOOP_HOME"] == "/loop"
    assert env["LOOP_TASK_QUEUE"] == "loop"
    assert env["OPENAI_API_KEY"].startswith("${OPENAI_API_KEY")  # passed through, never written
    replicas = worker["deploy"]["replicas"]
    assert re.fullmatch(r"\$\{LOOP_WORKERS:-(\d+)\}", replicas), replicas
    assert int(replicas.split(":-")[1].rstrip("}")) >= 2
    assert "container_name" not in worker  # replicas need generated names
    # Each replica a host: LOOP_HOME on a volume of its own (anonymous, so per container)
    # and no LOOP_HOST_ID (the default differs per container); the repositories
    # bind-mounted at the same path.
    assert "/loop" in worker["volumes"]
    assert "LOOP_HOST_ID" not in env
    assert not any(v.endswith(":/loop") for v in worker["volumes"])
    repos = [v for v in worker["volumes"] if v.startswith("${LOOP_REPOS")]
    assert repos, "no bind mount for the repositories"
    source, _, target = repos[0].partition("}:")
    assert source + "}" == target  # same absolute path inside as outside
    assert worker["restart"] in {"unless-stopped", "always"}
    assert worker["init"] is True
    assert seconds(worker["stop_grace_period"]) >= max(15, DRAIN.total_seconds() + 5)


def test_dockerfile(dockerfile: list[str]) -> None:
    assert dockerfile[0] == "FROM python:3.11-slim"
    run = " ".join(i for i in dockerfile if i.startswith("RUN "))
    assert "apt-get install" in run and " git" in run
    assert re.search(r"pip install [^\n]*--no-cache-dir \.(\s|$)", run)
    assert "[dev]" not in run
    users = [i.split()[1] for i in dockerfile if i.startswith("USER ")]
    assert users and users[-1] not in {"root", "0"}
    cmd = [i for i in dockerfile if i.startswith("CMD ")]
    assert json.loads(cmd[-1][4:]) == ["python", "worker.py"]
    assert dockerfile.index(f"USER {users[-1]}") < dockerfile.index(cmd[-1])


def test_dockerfile_copies_the_whole_package(dockerfile: list[str]) -> None:
    """Every package and module pyproject.toml installs is in the image's build context."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    setup = pyproject["tool"]["setuptools"]
    wanted = [
        *(p.rstrip("*") for p in setup["packages"]["find"]["include"]),
        *(f"{m}.py" for m in setup["py-modules"]),
        "pyproject.toml",
        pyproject["project"]["readme"],  # the build reads it
    ]
    copied = " ".join(i for i in dockerfile if i.startswith("COPY "))
    for name in wanted:
        assert re.search(rf"(^|\s){re.escape(name)}(\s|$)", copied), name
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    ignored = {line.strip() for line in lines if line.strip() and not line.startswith("#")}
    assert {".venv", ".git", ".loop", "tests"} <= ignored
    assert not set(wanted) & ignored
