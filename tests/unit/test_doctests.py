"""The examples in the docstrings of our packages run and hold.

Pure functions carry a doctest (STYLE.md); this makes `make test` run them, so an example
that goes stale fails here instead of misleading a reader.
"""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import pkgutil
import sys

import pytest

import deltasieve
import deltasieve_cli
import deltasieve_protocol
import remote_agent
import service
import warehouse

#: Modules that change the importing process by design, imported only where that is meant:
#: the readers' fork server refuses pandas and polars from its import on (reader_server.py).
#: Importing it here would refuse them to every later test of this worker.
FOR_THEIR_PROCESS_ONLY = {"remote_agent.reader_server"}
#: Modules of an extra and the package it brings, checked where that package is installed: the
#: orchestrators' own virtualenvs (`make test-orchestrators`, tests/orchestrators/).
OF_AN_EXTRA = {"deltasieve.orchestration.airflow": "airflow", "deltasieve.orchestration.dagster": "dagster"}


def _importable(name: str) -> bool:
    return name not in OF_AN_EXTRA or importlib.util.find_spec(OF_AN_EXTRA[name]) is not None


def _modules() -> list[str]:
    names = []
    for package in (deltasieve_protocol, remote_agent, service, warehouse, deltasieve_cli, deltasieve):
        names.append(package.__name__)
        names += [
            m.name
            for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")
            if not m.name.endswith("__main__") and m.name not in FOR_THEIR_PROCESS_ONLY and _importable(m.name)
        ]
    return sorted(names)


def test_every_package_module_is_checked():
    assert {
        "remote_agent.keyindex",
        "deltasieve_protocol.encoding",
        "warehouse.planning.cost_model",
        "deltasieve_cli.formats",
        "deltasieve.client",
    } <= set(_modules())


@pytest.mark.parametrize("name", _modules())
def test_docstring_examples(name):
    finders = list(sys.meta_path)
    module = importlib.import_module(name)
    assert sys.meta_path == finders, f"importing {name} changed the process's import machinery"
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, (
        f"{result.failed} of {result.attempted} docstring examples in {name} failed (output above)"
    )
