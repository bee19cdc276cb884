"""A fragment kept as a base and an overlay, so that a small change writes a small version.

A sync that changes a few rows of a large fragment should not rewrite the rest. A version
may therefore keep a site's fragment in three parts (`layers.json` says so):

    fragment/   the base: rows with their update statistics columns, hard links to the files of the
                version that wrote them (no bytes copied)
    removed/    keys whose base row no longer holds (deleted or replaced since)
    upserts/    rows inserted or updated since the base was written

The fragment is the base without its removed keys, plus the upserts. A tuple's syncs seen
(TNO, a column of its update statistics) grows by one for every tuple at every sync; the overlay keeps it
relative to an offset (`tno_offset`: syncs since the base was written), so that the
rows left alone need no rewrite. Every reader goes through `frame` (Spark) or `batches`
(Arrow), which apply the overlay and the offset. When the overlay grows past
COMPACT_SHARE of the base, the next sync writes the whole fragment again (a new base).

A version without layers.json holds its whole fragment in `fragment/`, syncs seen as is.
"""

from __future__ import annotations

import json
import operator
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from functools import reduce
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from deltasieve_protocol.types import Column, arrow_schema, key_columns
from warehouse import null_keys
from warehouse.names import TNO, UNO, spark_schema
from warehouse.store import key_ranges
from warehouse.store.read_ahead import Held, ReadAhead
from warehouse.store.versions import Version
from warehouse.viewdef import ViewDef

FILE = "layers.json"
#: The overlay (upserts and removed keys) may grow to this share of the base's rows before
#: a sync writes the fragment whole again: reads pay for the overlay, writes for the base.
COMPACT_SHARE = 0.25


@dataclass(frozen=True)
class Layers:
    """What a version's overlay holds (layers.json)."""

    base_rows: int
    upsert_rows: int
    removed_rows: int
    tno_offset: int
    #: The cost model measured for the base (costs.py), reused while the overlay is small.
    cost: dict | None = None

    def overlay_rows(self) -> int:
        return self.upsert_rows + self.removed_rows

    def room_for(self, more: int) -> bool:
        """Whether `more` overlay rows keep the overlay within COMPACT_SHARE of the base.

        >>> Layers(1000, 100, 50, 3).room_for(100), Layers(1000, 100, 50, 3).room_for(101)
        (True, False)
        """
        return self.overlay_rows() + more <= COMPACT_SHARE * self.base_rows

    def save(self, site_dir: Path) -> None:
        (site_dir / FILE).write_text(json.dumps(asdict(self)))

    @classmethod
    def load(cls, site_dir: Path) -> Layers | None:
        path = site_dir / FILE
        return cls(**json.loads(path.read_text())) if path.exists() else None


def whole(rows: int) -> Layers:
    """The layers of a fragment written whole: all base, no overlay."""
    return Layers(rows, 0, 0, 0)


def stored_ddl(columns: list[Column]) -> str:
    """Spark DDL of a fragment: the site columns and the update statistics (TNO, UNO)."""
    return spark_schema(columns) + f", {TNO} bigint, {UNO} bigint"


def frame(spark: SparkSession, version: Version, site: int, columns: list[Column], key: list[str]) -> DataFrame:
    """The fragment with its update statistics (syncs seen counted up to `version`), overlay applied."""
    schema = stored_ddl(columns)
    names = [c.name for c in columns]
    site_dir = version.site_dir(site)
    base = spark.read.schema(schema).parquet(str(version.fragment(site))).select(*names, TNO, UNO)
    layers = Layers.load(site_dir)
    if layers is None:
        return base
    rows = _overlaid(spark, base, site_dir, layers, schema, columns, key)
    if layers.tno_offset:
        rows = rows.withColumn(TNO, (F.col(TNO) + F.lit(layers.tno_offset)).cast("bigint"))
    return rows


def view_frame(spark: SparkSession, version: Version, view: ViewDef) -> DataFrame:
    """The rows a view over several sites stored at `version`, overlay applied."""
    names = [c.name for c in view.columns]
    base = spark.read.schema(spark_schema(view.columns)).parquet(str(version.rows())).select(*names)
    layers = Layers.load(version.view_overlay())
    if layers is None:
        return base
    ddl = spark_schema(view.columns)
    return _overlaid(spark, base, version.view_overlay(), layers, ddl, view.columns, view.key)


def _overlaid(
    spark: SparkSession,
    base: DataFrame,
    overlay: Path,
    layers: Layers,
    ddl: str,
    columns: list[Column],
    key: list[str],
) -> DataFrame:
    """`base` without the overlay's removed keys, plus its upserts (stored with schema `ddl`)."""
    if layers.removed_rows:
        removed = spark.read.schema(spark_schema(key_columns(columns, key))).parquet(str(overlay / "removed"))
        base = without_keys(base, removed, key)
    if layers.upsert_rows:
        base = base.unionByName(spark.read.schema(ddl).parquet(str(overlay / "upserts")).select(*base.columns))
    return base


def without_keys(rows: DataFrame, keys: DataFrame, key: list[str]) -> DataFrame:
    """`rows` less those whose `key` is among `keys`, NULL matching NULL (a view's key may
    hold a LEFT JOIN's columns, null_keys.py)."""
    return rows.join(keys, reduce(operator.and_, [rows[k].eqNullSafe(keys[k]) for k in key]), "left_anti")


def batches(
    version: Version, site: int, columns: list[Column], key: list[str], batch_rows: int
) -> Iterator[pa.RecordBatch]:
    """The fragment's rows (site columns only, in their logical Arrow types), overlay applied."""
    return overlaid_batches(version.fragment(site), version.site_dir(site), columns, key, batch_rows)


def overlaid_batches(
    base: Path, overlay: Path, columns: list[Column], key: list[str], batch_rows: int
) -> Iterator[pa.RecordBatch]:
    schema = arrow_schema(columns)
    layers = Layers.load(overlay)
    removed = None
    if layers is not None and layers.removed_rows:
        removed = pq.read_table(overlay / "removed").cast(pa.schema([schema.field(k) for k in key]))
    for batch in ds.dataset(base, format="parquet").to_batches(columns=schema.names, batch_size=batch_rows):
        table = pa.Table.from_batches([batch]).cast(schema)
        if removed is not None:
            table = null_keys.join(table, removed, key, "left anti")
        yield from table.to_batches()
    if layers is not None and layers.upsert_rows:
        for batch in ds.dataset(overlay / "upserts", format="parquet").to_batches(
            columns=schema.names, batch_size=batch_rows
        ):
            yield from pa.Table.from_batches([batch]).cast(schema).to_batches()


def lookup(
    version: Version, site: int, columns: list[Column], key: list[str], keys: pa.Table, held: Held | None = None
) -> pa.Table:
    """The stored rows of `keys` (site columns and update statistics, syncs seen counted up to `version`, overlay
    applied, as `frame` has them; NULL matching NULL), read with Arrow: of the base and the upserts only the row
    groups whose range of the first key column holds a wanted key are decoded (key_ranges.py), and of those
    only the ones not `held` decoded already (`read_ahead`)."""
    schema = _stored_schema(columns)
    return _stored(version, site, key, schema, lambda directory: key_ranges.read(directory, schema, key, keys, held))


def read_ahead(version: Version, site: int, columns: list[Column]) -> ReadAhead:
    """The row groups a `lookup` of the fragment may decode (the base's, then the upserts'),
    decoded from now on a thread of their own (read_ahead.py)."""
    return ReadAhead([version.fragment(site), version.site_dir(site) / "upserts"], read_ahead_columns(columns))


def read_ahead_columns(columns: list[Column]) -> list[str]:
    """The columns a `lookup` decodes: the site's and the update statistics.

    >>> from deltasieve_protocol.types import LogicalType
    >>> read_ahead_columns([Column("id", LogicalType("int"))])
    ['id', '__tno', '__uno']
    """
    return _stored_schema(columns).names


def table(version: Version, site: int, columns: list[Column], key: list[str]) -> pa.Table:
    """The whole fragment as `frame` has it (site columns and update statistics), read with Arrow: for a
    fragment small enough to hold on the driver."""
    schema = _stored_schema(columns)
    return _stored(version, site, key, schema, _filtered(schema, None))


def rows_where(version: Version, site: int, columns: list[Column], key: list[str], where: ds.Expression) -> pa.Table:
    """The fragment's rows that satisfy `where` (as `table` has them), read with Arrow: the
    files are filtered as they are read."""
    schema = _stored_schema(columns)
    return _stored(version, site, key, schema, _filtered(schema, where))


def _stored_schema(columns: list[Column]) -> pa.Schema:
    return arrow_schema(columns).append(pa.field(TNO, pa.int64())).append(pa.field(UNO, pa.int64()))


def _stored(
    version: Version, site: int, key: list[str], schema: pa.Schema, read: Callable[[Path], pa.Table]
) -> pa.Table:
    """The fragment's rows that `read` gives (of the base and of the upserts), overlay and tno offset applied."""
    layers = Layers.load(version.site_dir(site))
    rows = _read_overlaid(version.fragment(site), version.site_dir(site), layers, schema, key, read)
    if layers is not None and layers.tno_offset:
        rows = rows.set_column(
            rows.schema.get_field_index(TNO), TNO, pc.add(rows.column(TNO), pa.scalar(layers.tno_offset, pa.int64()))
        )
    return rows


def view_lookup(version: Version, view: ViewDef, wanted: ds.Expression) -> pa.Table:
    """The rows of a view over several sites stored at `version` (overlay applied) that
    satisfy `wanted`, read with Arrow: the files are filtered as they are read."""
    overlay = version.view_overlay()
    schema = arrow_schema(view.columns)
    return _read_overlaid(version.rows(), overlay, Layers.load(overlay), schema, view.key, _filtered(schema, wanted))


def _filtered(schema: pa.Schema, wanted: ds.Expression | None) -> Callable[[Path], pa.Table]:
    """A reader of a Parquet directory's rows that satisfy `wanted` (all if None), as `schema` has them."""

    def read(directory: Path) -> pa.Table:
        return ds.dataset(directory, format="parquet").to_table(columns=schema.names, filter=wanted).cast(schema)

    return read


def _read_overlaid(
    base: Path,
    overlay: Path,
    layers: Layers | None,
    schema: pa.Schema,
    key: list[str],
    read: Callable[[Path], pa.Table],
) -> pa.Table:
    """The rows `read` gives of `base`, without the overlay's removed keys (NULL matching
    NULL), plus those it gives of the upserts: columns and types of `schema`."""
    rows = read(base)
    if layers is not None and layers.removed_rows:
        removed = pq.read_table(overlay / "removed").select(key).cast(pa.schema([schema.field(k) for k in key]))
        rows = null_keys.join(rows, removed, key, "left anti")
    if layers is not None and layers.upsert_rows:
        rows = pa.concat_tables([rows, read(overlay / "upserts")])
    return rows


def link_files(source: Path, target: Path) -> None:
    """Give directory `target` the files of `source`: hard links (a copy where the file
    system has none), no bytes written."""
    target.mkdir(parents=True, exist_ok=True)
    for entry in source.iterdir():
        if entry.is_file():
            link_file(entry, target / entry.name)


def link_file(source: Path | str, target: Path | str) -> None:
    """File `source` at `target` too: a hard link (a copy where the file system has none)."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def grown(
    overlay: Path, layers: Layers, schema: pa.Schema, key_schema: pa.Schema, replaced: pa.Table, rows: pa.Table
) -> tuple[pa.Table, pa.Table]:
    """The overlay stored in `overlay` (whose layers are `layers`) after a change: upserts
    without the `replaced` keys (rows deleted or updated since) plus the new `rows`, and
    the removed keys with `replaced` added. Returned as (upserts, removed)."""
    key = key_schema.names
    upserts, removed = schema.empty_table(), key_schema.empty_table()
    if layers.upsert_rows:
        upserts = pq.read_table(overlay / "upserts").select(schema.names).cast(schema)
    if layers.removed_rows:
        removed = pq.read_table(overlay / "removed").select(key).cast(key_schema)
    replaced = replaced.select(key).cast(key_schema)
    upserts = pa.concat_tables(
        [
            null_keys.join(upserts, replaced, key, "left anti"),
            rows.select(schema.names).cast(schema),
        ]
    )
    return upserts, pa.concat_tables([removed, replaced]).group_by(key).aggregate([]).select(key)


def write_overlay(overlay: Path, upserts: pa.Table, removed: pa.Table, layers: Layers, key: list[str]) -> None:
    """Store an overlay (its base is linked beside it by the caller): parts and layers.json;
    the upserts sorted by `key`, for lookups (key_ranges.py)."""
    if upserts.num_rows:
        write_part(upserts, overlay / "upserts", key)
    if removed.num_rows:
        write_part(removed, overlay / "removed")
    overlay.mkdir(parents=True, exist_ok=True)
    layers.save(overlay)


def link_overlay(current: Path, overlay: Path, layers: Layers) -> None:
    """Store in `overlay` the overlay of site directory `current` unchanged (its parts linked,
    no bytes written), described by `layers`: the next version of a site where nothing changed."""
    for part in ("upserts", "removed"):
        if (current / part).is_dir():
            link_files(current / part, overlay / part)
    overlay.mkdir(parents=True, exist_ok=True)
    layers.save(overlay)


def write_part(table: pa.Table, directory: Path, key: list[str] | None = None) -> None:
    """One Parquet file in `directory` (a dataset Spark and Arrow both read); with `key`,
    rows sorted by it in row groups a lookup can pick from (key_ranges.py)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "part-0.zstd.parquet"
    if key is None:
        pq.write_table(table, path, compression="zstd")
    else:
        key_ranges.write_table(table, path, key)
