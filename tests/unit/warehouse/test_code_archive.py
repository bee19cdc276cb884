"""The zip a session on a cluster sends to its executors holds the code their tasks import."""

from __future__ import annotations

import zipfile
from pathlib import Path

import deltasieve_protocol
import warehouse
from warehouse.spark import code_archive


def test_the_archive_holds_every_module_of_the_executor_packages():
    names = set(zipfile.ZipFile(code_archive()).namelist())
    for package in (warehouse, deltasieve_protocol):
        root = Path(package.__file__).parent
        want = {str(p.relative_to(root.parent)) for p in root.rglob("*.py")}
        assert want <= names, sorted(want - names)[:5]
    assert "deltasieve_protocol/encoding.py" in names and "warehouse/strategies/hashing.py" in names
    assert not [n for n in names if n.startswith("remote_agent/")], "the agent's own code stays off the executors"
    assert not [n for n in names if "__pycache__" in n or not n.endswith(".py")]
