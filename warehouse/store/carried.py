"""A site's fragment carried over unchanged to the next version: the build of an empty delta.

When the change token proves that nothing changed at a site (pipeline/change_token.py),
its next fragment is the current one, and what every sync keeps must still read as after a
sync whose delta is empty: each tuple has seen one sync more (TNO), none was updated (UNO),
and the deletion statistics hold one more sync that deleted and inserted nothing. The
files of the current site are linked into the new version (no bytes copied): the base and
its overlay, and whatever the strategies keep (their tables, watermarks and snapshots hold
for the same rows); the overlay's TNO offset grows by one, the update-statistics histogram
advances every tuple by one sync, and the deletion statistics gain their row. Nothing is
read but those two small files, so the build takes the same time whatever the table's size.
"""

from __future__ import annotations

import shutil

import pyarrow as pa

from deltasieve_protocol.types import Column
from warehouse.deltas.touched_delta import TouchedDelta, classify, stored_schema
from warehouse.planning import update_counts
from warehouse.planning.deletions import DELETIONS_SCHEMA, read_deletions
from warehouse.store import layers
from warehouse.store.versions import TMP_MARK, Version

#: What the build writes afresh rather than links: the overlay's description, the
#: histogram, the deletion statistics; and what serves one version only (a sketch table
#: prepared for it, strategies/sketch/prep.py; files being written).
REWRITTEN = (layers.FILE, update_counts.FILE, "deletions", "sketch-prepared")


def _not_carried(directory: str, names: list[str]) -> set[str]:
    """
    >>> sorted(_not_carried("site-0", ["fragment", "layers.json", "sketch", "sketch-prepared.tmp-1f", "deletions"]))
    ['deletions', 'layers.json', 'sketch-prepared.tmp-1f']
    """
    return {n for n in names if n in REWRITTEN or TMP_MARK in n}


def carry(current: Version, staged: Version, site: int, columns: list[Column], key: list[str]) -> TouchedDelta:
    """Stage site `site` of `current` into `staged` as after an empty delta; the (empty) delta."""
    source, target = current.site_dir(site), staged.site_dir(site)
    shutil.copytree(source, target, copy_function=layers.link_file, ignore=_not_carried)
    hist = update_counts.load(source)
    before = update_counts.totals(hist).tuples
    now = layers.Layers.load(source) or layers.whole(before)
    layers.Layers(now.base_rows, now.upsert_rows, now.removed_rows, now.tno_offset + 1, now.cost).save(target)
    update_counts.save(update_counts.advanced(hist, (), ()), target)
    rows = [tuple(r.values()) for r in read_deletions(current, site)] + [(staged.sync_id, before, 0, 0)]
    table = pa.table(list(map(list, zip(*rows, strict=True))), schema=DELETIONS_SCHEMA)
    layers.write_part(table, staged.deletions(site))
    stored = stored_schema(columns)
    key_schema = pa.schema([stored.field(k) for k in key])
    return classify(stored.empty_table(), stored.empty_table(), key_schema.empty_table(), columns, key, before)
