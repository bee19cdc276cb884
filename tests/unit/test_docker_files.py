"""The deployment files: no container engine runs here, so check what they say."""

from __future__ import annotations

from pathlib import Path

import yaml

DOCKER = Path(__file__).resolve().parents[2] / "docker"


def _instructions(name: str) -> list[tuple[str, str]]:
    lines, current = [], ""
    for raw in (DOCKER / name).read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        current += line.rstrip("\\") + " "
        if not line.endswith("\\"):
            op, _, rest = current.strip().partition(" ")
            lines.append((op.upper(), rest))
            current = ""
    return lines


def test_compose_runs_service_agent_and_legacy_database():
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    services = compose["services"]
    assert {"service", "agent", "legacy-db"} <= services.keys()
    assert services["agent"]["build"]["dockerfile"] == "docker/Dockerfile.agent"
    assert services["service"]["build"]["dockerfile"] == "docker/Dockerfile.service"
    assert services["agent"]["environment"]["AGENT_DB_URL"].startswith("postgresql://reader:")
    for init in services["legacy-db"].get("volumes", []):
        assert (DOCKER / init.split(":")[0]).exists(), init


def test_agent_image_installs_only_the_agent():
    steps = _instructions("Dockerfile.agent")
    text = " ".join(f"{op} {rest}" for op, rest in steps)
    copied = [rest.split()[0] for op, rest in steps if op == "COPY"]
    assert (
        {"deltasieve_protocol", "remote_agent"} <= set(copied) and "warehouse" not in copied and "service" not in copied
    )
    assert "openjdk" not in text and "pyspark" not in text and "[service]" not in text
    assert any(op == "RUN" and "pip install" in rest and "'.[mysql]'" in rest for op, rest in steps)
    assert "libmariadb3" in text, "mysqlclient's runtime library must stay in the image"
    _compiles_kernels_ahead_of_time(steps)
    _keeps_numba_cache_for(steps, "agent")
    assert steps[-1][0] == "ENTRYPOINT" and "remote_agent" in steps[-1][1]


def test_service_image_installs_java_and_the_service_extra():
    steps = _instructions("Dockerfile.service")
    runs = " ".join(rest for op, rest in steps if op == "RUN")
    assert "openjdk-17" in runs and "'.[service,iceberg]'" in runs
    copied = {rest.split()[0] for op, rest in steps if op == "COPY"}
    assert {"deltasieve_protocol", "warehouse", "service"} <= copied and "remote_agent" not in copied
    _compiles_kernels_ahead_of_time(steps)
    _keeps_numba_cache_for(steps, "deltasieve")
    assert steps[-1][0] == "ENTRYPOINT" and "service" in steps[-1][1]


def _compiles_kernels_ahead_of_time(steps: list[tuple[str, str]]) -> None:
    """The image builds the kernels' extension (deltasieve_protocol/compiled.py) after pip
    installed numba and before gcc, which the build compiles with, is removed."""
    runs = " ".join(rest for op, rest in steps if op == "RUN")
    build = runs.index("import compile_kernels; compile_kernels()")
    assert runs.index("gcc") < runs.index("pip install") < build < runs.index("apt-get purge -y gcc")


def _keeps_numba_cache_for(steps: list[tuple[str, str]], user: str) -> None:
    """The image has a numba cache its user owns, for the kernels compiled just in time
    (`DELTASIEVE_KERNELS=jit`): the sources' own __pycache__ is root's, and a kernel numba
    cannot cache would compile at every start."""
    env = " ".join(rest for op, rest in steps if op == "ENV")
    runs = " ".join(rest for op, rest in steps if op == "RUN")
    assert "NUMBA_CACHE_DIR=" in env
    assert f'chown -R {user} "$NUMBA_CACHE_DIR"' in runs
    assert ("USER", user) in steps
