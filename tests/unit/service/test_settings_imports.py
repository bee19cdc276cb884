"""Reading the settings loads no engine: `import service.settings` (and the agent's) brings in
neither Spark nor Arrow, pandas, Delta or a database driver.

Their defaults and validators live in leaf modules (deltasieve_protocol/defaults.py, warehouse/defaults.py,
warehouse/spark_master.py, service/retention_policy.py), so that a command's --help, the
documentation generator and a settings check start in a fraction of a second.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

ENGINES = ("pyspark", "py4j", "pyarrow", "pandas", "deltalake", "psycopg", "MySQLdb")

SCRIPT = """
import importlib, json, sys
importlib.import_module(sys.argv[1])
print(json.dumps(sorted(sys.modules)))
"""


def loaded_by(module: str) -> list[str]:
    """The modules a fresh interpreter holds after importing `module`."""
    out = subprocess.run([sys.executable, "-c", SCRIPT, module], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


@pytest.mark.parametrize("module", ["service.settings", "remote_agent.settings"])
def test_importing_the_settings_loads_no_engine(module):
    loaded = loaded_by(module)
    assert module in loaded
    engines = sorted({m.split(".")[0] for m in loaded} & set(ENGINES))
    assert engines == [], f"import {module} loads {engines}"
