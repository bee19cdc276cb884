"""The agent and the warehouse share the contract (`protocol`) and nothing else.

Importing every module of one side must not load a module of the other: the Spark driver
has no business with the agent's adapters and routes, and the agent never imports Spark or
the warehouse. The contract itself imports neither side.
"""

import functools
import json
import subprocess
import sys

import pytest

SCRIPT = """
import importlib, json, pkgutil, sys
package = importlib.import_module(sys.argv[1])
skipped = tuple(sys.argv[2:])
for m in pkgutil.walk_packages(package.__path__, sys.argv[1] + "."):
    if not (skipped and m.name.startswith(skipped)):
        importlib.import_module(m.name)
print(json.dumps(sorted(sys.modules)))
"""
#: Warehouse modules that write to a database: the PostgreSQL destination, which the service's
#: publisher opens only for a view published there (warehouse/destinations/__init__.py imports
#: it lazily); Spark's driver and executors never load it.
WRITERS = ("warehouse.destinations.postgres",)

#: Modules that import a package of an extra, which make test's virtualenv does not hold: the
#: orchestrators' (tests/orchestrators/ import them where it is installed).
OF_AN_EXTRA = {"deltasieve": ("deltasieve.orchestration.airflow", "deltasieve.orchestration.dagster")}

DRIVERS = ("psycopg", "psycopg2", "sqlite3", "pymysql", "MySQLdb", "adbc_driver_postgresql", "duckdb")

#: For each package: the top-level packages of ours it must never load.
FORBIDDEN = {
    "warehouse": ("remote_agent", "service", "deltasieve_cli"),
    "remote_agent": ("warehouse", "service", "deltasieve_cli", "pyspark"),
    "deltasieve_protocol": ("warehouse", "remote_agent", "service", "deltasieve_cli", "pyspark"),
    # the Python client: an orchestrator's workers install it with httpx alone
    "deltasieve": (
        "warehouse",
        "remote_agent",
        "service",
        "deltasieve_cli",
        "deltasieve_protocol",
        "pyspark",
        "pyarrow",
    ),
}


@functools.cache  # a fresh interpreter per package, once for every test that asks
def loaded_by(package: str, *skipped: str) -> list[str]:
    """The modules loaded by importing every module of `package` but those under `skipped`."""
    out = subprocess.run([sys.executable, "-c", SCRIPT, package, *skipped], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_a_side_loads_nothing_of_the_other(package):
    loaded = loaded_by(package, *OF_AN_EXTRA.get(package, ()))
    assert any(m.startswith(package + ".") for m in loaded)
    stray = [m for m in loaded if m.split(".")[0] in FORBIDDEN[package]]
    assert stray == [], f"{package} loads {stray}"


def test_the_warehouse_loads_no_database_driver():
    drivers = [m for m in loaded_by("warehouse", *WRITERS) if m.split(".")[0] in DRIVERS]
    assert drivers == [], f"warehouse loads database drivers: {drivers}"
