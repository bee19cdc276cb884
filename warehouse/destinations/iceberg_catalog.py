"""The catalog an Iceberg destination's table is in: what a view's `catalog` option names,
as pyiceberg's catalog properties, and the catalogs opened, one per place.

- none given: the embedded SQL catalog, a SQLite database at DATA_DIR/iceberg/catalog.db,
  its tables' files under DATA_DIR/iceberg/warehouse;
- `{"type": "sql", "uri": "postgresql://USER@HOST/DB"}` (or `sqlite:////PATH`): pyiceberg's
  SQL catalog in that database (its `iceberg_tables` and `iceberg_namespace_properties`
  tables, created if missing), through psycopg 3; the files under `warehouse`, by default
  DATA_DIR/iceberg/warehouse;
- `{"type": "rest", "uri": "https://..."}`: a REST catalog (`warehouse`, `token`,
  `credential` passed on as pyiceberg reads them).

Secrets come by reference (`env:NAME`, `file:/PATH`), resolved by the service before the
destination is opened (service/publishing.py `usable`); this module never reads them.

Nothing here imports pyiceberg but `open_catalog`, so that the API can show and check an
Iceberg destination where pyiceberg is not installed.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from warehouse.errors import DestinationError
from warehouse.view_options import SECRET_REFERENCE, IcebergCatalog

#: The name pyiceberg's SQL catalog files the tables under (its `catalog_name` column).
CATALOG_NAME = "deltasieve"
#: Where the embedded catalog and its tables' files are, under DATA_DIR.
EMBEDDED_DIR = "iceberg"

_opened: dict[tuple[tuple[str, str], ...], Any] = {}
_opening = threading.Lock()


def embedded_uri(data_dir: Path) -> str:
    """The SQLAlchemy URL of the embedded catalog's SQLite database.

    >>> embedded_uri(Path("/data"))
    'sqlite:////data/iceberg/catalog.db'
    """
    return f"sqlite:///{Path(data_dir) / EMBEDDED_DIR / 'catalog.db'}"


def default_warehouse(data_dir: Path) -> str:
    """Where a SQL catalog's tables' files go when it names no `warehouse`.

    >>> default_warehouse(Path("/data"))
    'file:///data/iceberg/warehouse'
    """
    return (Path(data_dir) / EMBEDDED_DIR / "warehouse").absolute().as_uri()


def sqlalchemy_url(uri: str) -> str:
    """A SQL catalog's uri as SQLAlchemy takes it: PostgreSQL through psycopg 3 (the driver
    the service has), SQLite as it is.

    >>> sqlalchemy_url("postgresql://loader@db/wh"), sqlalchemy_url("postgres://db/wh")
    ('postgresql+psycopg://loader@db/wh', 'postgresql+psycopg://db/wh')
    >>> sqlalchemy_url("sqlite:////d/c.db")
    'sqlite:////d/c.db'
    """
    for scheme in ("postgresql://", "postgres://"):
        if uri.startswith(scheme):
            return "postgresql+psycopg://" + uri[len(scheme) :]
    return uri


def properties(catalog: IcebergCatalog | None, data_dir: Path) -> dict[str, str]:
    """pyiceberg's properties of the catalog a destination names (its secrets resolved).

    >>> properties(None, Path("/d"))
    {'type': 'sql', 'uri': 'sqlite:////d/iceberg/catalog.db', 'warehouse': 'file:///d/iceberg/warehouse'}
    >>> properties(IcebergCatalog(type="rest", uri="http://cat:8181"), Path("/d"))
    {'type': 'rest', 'uri': 'http://cat:8181'}
    >>> properties(IcebergCatalog(uri="env:CATALOG_URL"), Path("/d"))
    Traceback (most recent call last):
    ...
    warehouse.errors.DestinationError: the iceberg catalog's uri env:CATALOG_URL was not resolved
    """
    catalog = catalog or IcebergCatalog()
    for name in ("uri", "token", "credential"):
        value = getattr(catalog, name)
        if value is not None and SECRET_REFERENCE.match(value):
            raise DestinationError(f"the iceberg catalog's {name} {value} was not resolved")
    if catalog.type == "rest":
        given = {"uri": catalog.uri, "warehouse": catalog.warehouse, "token": catalog.token}
        given["credential"] = catalog.credential
        return {"type": "rest", **{k: v for k, v in given.items() if v is not None}}
    uri = sqlalchemy_url(catalog.uri) if catalog.uri else embedded_uri(data_dir)
    return {"type": "sql", "uri": uri, "warehouse": catalog.warehouse or default_warehouse(data_dir)}


def shown(catalog: IcebergCatalog | None) -> dict[str, str]:
    """What the API and the logs show of a catalog: its type and uri (a reference as given,
    a resolved one with its password masked); `embedded` for none.

    >>> shown(None), shown(IcebergCatalog(uri="env:CATALOG_URL", warehouse="s3://b/w"))
    ({'type': 'embedded'}, {'type': 'sql', 'uri': 'env:CATALOG_URL', 'warehouse': 's3://b/w'})
    >>> shown(IcebergCatalog().model_copy(update={"uri": "postgresql://me:pw@db/wh"}))["uri"]
    'postgresql://me:***@db/wh'
    """
    from warehouse.destinations.postgres import masked  # the package imports this module

    if catalog is None:
        return {"type": "embedded"}
    uri = masked(catalog.uri) if catalog.uri else None
    out = {"type": catalog.type, "uri": uri, "warehouse": catalog.warehouse}
    return {k: v for k, v in out.items() if v is not None}


def open_catalog(props: dict[str, str], data_dir: Path) -> Any:
    """The pyiceberg catalog of `props`, opened once per process and place (a SQL catalog
    holds a pool of connections); the embedded one's directory made."""
    key = tuple(sorted(props.items()))
    with _opening:
        catalog = _opened.get(key)
        if catalog is None:
            from pyiceberg.catalog import load_catalog

            if props["uri"] == embedded_uri(data_dir):
                (Path(data_dir) / EMBEDDED_DIR).mkdir(parents=True, exist_ok=True)
            catalog = _opened[key] = load_catalog(CATALOG_NAME, **props)
        return catalog
