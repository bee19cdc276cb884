"""Upkeep of a view's Delta table: its files' layout, compaction and vacuum.

Layout: a keyed view's table is written in files of about TARGET_FILE_BYTES, each holding a
range of keys (the rows sorted by the key when the table is written whole: the load, a
rebuild, a widening rewrite; the table's `delta.targetFileSize` says the same size to every
later write). A sync rewrites only the files its delta's keys fall in (delta_rewrite.py, or
a MERGE pruned by the delta's key range): changes to recent rows (new keys, recently inserted rows changing)
rewrite a file or two, not the table; changes spread over every key still rewrite every
file, no worse than one big file (tests/benchmarks/publishing.py measures both). Sorting
holds the rows written whole in memory (Arrow) once: the load and a rebuild need about the
table's size in memory, where they used to stream.

Compaction, every OPTIMIZE_EVERY table versions: a keyed table is Z-ordered on its key
(sorted again: MERGEs append new files and mix ranges), a multiset one compacted (small
files merged), both in files of TARGET_FILE_BYTES.

Vacuum, each time the table crosses a multiple of `keep_versions` versions: files that no
version since the `keep_versions`-th newest commit carrying a sync id needs are deleted. So
time travel to each of the last `keep_versions` view versions works (`DeltaTable(uri,
version=v)` of the commit carrying it), older ones are gone, and the table's disk is at most
the files of about 2 × keep_versions versions: with every MERGE rewriting the whole table,
that many copies of it; with MERGEs rewriting a file or two, little more than the table.

Every upkeep commit carries `deltasieve.maintenance` and no sync id, and changes no rows.
"""

from __future__ import annotations

from deltalake import CommitProperties, DeltaTable

MAINTENANCE = "deltasieve.maintenance"
SYNC_ID = "deltasieve.sync_id"
#: Bytes of one file (Parquet, compressed): about 100,000 rows of a students-like view, so a
#: MERGE touching recent keys rewrites ~4 MB rather than the whole table, while a 10M-row
#: table is still read from ~100 files.
TARGET_FILE_BYTES = 4 * 1024 * 1024
#: The table property that sizes the files every writer of the table (MERGE too) makes.
FILE_SIZE_PROPERTY = "delta.targetFileSize"
#: Table versions between two compactions: small enough that a view synced every minute
#: keeps its files in key order, large enough that maintenance is a small part of publishing.
OPTIMIZE_EVERY = 50


def configuration() -> dict[str, str]:
    """The table properties deltasieve writes on a table it creates or rewrites whole.

    >>> configuration()
    {'delta.targetFileSize': '4194304'}
    """
    return {FILE_SIZE_PROPERTY: str(TARGET_FILE_BYTES)}


def due(before: int, after: int, every: int) -> bool:
    """Whether going from table version `before` to `after` crossed a multiple of `every`.

    >>> due(9, 10, 10), due(10, 11, 10), due(8, 12, 10), due(-1, 0, 10)
    (True, False, True, False)
    """
    return before >= 0 and after // every > before // every


def maintain(table: DeltaTable, before: int, key: list[str], keep_versions: int) -> bool:
    """The upkeep an apply that moved the table from version `before` on is due for;
    whether it compacted the table (every current file written again)."""
    if table.metadata().configuration.get(FILE_SIZE_PROPERTY) is None:  # a table written before the layout
        table.alter.set_table_properties(configuration(), commit_properties=_marked("layout"))
    after = table.version()
    compacted = due(before, after, OPTIMIZE_EVERY)
    if compacted:
        if key:
            table.optimize.z_order(key, target_size=TARGET_FILE_BYTES, commit_properties=_marked("compact"))
        else:
            table.optimize.compact(target_size=TARGET_FILE_BYTES, commit_properties=_marked("compact"))
    if due(before, after, keep_versions):
        vacuum(table, keep_versions)
    return compacted


def vacuum(table: DeltaTable, keep_versions: int) -> list[str]:
    """Delete the files no version since the `keep_versions`-th newest sync commit needs."""
    table.update_incremental()
    current = table.version()
    carrying = [int(c["version"]) for c in table.history(3 * keep_versions + 8) if SYNC_ID in c]
    oldest = sorted(carrying)[-keep_versions] if len(carrying) >= keep_versions else 0  # fewer: keep all
    return table.vacuum(
        retention_hours=0,
        dry_run=False,
        enforce_retention_duration=False,
        keep_versions=list(range(oldest, current + 1)),
        commit_properties=_marked("vacuum"),
    )


def _marked(what: str) -> CommitProperties:
    return CommitProperties(custom_metadata={MAINTENANCE: what})
