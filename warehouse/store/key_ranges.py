"""Stored rows found by key from the row groups whose key range holds them.

A sync reads the stored rows of the keys it touched (the old rows of updates and deletes).
Parquet keeps, for every row group of a file, the smallest and largest value and the NULL
count of each column. Fragments and their upserts are therefore written sorted by the key, in
row groups of at most ROW_GROUP_ROWS rows (`write_frame`, `sorted_by_key`), so that each row
group of a file spans a narrow range of the first key column. A lookup reads the files'
footers, keeps the row groups whose range holds a wanted key (`holding`) and decodes only
those (`read`); the rest of the fragment is never decompressed.

What that saves depends on how the wanted keys lie. Keys that cluster (recent rows, a range
of ids) fall in few row groups. Keys scattered at random over a fragment of N rows, in files
of row groups of R rows that each span the whole key range (Spark writes one file per
partition, hash-partitioned by the key), touch about 1 - exp(-k·R·files/N) of the row groups:
a lookup decodes less than the whole fragment only while k is well below N / (R·files).

Composite keys are narrowed on their first column and then matched whole; NULL matches NULL
(null_keys.py): a wanted NULL reads the row groups that hold NULLs. Files written before
this (unsorted, large row groups) are read correctly, only without the saving.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from pyspark.sql import DataFrame

from warehouse import null_keys

#: Rows per row group of a fragment or upserts file: the smallest unit a lookup decodes. Smaller
#: groups let fewer keys touch every group but cost footer space and per-group work in every
#: scan; at 16k rows a 1M-row students fragment written by four partitions has 64.
ROW_GROUP_ROWS = 16_384
#: parquet-mr's limit of rows per row group (its byte limit, parquet.block.size, stays as is).
SPARK_ROW_GROUP_OPTION = "parquet.block.row.count.limit"


def sorted_by_key(table: pa.Table, key: list[str]) -> pa.Table:
    """`table` sorted by `key` (NULLs last), as a fragment's rows are stored.

    >>> sorted_by_key(pa.table({"k": [3, None, 1], "v": ["c", "n", "a"]}), ["k"]).to_pydict()
    {'k': [1, 3, None], 'v': ['a', 'c', 'n']}
    """
    return table.sort_by([(k, "ascending") for k in key])


def write_table(table: pa.Table, path: Path, key: list[str], row_group_rows: int = ROW_GROUP_ROWS) -> None:
    """Write `table` to the Parquet file `path` sorted by `key`, in row groups of `row_group_rows`."""
    pq.write_table(sorted_by_key(table, key), path, compression="zstd", row_group_size=row_group_rows)


def write_frame(frame: DataFrame, key: list[str], path: Path, row_group_rows: int = ROW_GROUP_ROWS) -> None:
    """Write a Spark frame as Parquet files under `path`, each sorted by `key` (within its
    partition: no shuffle) in row groups of at most `row_group_rows`."""
    frame.sortWithinPartitions(*key).write.option(SPARK_ROW_GROUP_OPTION, str(row_group_rows)).parquet(str(path))


@dataclass(frozen=True)
class Ranges:
    """The ranges of one column over a file's row groups, from the file's statistics."""

    lows: np.ndarray  # smallest value per row group (as `wanted_values` gives the wanted keys)
    highs: np.ndarray  # largest value per row group
    known: np.ndarray  # whether the row group has a smallest and largest value (not all NULL, statistics kept)
    nulls: np.ndarray  # whether the row group may hold NULLs


def holding(ranges: Ranges, wanted: np.ndarray, wants_null: bool) -> np.ndarray:
    """The row groups that may hold a wanted value: those whose range holds one of `wanted`
    (sorted, without NULL), those that may hold NULLs if NULL is wanted, and those without
    statistics.

    >>> r = Ranges(np.array([1, 10, 20, 0]), np.array([9, 19, 29, 0]), np.array([True, True, True, False]),
    ...            np.array([False, False, True, True]))
    >>> holding(r, np.array([12, 30]), False), holding(r, np.array([5]), True)
    (array([1, 3]), array([0, 2, 3]))
    """
    inside = np.searchsorted(wanted, ranges.lows, "left") < np.searchsorted(wanted, ranges.highs, "right")
    hit = ~ranges.known | (ranges.known & inside) | (ranges.nulls & wants_null)
    return np.nonzero(hit)[0]


#: Types whose Parquet statistics order values as Arrow sorts them (and numpy compares them).
#: Floats are left out: NaN has no place in a range.
_ORDERED = (
    pa.types.is_integer,
    pa.types.is_decimal,
    pa.types.is_string,
    pa.types.is_large_string,
    pa.types.is_binary,
    pa.types.is_large_binary,
    pa.types.is_date,
    pa.types.is_timestamp,
)


def ordered(t: pa.DataType) -> bool:
    """Whether row groups may be chosen by the range of a key column of type `t`.

    >>> ordered(pa.int64()), ordered(pa.string()), ordered(pa.float64())
    (True, True, False)
    """
    return any(test(t) for test in _ORDERED)


def wanted_values(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, bool]:
    """The distinct values of `column` sorted, without NULL, as numpy compares them; and
    whether it holds NULL.

    >>> wanted_values(pa.array(["b", None, "a", "b"]))
    (array(['a', 'b'], dtype=object), True)
    """
    distinct = pc.unique(column)
    values = distinct.drop_null()
    return values.take(pc.sort_indices(values)).to_numpy(zero_copy_only=False), distinct.null_count > 0


def ranges(metadata: pq.FileMetaData, name: str, t: pa.DataType) -> Ranges | None:
    """The ranges of column `name` (of type `t`) over the row groups of a file; None when
    the file does not keep them (no such column, or values that do not convert to `t`)."""
    names = metadata.schema.names
    if name not in names:
        return None
    at = names.index(name)
    lows, highs, known, nulls = [], [], [], []
    for group in range(metadata.num_row_groups):
        stats = metadata.row_group(group).column(at).statistics
        has = stats is not None and stats.has_min_max
        known.append(has)
        lows.append(stats.min if has else None)
        highs.append(stats.max if has else None)
        nulls.append(stats is None or not stats.has_null_count or stats.null_count > 0)
    try:
        low, high = pa.array(lows, t), pa.array(highs, t)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
        return None
    # a group without a range gets a stand-in value (never compared: `known` says so)
    fill = next((v for v in lows if v is not None), None)
    if fill is None:
        fill = null_keys.filler(t).as_py()
    low, high = pc.fill_null(low, pa.scalar(fill, t)), pc.fill_null(high, pa.scalar(fill, t))
    return Ranges(
        low.to_numpy(zero_copy_only=False),
        high.to_numpy(zero_copy_only=False),
        np.array(known, dtype=bool),
        np.array(nulls, dtype=bool),
    )


def row_groups(dataset: ds.Dataset, key: list[str], keys: pa.Table) -> list[tuple[ds.ParquetFileFragment, list[int]]]:
    """The files of a Parquet `dataset`, each with the row groups that may hold one of `keys`
    (a table of the `key` columns, in their stored types): files with none left out."""
    first = keys.column(key[0])
    t = first.type
    wanted, wants_null = wanted_values(first)
    chosen = []
    for fragment in dataset.get_fragments():
        assert isinstance(fragment, ds.ParquetFileFragment)
        metadata = fragment.metadata
        found = ranges(metadata, key[0], t) if ordered(t) else None
        groups = list(range(metadata.num_row_groups)) if found is None else holding(found, wanted, wants_null).tolist()
        if groups:
            chosen.append((fragment, groups))
    return chosen


def read(
    directory: Path,
    schema: pa.Schema,
    key: list[str],
    keys: pa.Table,
    held: Mapping[tuple[str, int], pa.Table] | None = None,
) -> pa.Table:
    """The rows of the Parquet dataset `directory` whose `key` is among `keys` (NULL matching
    NULL), decoding only the row groups whose range of the first key column holds a wanted
    value, and of those only the ones `held` does not hold decoded already (by file path and
    row group, read_ahead.py): columns and types of `schema`. Rows are filtered batch by batch,
    so what is decoded is not held all at once."""
    keys = keys.select(key).cast(pa.schema([schema.field(k) for k in key]))
    held = held or {}
    dataset = ds.dataset(directory, format="parquet")
    found: list[pa.Table] = []
    parts = []
    # the first key column narrows cheaply; the whole key decides, NULL matching NULL
    wanted = pc.unique(keys.column(key[0]).combine_chunks())
    for fragment, groups in row_groups(dataset, key, keys):
        found += [_narrowed(held[fragment.path, g], key[0], wanted) for g in groups if (fragment.path, g) in held]
        rest = [g for g in groups if (fragment.path, g) not in held]
        if rest:
            parts.append(fragment.subset(row_group_ids=rest))
    if parts:
        subset = ds.FileSystemDataset(parts, dataset.schema, dataset.format, dataset.filesystem)
        found += [
            _narrowed(pa.Table.from_batches([b]), key[0], wanted) for b in subset.to_batches(columns=schema.names)
        ]
    if not found:
        return schema.empty_table()
    rows = pa.concat_tables([f.cast(schema) for f in found])
    return null_keys.join(rows, keys, key, "left semi")


def _narrowed(rows: pa.Table, first: str, wanted: pa.Array) -> pa.Table:
    """The rows whose first key column is among `wanted` (NULL is when `wanted` holds it)."""
    return rows.filter(pc.is_in(rows.column(first), value_set=wanted))
