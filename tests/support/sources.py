"""Names for the legacy databases the fixtures of tests/conftest.py make."""

from __future__ import annotations

import itertools
import re

#: PostgreSQL cuts identifiers at 63 bytes; leave room for the counter.
MAX_NAME_LEN = 50
_numbers = itertools.count(1)


def database_name(hint: str) -> str:
    """A database name unique in this session, made from `hint` (a module or test name).

    >>> database_name("tests.integration.test_sync[postgres]").startswith("test_sync_postgres_")
    True
    """
    base = re.sub(r"\W+", "_", hint.rsplit(".", 1)[-1].lower()).strip("_")[:MAX_NAME_LEN]
    return f"{base}_{next(_numbers)}"
