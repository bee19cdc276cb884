"""The rows of a stored view, as the service serves them and a sync compares them."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from warehouse.multisets import combinations, multiset
from warehouse.store import layers
from warehouse.store.versions import Version
from warehouse.viewdef import ViewDef


def view_batches(version: Version, view: ViewDef, batch_rows: int) -> Iterator[pa.RecordBatch]:
    """The rows of a view as of `version`: a one-site view's fragment (a multiset's rows each
    as often as they occur), else the view rows its syncs stored (overlay applied; a
    multiset's, the content of its combinations as often as they hold it)."""
    if view.assembly is None:
        site = view.sites[0]
        rows = layers.batches(version, 0, site.columns, site.key, batch_rows)
        return multiset.view_batches(rows, view, batch_rows) if view.multiset else rows
    if view.multiset:
        stored = combinations.stored_view(view)
        rows = layers.overlaid_batches(version.rows(), version.view_overlay(), stored.columns, stored.key, batch_rows)
        return combinations.view_batches(rows, view, batch_rows)
    return layers.overlaid_batches(version.rows(), version.view_overlay(), view.columns, view.key, batch_rows)
