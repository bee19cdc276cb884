"""Destinations: where a view is published after every sync that changed it (base.py).

One module per kind, registered by name in KINDS; each exposes
`from_spec(spec: DestinationSpec, data_dir: Path, view: str, keep_versions: int) -> Destination`
(`keep_versions`: how many of its own versions a destination with a history keeps). A kind's
module is imported only when a destination of that kind is opened or checked, so a kind
whose module (or driver) is missing refuses only the views that ask for it.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from warehouse.defaults import DEFAULT_KEEP_VERSIONS
from warehouse.destinations import iceberg_catalog, object_storage
from warehouse.destinations.base import CannotFollow, Destination
from warehouse.view_options import DestinationSpec

__all__ = [
    "DEFAULT_KEEP_VERSIONS",
    "KINDS",
    "CannotFollow",
    "Destination",
    "available",
    "masked_url",
    "open_destination",
    "public",
]

#: kind -> the module implementing it
KINDS = {
    "delta": "warehouse.destinations.delta",
    "postgres": "warehouse.destinations.postgres",
    "iceberg": "warehouse.destinations.iceberg",
}
#: kind -> the package it needs that an installation may lack (an optional extra)
NEEDS = {"iceberg": "pyiceberg"}


def available(kind: str) -> bool:
    """Whether destinations of `kind` can be opened here (its module, and the package it
    needs, are installed).

    >>> available("delta"), available("nosuch")
    (True, False)
    """
    module = KINDS.get(kind)
    needed = [m for m in (module, NEEDS.get(kind)) if m is not None]
    return module is not None and all(importlib.util.find_spec(m) is not None for m in needed)


def open_destination(
    spec: DestinationSpec, data_dir: Path, view: str, keep_versions: int = DEFAULT_KEEP_VERSIONS
) -> Destination:
    """The destination `spec` describes, for view `view` of the service at `data_dir`."""
    module = importlib.import_module(KINDS[spec.kind])
    return module.from_spec(spec, Path(data_dir), view, keep_versions)


def default_table_uri(data_dir: Path, view: str) -> str:
    """Where a view's Delta table is when its spec names no uri.

    >>> default_table_uri(Path("/data"), "orders")
    '/data/tables/orders'
    """
    return str(Path(data_dir) / "tables" / view)


def masked_url(url: str) -> str:
    """`url` with its password replaced by `***`.

    >>> masked_url("postgresql://me:secret@db:5432/wh"), masked_url("postgresql://db/wh")
    ('postgresql://me:***@db:5432/wh', 'postgresql://db/wh')
    """
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def public(spec: DestinationSpec, data_dir: Path, view: str) -> dict:
    """What the API shows of a destination: kind and uri (and its storage, credentials masked:
    object_storage.py); kind, masked url and table; or kind, catalog and table.

    >>> public(DestinationSpec(kind="delta"), Path("/d"), "v")
    {'kind': 'delta', 'uri': '/d/tables/v'}
    >>> public(DestinationSpec(kind="delta", uri="s3://b/v", storage={"secret_access_key": "fernet:x"}), Path("/d"), "v")
    {'kind': 'delta', 'uri': 's3://b/v', 'storage': {'secret_access_key': '***'}}
    >>> public(DestinationSpec(kind="postgres", url="postgresql://u:p@h/db", table="s.t"), Path("/d"), "v")
    {'kind': 'postgres', 'url': 'postgresql://u:***@h/db', 'table': 's.t'}
    >>> public(DestinationSpec(kind="iceberg", table="wh.v"), Path("/d"), "v")
    {'kind': 'iceberg', 'catalog': {'type': 'embedded'}, 'table': 'wh.v'}
    """
    if spec.kind == "delta":
        shown: dict = {"kind": "delta", "uri": spec.uri or default_table_uri(data_dir, view)}
        if spec.storage is not None:
            shown["storage"] = object_storage.shown(spec.storage)
        return shown
    if spec.kind == "iceberg":
        return {"kind": "iceberg", "catalog": iceberg_catalog.shown(spec.catalog), "table": spec.table}
    return {"kind": spec.kind, "url": masked_url(spec.url or ""), "table": spec.table}
