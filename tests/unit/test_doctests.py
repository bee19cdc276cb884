"""The examples in the docstrings of our packages run and hold.

Pure functions carry a doctest (STYLE.md); this makes `make test` run them, so an example
that goes stale fails here instead of misleading a reader.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import deltasieve_cli
import protocol
import remote_agent
import service
import warehouse


def _modules() -> list[str]:
    names = []
    for package in (protocol, remote_agent, service, warehouse, deltasieve_cli):
        names.append(package.__name__)
        names += [
            m.name
            for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")
            if not m.name.endswith("__main__")
        ]
    return sorted(names)


def test_every_package_module_is_checked():
    assert {
        "remote_agent.keyindex",
        "protocol.encoding",
        "warehouse.planning.cost_model",
        "deltasieve_cli.formats",
    } <= set(_modules())


@pytest.mark.parametrize("name", _modules())
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, (
        f"{result.failed} of {result.attempted} docstring examples in {name} failed (output above)"
    )
