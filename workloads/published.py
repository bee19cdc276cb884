"""What a published table holds of the view: its rows without the metadata columns its mode adds."""

from __future__ import annotations

import time

import pyarrow as pa

from warehouse.view_options import MetadataColumns

#: The metadata columns' default names (warehouse/destinations/modes.py).
METADATA = frozenset(MetadataColumns().model_dump().values())


def view_rows(table) -> pa.Table:
    """The view's columns of a published table (a DeltaTable, or an Arrow table read from one)."""
    rows = table if isinstance(table, pa.Table) else table.to_pyarrow_table()
    return rows.drop_columns([n for n in rows.column_names if n in METADATA])


def wait_published(api, view: str, sync_id: str, within_s: float) -> None:
    """Wait until every destination of `view` holds `sync_id`, none with an error."""
    deadline = time.monotonic() + within_s
    while True:
        destinations = api.http.get(f"/v1/views/{view}").json()["destinations"]
        if all(d["applied_sync"] == sync_id and d["lag_syncs"] == 0 for d in destinations):
            assert all(d["error"] is None for d in destinations), destinations
            return
        assert time.monotonic() < deadline, f"destinations of {view} did not apply {sync_id}: {destinations}"
        time.sleep(0.2)
