"""Which columns an update changed: the `changed` list of each update line of a delta, and
the per-column change counts of a sync's metrics.

A column changed when its old and new values differ, NULL-safe (NULL to a value and back
each count; NULL to NULL does not; NaN equals NaN, as the delta's own comparison has it).
The key columns never change on an update (they are how old and new rows were matched).
A delta stores the list beside its lines (CHANGED, a list of column names in the view's
column order, null on inserts and deletes); the change feed and delta downloads serve it.
Computed vectorized: Arrow on the driver (touched_delta, join_delta), a Spark column
expression over the joined rows (site_delta).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from pyspark.sql import Column as SparkColumn
from pyspark.sql import functions as F

from warehouse.names import CHANGED, OP, UPDATE
from warehouse.store.versions import Version
from warehouse.viewdef import ViewDef

#: The Arrow type of a stored delta's CHANGED column.
CHANGED_TYPE = pa.list_(pa.string())


def same_values(a: pa.Array | pa.ChunkedArray, b: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """Null-safe equality, NaN equal to NaN (as Spark's <=> compares).

    >>> same_values(pa.chunked_array([[1.0, None, float("nan"), 2.0]]), pa.chunked_array([[1.0, None, float("nan"), None]])).to_pylist()
    [True, True, True, False]
    """
    equal = pc.fill_null(pc.equal(a, b), False)
    both_null = pc.and_(pc.is_null(a), pc.is_null(b))
    out = pc.or_(equal, both_null)
    if pa.types.is_floating(a.type):
        out = pc.or_(out, pc.fill_null(pc.and_(pc.is_nan(a), pc.is_nan(b)), False))
    return out


def changed_lists(differs: Mapping[str, pa.Array | pa.ChunkedArray], updates: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Per row, the names whose `differs` flag is set (in the mapping's order), null where
    `updates` is false: the CHANGED column.

    >>> changed_lists({"a": pa.array([True, False, True]), "b": pa.array([True, False, False])},
    ...               pa.array([True, True, False])).to_pylist()
    [['a', 'b'], [], None]
    """
    names = list(differs)
    rows = len(updates)
    flags = np.zeros((rows, len(names)), dtype=bool)
    for i, name in enumerate(names):
        flags[:, i] = _bools(differs[name])
    is_update = _bools(updates)
    flags &= is_update[:, None]
    _, columns = np.nonzero(flags)  # row-major: each row's names in order
    offsets = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(flags.sum(axis=1), out=offsets[1:])
    values = pa.array(np.array(names, dtype=object)[columns] if names else [], pa.string())
    return pa.ListArray.from_arrays(pa.array(offsets), values, mask=pa.array(~is_update))


def _bools(flags: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Boolean flags as numpy, null read as false."""
    filled = pc.fill_null(flags, False)
    if isinstance(filled, pa.ChunkedArray):
        filled = filled.combine_chunks()
    return np.asarray(filled.to_numpy(zero_copy_only=False), dtype=bool)


def arrow_changed(
    old: Mapping[str, pa.Array | pa.ChunkedArray],
    new: Mapping[str, pa.Array | pa.ChunkedArray],
    updates: pa.Array | pa.ChunkedArray,
) -> pa.Array:
    """The CHANGED column of rows whose old and new values of each non-key column are in
    `old` and `new` (same names), null where `updates` is false.

    >>> arrow_changed({"v": pa.array([None, 1, 2]), "w": pa.array(["x", "y", "z"])},
    ...               {"v": pa.array([3, None, 2]), "w": pa.array(["x", "Y", "z"])},
    ...               pa.array([True, True, True])).to_pylist()
    [['v'], ['v', 'w'], []]
    """
    return changed_lists({n: pc.invert(same_values(old[n], new[n])) for n in new}, updates)


def spark_changed(pairs: Sequence[tuple[str, SparkColumn, SparkColumn]], is_update: SparkColumn) -> SparkColumn:
    """The CHANGED column as a Spark expression: of each (name, old, new), the names whose
    values differ NULL-safe, null where `is_update` is not true."""
    flagged = F.array(*[F.when(~old.eqNullSafe(new), F.lit(name)) for name, old, new in pairs]) if pairs else None
    names = F.filter(flagged, lambda x: x.isNotNull()) if flagged is not None else F.array().cast("array<string>")
    return F.when(is_update, names)


def column_counts(changed: pa.Array | pa.ChunkedArray, names: Sequence[str]) -> dict[str, int]:
    """How many lines name each of `names` in a CHANGED column (every name, zeros too).

    >>> column_counts(pa.array([["a"], None, ["a", "b"], []], CHANGED_TYPE), ["a", "b", "c"])
    {'a': 2, 'b': 1, 'c': 0}
    """
    counts = dict.fromkeys(names, 0)
    flat = pc.list_flatten(changed)
    if len(flat):
        for item in pc.value_counts(flat).to_pylist():
            counts[item["values"]] = counts.get(item["values"], 0) + item["counts"]
    return counts


def of_view(view: ViewDef, delta: Path, stored: Version | None) -> dict[str, int] | None:
    """Updates per non-key column of a keyed view's delta staged at `delta` (Parquet: its
    CHANGED column, update lines only); None for a load (no `stored` version before it), a
    multiset view's lines or a delta without the column."""
    if stored is None or view.multiset:
        return None
    names = [c.name for c in view.columns if c.name not in view.key]
    dataset = ds.dataset(delta, format="parquet")
    if not dataset.files:  # no lines
        return dict.fromkeys(names, 0)
    if CHANGED not in dataset.schema.names:
        return None
    return column_counts(dataset.to_table(columns=[CHANGED], filter=ds.field(OP) == UPDATE).column(CHANGED), names)
