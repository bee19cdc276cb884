"""The warehouse speaks to agents through the protocol only.

Importing every warehouse module must not load the agent's own modules (adapters, the
extraction, the app) nor a database driver: the Spark driver has no business with them.
"""

import json
import subprocess
import sys

SCRIPT = """
import importlib, json, pkgutil, sys
import warehouse
for m in pkgutil.walk_packages(warehouse.__path__, "warehouse."):
    importlib.import_module(m.name)
print(json.dumps(sorted(sys.modules)))
"""

#: What the warehouse may load of the agent's package.
ALLOWED = ("remote_agent", "remote_agent.protocol")
DRIVERS = ("psycopg", "psycopg2", "sqlite3", "pymysql", "MySQLdb")


def test_warehouse_loads_only_the_protocol_of_the_agent():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True)
    loaded = json.loads(out.stdout)
    assert any(m.startswith("warehouse.") for m in loaded)
    agent = [m for m in loaded if m == "remote_agent" or m.startswith("remote_agent.")]
    stray = [m for m in agent if m not in ALLOWED and not m.startswith("remote_agent.protocol.")]
    assert stray == [], f"warehouse imports agent internals: {stray}"
    drivers = [m for m in loaded if m.split(".")[0] in DRIVERS]
    assert drivers == [], f"warehouse loads database drivers: {drivers}"
