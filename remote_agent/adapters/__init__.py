"""Database adapters, one file each, registered by URL scheme."""

from __future__ import annotations

import importlib
from urllib.parse import urlsplit

from remote_agent.adapters.base import Adapter, ColumnInfo, Reader, Session, TableInfo
from remote_agent.errors import BadRequest

#: URL scheme -> (module of this package, adapter class). A module is imported when a source
#: of its scheme is opened, so an agent (and its readers' fork server) carries the driver of
#: its own engine only: psycopg, MySQLdb and DuckDB are ~20 MiB of a SQLite agent's memory.
ADAPTERS: dict[str, tuple[str, str]] = {
    "sqlite": ("sqlite", "SqliteAdapter"),
    "postgresql": ("postgres", "PostgresAdapter"),
    "postgres": ("postgres", "PostgresAdapter"),
    "mysql": ("mysql", "MysqlAdapter"),
    "mariadb": ("mysql", "MysqlAdapter"),
    "file": ("files", "FileAdapter"),
}


def adapter_class(scheme: str) -> type[Adapter]:
    """The adapter class of a URL scheme, its module imported on first use.

    >>> adapter_class("sqlite").__name__
    'SqliteAdapter'
    """
    module, name = ADAPTERS[scheme]
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def open_adapter(
    url: str,
    *,
    statement_timeout_s: float,
    arrow_reads: bool = True,
    sqlite_arrow_reads: bool = True,
    cache_dir: str | None = None,
) -> Adapter:
    """The adapter for `url`, chosen by its scheme (`arrow_reads`: see `Adapter.arrow_reads`,
    for a SQLite file `sqlite_arrow_reads`; `cache_dir`: where a directory of dumps keeps its
    conversions, files.py)."""
    scheme = urlsplit(url).scheme.lower()
    if scheme not in ADAPTERS:
        raise BadRequest(f"unsupported database URL scheme {scheme!r}; supported: {', '.join(sorted(ADAPTERS))}")
    cls = adapter_class(scheme)
    if scheme == "file":
        return cls(url, statement_timeout_s=statement_timeout_s, cache_dir=cache_dir)  # type: ignore[call-arg]
    if scheme == "sqlite":
        return cls(url, statement_timeout_s=statement_timeout_s, arrow_reads=sqlite_arrow_reads)
    return cls(url, statement_timeout_s=statement_timeout_s, arrow_reads=arrow_reads)


__all__ = ["ADAPTERS", "Adapter", "ColumnInfo", "Reader", "Session", "TableInfo", "adapter_class", "open_adapter"]
