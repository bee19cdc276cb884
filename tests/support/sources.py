"""The legacy databases a test syncs from, one maker per engine, behind the `source` fixture.

`ENGINES` maps the engine's name (the test id) to a function that makes a fresh, empty
database on it; tests/conftest.py parametrizes `source` over it. PostgreSQL and MariaDB
databases live in servers the session starts once (`postgres_server`, `mariadb_server`).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

#: PostgreSQL cuts identifiers at 63 bytes; leave room for the counter.
MAX_NAME_LEN = 50
_numbers = itertools.count(1)


@dataclass(frozen=True)
class SourceDatabase:
    """A legacy database: the legacy application writes through `owner_url`; the agent is
    given `reader_url`, which may only read."""

    engine: str
    owner_url: str
    reader_url: str
    #: The database file, for engines that have one (SQLite).
    path: Path | None = None


def database_name(hint: str) -> str:
    """A database name unique in this session, made from `hint` (a module or test name).

    >>> database_name("tests.integration.test_sync[postgres]").startswith("test_sync_postgres_")
    True
    """
    base = re.sub(r"\W+", "_", hint.rsplit(".", 1)[-1].lower()).strip("_")[:MAX_NAME_LEN]
    return f"{base}_{next(_numbers)}"


def _sqlite(request: pytest.FixtureRequest, tmp_path: Path) -> SourceDatabase:
    path = tmp_path / "legacy.db"
    return SourceDatabase("sqlite", owner_url=str(path), reader_url=f"sqlite:///{path}", path=path)


def _postgres(request: pytest.FixtureRequest, tmp_path: Path) -> SourceDatabase:
    database = request.getfixturevalue("postgres_server").create_database(database_name(request.node.name))
    return SourceDatabase("postgres", owner_url=database.owner_url, reader_url=database.reader_url)


def _mariadb(request: pytest.FixtureRequest, tmp_path: Path) -> SourceDatabase:
    database = request.getfixturevalue("mariadb_server").create_database(database_name(request.node.name))
    return SourceDatabase("mariadb", owner_url=database.owner_url, reader_url=database.reader_url)


ENGINES: dict[str, Callable[[pytest.FixtureRequest, Path], SourceDatabase]] = {
    "sqlite": _sqlite,
    "postgres": _postgres,
    "mariadb": _mariadb,
}
