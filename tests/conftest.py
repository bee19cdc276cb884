"""Fixtures shared by the whole suite: real service and agent processes, scratch dirs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from workloads.harness import Api, start_service  # noqa: E402


@pytest.fixture(scope="session")
def logs_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("logs")


@pytest.fixture(scope="session")
def service(tmp_path_factory, logs_dir):
    """One warehouse service process for the integration tests (Spark starts once)."""
    proc = start_service(tmp_path_factory.mktemp("warehouse"), logs_dir)
    yield proc
    proc.stop()


@pytest.fixture(scope="session")
def api(service):
    client = Api(service.url)
    yield client
    client.close()
