"""What a published table holds of the view: its rows without the metadata columns its mode adds."""

from __future__ import annotations

import pyarrow as pa

from warehouse.view_options import MetadataColumns

#: The metadata columns' default names (warehouse/destinations/modes.py).
METADATA = frozenset(MetadataColumns().model_dump().values())


def view_rows(table) -> pa.Table:
    """The view's columns of a published table (a DeltaTable, or an Arrow table read from one)."""
    rows = table if isinstance(table, pa.Table) else table.to_pyarrow_table()
    return rows.drop_columns([n for n in rows.column_names if n in METADATA])
