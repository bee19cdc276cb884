"""The sync that applies a redefinition: the stored rows projected, or the new definition's
rows compared with the old ones; the statistics of the keys that survive carried over.

The decision is viewdef/redefinition.py's. Both ways write into the staged version and the
staged delta of the sync, which commits them like any other (versions.py): a failure or a
crash before the commit leaves the old version, and the next sync redoes the redefinition.
The staged delta holds REDEFINED (the definitions before and after, so that the change feed
knows which columns each delta has) beside the difference's Parquet files.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from deltasieve_protocol.grouped import COUNT_COLUMN
from warehouse.deltas.site_delta import counted, view_delta
from warehouse.multisets import combinations
from warehouse.names import DELETE, INSERT, OP, TNO, UNO
from warehouse.planning import update_counts
from warehouse.sample import view_sample
from warehouse.store import key_ranges, layers
from warehouse.store.versions import TMP_MARK, Version, ViewStore
from warehouse.strategies.row_version.strategy import STATE_FILE as ROW_VERSION_STATE
from warehouse.strategies.timestamp import STATE_FILE as TIMESTAMP_STATE
from warehouse.viewdef import ViewDef
from warehouse.viewdef.grouped_site import site_count
from warehouse.viewdef.redefinition import carried, changed_columns, matched_by_key, same_rows

#: Beside a redefining sync's delta files (a leading "_": Parquet readers pass it by).
REDEFINED = "_redefined.json"
#: What a projected site keeps of its old state besides its rows: the update statistics'
#: histogram, the deletion statistics and the watermarks of the strategies that keep one
#: (they say where the source's changes stand, whatever columns are read). Sketch tables
#: hash every column and are built again.
KEPT_STATE = (update_counts.FILE, "deletions", TIMESTAMP_STATE, ROW_VERSION_STATE)


def write_redefined(delta: Path, old: ViewDef, new: ViewDef) -> None:
    """Mark a staged delta as a redefinition's, with both definitions."""
    delta.mkdir(parents=True, exist_ok=True)
    (delta / REDEFINED).write_text(json.dumps({"from": old.to_json(), "to": new.to_json()}))


def redefined(delta: Path) -> tuple[ViewDef, ViewDef] | None:
    """The definitions before and after a stored delta's sync, if that sync redefined the view."""
    path = delta / REDEFINED
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    return ViewDef.from_json(data["from"]), ViewDef.from_json(data["to"])


def pending(stored: Version | None, view: ViewDef) -> ViewDef | None:
    """The definition the stored rows follow (their version records it), if a sync of `view`
    must apply a redefinition."""
    if stored is None:
        return None
    old = ViewDef.from_json(stored.meta()["definition"])
    return None if same_rows(old, view) else old


def projected_base(
    spark: SparkSession, store: ViewStore, stored: Version, old: ViewDef, new: ViewDef, sync_id: str
) -> Version:
    """The stored version projected to the columns of a redefinition that leaves columns out
    (`project`), for the sync to start from: nothing is read at the source for the columns
    kept, and the source's changes since the last sync are found as by any sync."""
    base = Version(stored.number, stored.sync_id, store.projection(sync_id))
    shutil.rmtree(base.path, ignore_errors=True)
    project(spark, stored, base, old, new)
    (base.path / "meta.json").write_text(json.dumps({**stored.meta(), "definition": new.to_json()}))
    return base


def projected(store: ViewStore, sync_id: str, old: ViewDef, new: ViewDef) -> dict:
    """Mark the staged delta of a sync that started from `projected_base` as a redefinition's
    (its schema line first, then the source's changes); what the sync's metrics say of it."""
    write_redefined(store.staged_delta(sync_id), old, new)
    return {"method": "projection", **changed_columns(old, new)}


def compared(
    spark: SparkSession, store: ViewStore, stored: Version, staged: Version, old: ViewDef, new: ViewDef
) -> tuple[tuple[int, int, int], dict]:
    """Turn the staged delta of a redefinition read in full (a load of `new`) into the
    difference from the old view, and carry the statistics of the keys that survive.
    Returns the rows inserted, updated and deleted, and what the sync's metrics say of it."""
    target = store.staged_delta(staged.sync_id)
    counts = difference(spark, stored, staged, old, new, target)
    write_redefined(target, old, new)
    kept = carry_statistics(spark, stored, staged, old, new)
    details = {"method": "read", "matched_by_key": matched_by_key(old, new), "statistics_kept_sites": kept}
    return counts, {**details, **changed_columns(old, new)}


def rows_frame(spark: SparkSession, version: Version, view: ViewDef) -> DataFrame:
    """A keyed view's rows stored at `version`, its columns only."""
    names = [c.name for c in view.columns]
    if view.assembly is None:
        site = view.sites[0]
        return layers.frame(spark, version, 0, site.columns, site.key).select(*names)
    return layers.view_frame(spark, version, view).select(*names)


def project(spark: SparkSession, stored: Version, staged: Version, old: ViewDef, new: ViewDef) -> int:
    """Write into `staged` the version of a one-site view whose redefinition only leaves
    columns out: the stored fragment projected (update statistics as they are), its kept
    state and its sample projected. Nothing is read at the source. Returns the view's rows."""
    was, now = old.sites[0], new.sites[0]
    names = [c.name for c in now.columns]
    projected = layers.frame(spark, stored, 0, was.columns, was.key).select(*names, TNO, UNO)
    key_ranges.write_frame(projected, now.key, staged.fragment(0))
    for name in KEPT_STATE:
        source = stored.site_dir(0) / name
        if source.is_dir():
            shutil.copytree(source, staged.site_dir(0) / name)
        elif source.is_file():
            shutil.copy2(source, staged.site_dir(0) / name)
    sample = view_sample.load(stored)
    if sample is not None:
        rows, _ = sample
        target = staged.path / view_sample.SAMPLE_DIR
        target.mkdir(parents=True)
        pq.write_table(rows.select([c.name for c in new.columns]), target / "part-0.zstd.parquet")
        shutil.copy2(stored.path / view_sample.STATE_FILE, staged.path / view_sample.STATE_FILE)
    return int(stored.meta()["rows"])


def multiset_rows(spark: SparkSession, version: Version, view: ViewDef) -> DataFrame:
    """A multiset view's rows stored at `version`: each distinct content once (NULLs
    restored), with the number of times the view holds it (the count column)."""
    if view.assembly is None:  # one grouped site: a combination of one site (combinations.py)
        site = view.sites[0]
        rows = layers.frame(spark, version, 0, site.columns, site.key)
        return combinations.spark_occurrences(rows.withColumnRenamed(COUNT_COLUMN, site_count(0)), view)
    return combinations.spark_occurrences(layers.view_frame(spark, version, combinations.stored_view(view)), view)


def old_as_new(old_rows: DataFrame, old: ViewDef, new: ViewDef, *kept: str) -> DataFrame:
    """The old view's rows read with the new columns: a column it lacks is NULL, every one
    cast to its new type; the columns `kept` (a multiset's count) as they are."""
    types = {c.name: c.type.spark_ddl() for c in new.columns}
    return old_rows.select(
        *[
            (F.col(f"`{source}`") if source is not None else F.lit(None)).cast(types[name]).alias(name)
            for name, source in carried(old, new).items()
        ],
        *kept,
    )


def difference(
    spark: SparkSession, stored: Version, staged: Version, old: ViewDef, new: ViewDef, target: Path
) -> tuple[int, int, int]:
    """Write into `target` (replacing what is there) the delta from the old view, stored at
    `stored`, to the new one staged at `staged`: matched by the new key when the old rows
    have it (updates for the rows whose values differ), else every old row deleted and every
    new one inserted. Of multisets, the difference of the occurrences of each content (lines
    with counts, no pairs: combinations.spark_net). Returns the rows (a multiset's
    occurrences) inserted, updated and deleted."""
    names = [c.name for c in new.columns]
    if old.multiset and new.multiset:
        before = old_as_new(multiset_rows(spark, stored, old), old, new, COUNT_COLUMN)
        # two old contents may become one with the new columns: their counts add up (spark_net)
        delta = combinations.spark_net(before, multiset_rows(spark, staged, new), names)
        return _replaced(spark, delta, target)
    before = old_as_new(rows_frame(spark, stored, old), old, new)
    after = rows_frame(spark, staged, new)
    if matched_by_key(old, new):
        delta = view_delta(before, after, names, new.key)
    else:
        delta = before.select(F.lit(DELETE).alias(OP), *names).unionByName(
            after.select(F.lit(INSERT).alias(OP), *names)
        )
    return _replaced(spark, delta, target)


def _replaced(spark: SparkSession, delta: DataFrame, target: Path) -> tuple[int, int, int]:
    """Write `delta` in place of the staged delta at `target`; its rows inserted, updated and
    deleted (a multiset's: the occurrences, summed over its lines' counts)."""
    written = target.with_name(target.name + ".difference")
    delta.write.parquet(str(written))
    shutil.rmtree(target, ignore_errors=True)
    os.replace(written, target)
    lines = spark.read.parquet(str(target))
    if COUNT_COLUMN not in lines.columns:
        return counted(lines)
    totals = {r[OP]: r["n"] for r in lines.groupBy(OP).agg(F.sum(COUNT_COLUMN).alias("n")).collect()}
    return totals.get(INSERT, 0), 0, totals.get(DELETE, 0)


def carry_statistics(spark: SparkSession, stored: Version, staged: Version, old: ViewDef, new: ViewDef) -> list[int]:
    """Give the sites that keep their source and key their update statistics for the keys
    that survive (syncs seen one more) and their deletion statistics, in place of the fresh
    ones the new definition's full read staged. Returns the sites carried."""
    done = []
    for i, now in enumerate(new.sites):
        was = old.sites[i] if i < len(old.sites) else None
        if was is None or (was.source, was.key) != (now.source, now.key) or bool(old.multiset) != bool(new.multiset):
            continue
        if not set(now.key) <= {c.name for c in was.columns}:
            continue
        names = [c.name for c in now.columns]
        seen = layers.frame(spark, stored, i, was.columns, was.key).select(
            *now.key, F.col(TNO).alias("__old_tno"), F.col(UNO).alias("__old_uno")
        )
        fresh = layers.frame(spark, staged, i, now.columns, now.key)
        rows = fresh.join(seen, now.key, "left").select(
            *names,
            F.coalesce(F.col("__old_tno") + 1, F.col(TNO)).cast("bigint").alias(TNO),
            F.coalesce(F.col("__old_uno"), F.col(UNO)).cast("bigint").alias(UNO),
        )
        written = staged.site_dir(i) / f"fragment{TMP_MARK}carried"
        key_ranges.write_frame(rows, now.key, written)
        shutil.rmtree(staged.fragment(i))
        os.replace(written, staged.fragment(i))
        carried_rows = spark.read.schema(layers.stored_ddl(now.columns)).parquet(str(staged.fragment(i)))
        update_counts.save(update_counts.of_frame(carried_rows), staged.site_dir(i))
        shutil.rmtree(staged.deletions(i), ignore_errors=True)
        if stored.deletions(i).exists():
            shutil.copytree(stored.deletions(i), staged.deletions(i))
        done.append(i)
    return done
