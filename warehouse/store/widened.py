"""A widened copy of a stored version: its rows cast, on the warehouse's disk, to wider column types.

When a view takes a lossless widening of its columns (viewdef/widening.py), the sync that
takes it starts from this copy instead of the current version: the same files, hard-linked,
except that every Parquet file holding a widened column is rewritten with the column cast
(every value kept: that is what a widening is), and that what was derived from the old
types' encoding (the sketch strategy's tables, hashes of the values) is left out, for the
strategy to build again from the rows. The copy lives under the sync's staging area; the
version the sync commits is built from it as from any current version, so the widening
becomes visible with that version, or not at all.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from warehouse.store.layers import link_file
from warehouse.store.versions import Version

#: Directories of a site (`site-<i>/`) whose Parquet files hold the site query's columns:
#: the fragment and its overlay (layers.py).
SITE_ROWS = ("fragment", "upserts", "removed")
#: Directories of a version whose Parquet files hold the view's columns: its rows, their
#: overlay, its sample (sample/view_sample.py SAMPLE_DIR).
VIEW_ROWS = ("view", "view-overlay", "sample")
#: What a site keeps that was computed from its values' encoding (strategies/sketch): left
#: out of the copy, so that the next sketch exchange builds it from the widened rows.
DERIVED = ("sketch", "key-sketch", "sketch-prepared")
#: Footer key in which Spark records the schema it wrote; a rewritten file must not keep the old one.
SPARK_SCHEMA_KEY = b"org.apache.spark.sql.parquet.row.metadata"


def widened_copy(
    current: Version,
    target: Path,
    site_types: dict[int, dict[str, pa.DataType]],
    view_types: dict[str, pa.DataType],
) -> Version:
    """`current` copied to `target` with the columns named cast to their new Arrow types.

    Args:
        site_types: per site index, site column -> its new type.
        view_types: view column (as stored: a joined multiset's combination columns) -> its new type.

    Returns the copy as a Version of the same number and sync, to start a sync from.
    """
    shutil.rmtree(target, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(current.path, target, copy_function=link_file, ignore=_derived)
    for path in sorted(target.rglob("*.parquet")):
        types = _types_of(path.relative_to(target).parts, site_types, view_types)
        if types and not path.name.startswith("."):
            _cast_file(path, types)
    return Version(current.number, current.sync_id, target)


def _types_of(
    parts: tuple[str, ...], site_types: dict[int, dict[str, pa.DataType]], view_types: dict[str, pa.DataType]
) -> dict[str, pa.DataType]:
    """The new types that apply to a file at `parts` under the version.

    >>> _types_of(("site-1", "fragment", "part-0.parquet"), {1: {"a": pa.int64()}}, {})
    {'a': DataType(int64)}
    >>> _types_of(("site-1", "deletions", "part-0.parquet"), {1: {"a": pa.int64()}}, {}), _types_of(("omega.parquet",), {}, {"a": pa.int64()})
    ({}, {})
    """
    if len(parts) > 2 and parts[0].startswith("site-") and parts[0][5:].isdigit() and parts[1] in SITE_ROWS:
        return site_types.get(int(parts[0][5:]), {})
    return view_types if len(parts) > 1 and parts[0] in VIEW_ROWS else {}


def _cast_file(path: Path, types: dict[str, pa.DataType]) -> None:
    """Rewrite one Parquet file with `types` for the columns it has, a row group at a time
    (the hard link is replaced, not written through)."""
    with pq.ParquetFile(path) as source:
        schema = source.schema_arrow
        if not any(name in types for name in schema.names):
            return
        fields = [pa.field(f.name, types.get(f.name, f.type), f.nullable) for f in schema]
        metadata = {k: v for k, v in (schema.metadata or {}).items() if k != SPARK_SCHEMA_KEY}
        target = pa.schema(fields, metadata=metadata or None)
        tmp = path.with_name(f".{path.name}.widening")
        with pq.ParquetWriter(tmp, target, compression="zstd") as writer:
            for group in range(source.num_row_groups):
                writer.write_table(source.read_row_group(group).cast(target))
    os.replace(tmp, path)
    (path.parent / f".{path.name}.crc").unlink(missing_ok=True)  # Hadoop's checksum of the old bytes


def _derived(directory: str, names: list[str]) -> set[str]:
    return {n for n in names if n in DERIVED or n.startswith(DERIVED[-1])}
