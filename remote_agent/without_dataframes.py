"""Keeping pandas and polars out of the agent's processes.

pyarrow imports pandas, when it is installed (PySpark needs it beside the service), the
first time a table is built, only to ask whether its input is a DataFrame: some 35 MiB of
an agent process's memory for nothing the agent uses. ADBC's DB-API module imports polars
when it is installed, for a backend the agent never asks for: some 25 MiB more, and a
thread of its own in every process that imports it (the readers' fork server too).
"""

from __future__ import annotations

import sys

#: Top-level packages the agent refuses to import.
REFUSED = frozenset({"pandas", "polars"})


class _WithoutDataframes:
    """A meta path finder that refuses to import the packages of REFUSED.

    >>> _WithoutDataframes().find_spec("polars.dataframe")
    Traceback (most recent call last):
    ...
    ModuleNotFoundError: the agent runs without polars
    >>> _WithoutDataframes().find_spec("pyarrow") is None
    True
    """

    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in REFUSED:
            raise ModuleNotFoundError(f"the agent runs without {top}", name=name)
        return None


def install() -> None:
    """Refuse pandas and polars in this process from now on (a package imported already stays)."""
    if not any(isinstance(f, _WithoutDataframes) for f in sys.meta_path):
        sys.meta_path.insert(0, _WithoutDataframes())
