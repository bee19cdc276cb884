"""Keeping pandas out of the agent's processes.

pyarrow imports pandas, when it is installed (PySpark needs it beside the service), the
first time a table is built, only to ask whether its input is a DataFrame: some 35 MiB of
an agent process's memory for nothing the agent uses.
"""

from __future__ import annotations

import sys


class _WithoutPandas:
    """A meta path finder that refuses to import pandas."""

    def find_spec(self, name, path=None, target=None):
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError("the agent runs without pandas", name=name)
        return None


def install() -> None:
    """Refuse pandas in this process from now on (once pandas is imported, nothing changes)."""
    if not any(isinstance(f, _WithoutPandas) for f in sys.meta_path):
        sys.meta_path.insert(0, _WithoutPandas())
