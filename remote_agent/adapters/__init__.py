"""Database adapters, one file each, registered by URL scheme."""

from __future__ import annotations

from urllib.parse import urlsplit

from remote_agent.adapters.base import Adapter, ColumnInfo, Reader, Session, TableInfo
from remote_agent.adapters.files import FileAdapter
from remote_agent.adapters.mysql import MysqlAdapter
from remote_agent.adapters.postgres import PostgresAdapter
from remote_agent.adapters.sqlite import SqliteAdapter
from remote_agent.errors import BadRequest

ADAPTERS: dict[str, type[Adapter]] = {
    "sqlite": SqliteAdapter,
    "postgresql": PostgresAdapter,
    "postgres": PostgresAdapter,
    "mysql": MysqlAdapter,
    "mariadb": MysqlAdapter,
    "file": FileAdapter,
}


def open_adapter(
    url: str,
    *,
    statement_timeout_s: float,
    arrow_reads: bool = False,
    sqlite_arrow_reads: bool = True,
    cache_dir: str | None = None,
) -> Adapter:
    """The adapter for `url`, chosen by its scheme (`arrow_reads`: see `Adapter.arrow_reads`,
    for a SQLite file `sqlite_arrow_reads`; `cache_dir`: where a directory of dumps keeps its
    conversions, files.py)."""
    scheme = urlsplit(url).scheme.lower()
    try:
        cls = ADAPTERS[scheme]
    except KeyError:
        raise BadRequest(
            f"unsupported database URL scheme {scheme!r}; supported: {', '.join(sorted(ADAPTERS))}"
        ) from None
    if cls is FileAdapter:
        return FileAdapter(url, statement_timeout_s=statement_timeout_s, cache_dir=cache_dir)
    if cls is SqliteAdapter:
        return SqliteAdapter(url, statement_timeout_s=statement_timeout_s, arrow_reads=sqlite_arrow_reads)
    return cls(url, statement_timeout_s=statement_timeout_s, arrow_reads=arrow_reads)


__all__ = ["ADAPTERS", "Adapter", "FileAdapter", "ColumnInfo", "Reader", "Session", "TableInfo", "open_adapter"]
