"""What every destination of a view implements: where a view is published after each sync
that changed it, applied exactly once and in order.

A destination is told about one sync at a time, by the service's applier
(service/publishing.py), which asks it first what it holds (`applied`) and then hands it
the syncs after that one, in order. Each call is ONE commit or transaction of the
destination that also records the sync id, so that `applied` read back from the
destination itself after a crash tells exactly where it stands: a sync is never applied
twice nor skipped.

What `apply` receives as `delta` — an iterable of Arrow record batches, each with:

- `OP` (`warehouse.names.OP`, "__op", string):
  - keyed views: "insert" (a new key), "update" (a key whose row changed: the new row),
    "delete" (a key that went; only the key columns are meaningful, the others may be
    NULL). A key appears at most once in one sync's delta. A destination may apply
    inserts and updates alike as an upsert on the key.
  - multiset views: "insert" or "delete" only (the applier splits a matched update into a
    delete of its old row and an insert of its new one).
- the view's columns, in their logical types (`deltasieve_protocol.types.Column.type.arrow()`),
  named as the view's columns and in their order;
- multiset views only: `COUNT` (`warehouse.multisets.multiset.COUNT`, int64, >= 1): how many
  occurrences of that row the line inserts or deletes. Rows are compared on every column,
  NULL equal to NULL.

Nothing else (no sync column, no internal columns). A sync with no change is never handed
to a destination: the applier moves `applied_sync` on in the catalog without a commit. A
delta may have no lines (a sync that only redefined the view): it is still one commit that
records the sync id.

A destination that holds nothing (`applied()` is None) is handed either `rebuild` or, when
the view has had only its first sync, `apply` with that sync's delta (the view's load: every
row an insert): `apply` then creates the table.

Registering a kind: its module (named in warehouse/destinations/__init__.py KINDS) exposes
`from_spec(spec: DestinationSpec, data_dir: Path, view: str, keep_versions: int) -> Destination`.

What `rebuild` receives as `rows`: the view's current rows as Arrow record batches of the
view's columns (logical types, in order); a multiset view's rows each repeated as often as
they occur (no count column) — as both destinations store them.

Modes and load metadata (modes.py): each destination has a mode (`merge`, `soft_delete`,
`history`) and metadata column names, from its spec (`DestinationSpec.mode`, `.columns`), read
by `from_spec`. `apply` and `rebuild` take `synced_at`, the sync's commit time (UTC; None:
now), which with the sync id is every metadata value the commit writes. A kind writes the
mode's columns after the view's (modes.Publishing.fields) and implements the mode through
the four primitives modes.py names (UPSERT, APPEND, REMOVE, CLOSE): `modes.plan` turns a
delta into them as Arrow tables, `modes.ACTIONS` says which each delta line takes for a
kind that applies the delta in SQL. The delta and the rows it is handed stay as below: the
view's columns only.

`columns` are the view's columns after the sync; `key` its key ([] for a multiset view);
`version` the view's version number the sync committed (the destination may record it).
A sync that changed the view's columns (a redefinition, a widened source column, a column
a table view gained) hands its delta in the new columns: a destination takes a widened or
added column in place and raises CannotFollow for anything else; the applier then
rebuilds it from the current version.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Protocol

import pyarrow as pa

from deltasieve_protocol.types import Column
from warehouse.errors import WarehouseError


class CannotFollow(WarehouseError):
    """The delta's columns differ from the destination's in a way it cannot take in place: rebuild it."""


class Destination(Protocol):
    """A place a view is published to: a Delta Lake table, a PostgreSQL table."""

    kind: str  # "delta" | "postgres"

    def describe(self) -> dict:
        """What the API shows of it: {"kind", "uri"} or {"kind", "url" (password masked), "table"}."""
        ...

    def applied(self) -> str | None:
        """The last sync id whose changes it holds, read from the destination itself (None: nothing yet)."""
        ...

    def version_of(self, sync_id: str) -> int | None:
        """The destination's own version that holds sync `sync_id` as its newest (a Delta table's
        version), None where it has no versions or no longer knows it."""
        ...

    def rebuild(
        self,
        sync_id: str,
        version: int,
        columns: list[Column],
        key: list[str],
        rows: Iterable[pa.RecordBatch],
        multiset: bool,
        reason: str,
        synced_at: dt.datetime | None = None,
        with_metadata: bool = False,
    ) -> None:
        """Replace everything by `rows` in ONE commit/transaction that records `sync_id`, marked as a rebuild
        (in `soft_delete` and `history` modes, the rows deleted or replaced before are gone: the table
        starts again from `rows`, each written at `synced_at`). `with_metadata`: `rows` carry the
        mode's metadata columns already (a history the applier replayed from the kept deltas,
        modes.replay), written as they are."""
        ...

    def apply(
        self,
        sync_id: str,
        version: int,
        columns: list[Column],
        key: list[str],
        delta: Iterable[pa.RecordBatch],
        multiset: bool,
        synced_at: dt.datetime | None = None,
    ) -> None:
        """Apply one sync's delta in ONE commit/transaction that records `sync_id`; CannotFollow
        when the columns changed in a way it cannot take in place."""
        ...
