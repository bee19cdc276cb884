"""The reconciliation table (IBLT) a site's fragment keeps for the sketch strategy.

The table holds one pair (key fingerprint, row hash) per row of the fragment. It is stored
beside the fragment in the view version (so it commits with it), at a width chosen for the
fragment's size, and each sync sends it shrunk to the width that sync's expected number
of differences needs. After a sketch sync it is kept up to date in O(changes): the pairs
that left are subtracted and the pairs of the rows that came back are added. When it is
missing (a load, a sync of another strategy, an audit) or its seed is due for rotation, a
new one is built from the fragment on the executors: in the background right after the
commit that calls for it (sketch_prep.py), or by the sync itself when none was prepared.

The seed is the view's secret for this table: it seeds the key fingerprints, the row
hashes and the cells. Whoever sees one sync's traffic learns it, so it is replaced (and
the table rebuilt) every `rotation` syncs.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from deltasieve_protocol import iblt_arrow
from deltasieve_protocol.fingerprints import key_fingerprints, row_fingerprints, sketch_seeds
from deltasieve_protocol.iblt import Iblt
from deltasieve_protocol.types import Column
from warehouse.store.versions import Version

#: Sub-tables of the table: three hashes need the fewest cells once differences number in
#: the hundreds (see iblt_sizing.cells_for).
HASHES = 3
#: Stored cells per fragment row: a table this wide absorbs differences up to a fifth or so
#: of the rows, past which shipping the site query whole costs less anyway.
STORED_CELLS_PER_ROW = 0.25
#: Narrowest stored sub-table: about 3,000 cells (86 KB) resolve about a thousand
#: differences, so a small table is never the reason a sync falls back.
MIN_WIDTH = 1024
#: Stored widths are this times a power of two (see stored_width): 3^2 * 5 * 7.
WIDTH_BASE = 315
#: Syncs between seed rotations unless the service says otherwise (SERVICE_SKETCH_SEED_ROTATION).
DEFAULT_ROTATION = 100
FILE = "sketch.arrow"


def sketch_dir(version: Version, site: int) -> Path:
    """Where a version keeps a site's table (when it keeps one)."""
    return version.site_dir(site) / "sketch"


def stored_width(rows: int) -> int:
    """Cells per sub-table stored for a fragment of `rows` rows: 315 times a power of two.

    A table shrinks only to a width that divides its own, so the stored width is chosen with
    many divisors: those of 315·2^k lie 8.5 % apart on average (a power of two alone would
    cost up to twice what the statistics ask for, 15·2^k 22 % on average).

    >>> stored_width(0), stored_width(1_000), stored_width(1_000_000)
    (1260, 1260, 161280)
    """
    want = max(MIN_WIDTH, math.ceil(rows * STORED_CELLS_PER_ROW / HASHES))
    return WIDTH_BASE << max(0, math.ceil(math.log2(want / WIDTH_BASE)))


def sent_width(cells: int, stored: int) -> int | None:
    """The narrowest width dividing `stored` that gives at least `cells` cells in all, or
    None if even the stored table is too narrow.

    >>> sent_width(42, 1260), sent_width(3 * 700, 1260), sent_width(3 * 5000, 1260)
    (14, 1260, None)
    """
    return divisor_at_least(math.ceil(cells / HASHES), stored)


def divisor_at_least(want: int, of: int) -> int | None:
    """The smallest divisor of `of` that is at least `want` (and at least 1), or None.

    >>> divisor_at_least(7, 1920), divisor_at_least(2000, 1920)
    (8, None)
    """
    fits = [d for d in divisors(of) if d >= want]
    return min(fits) if fits else None


def divisors(n: int) -> list[int]:
    """
    >>> divisors(12)
    [1, 2, 3, 4, 6, 12]
    """
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def needs_new_table(syncs: int, width: int, rows: int, rotation: int) -> bool:
    """Whether a stored table that served `syncs` syncs under its secret, `width` cells per
    sub-table, cannot serve the next sync of a fragment of `rows` rows: its secret is due
    for rotation, or the fragment outgrew it fourfold.

    >>> needs_new_table(3, 1260, 1_000, rotation=100), needs_new_table(100, 1260, 1_000, rotation=100)
    (False, True)
    >>> needs_new_table(0, 1260, 100_000, rotation=100)  # stored_width(100_000) is 10080
    True
    """
    return syncs >= rotation or width < stored_width(rows) // 4


@dataclass
class SiteSketch:
    """A fragment's table, with its secret and the syncs since the secret was drawn.

    `built_for` is set on a table prepared ahead of a sync (sketch_prep.py): the version
    (number, sync id) whose fragment it holds, so that it serves no other.
    """

    table: Iblt
    syncs: int = 0
    built_for: tuple[int, str] | None = None

    @property
    def secret(self) -> int:
        return self.table.seed

    def pairs(
        self, batch: pa.RecordBatch | pa.Table, columns: list[Column], key: list[Column]
    ) -> tuple[np.ndarray, np.ndarray]:
        key_seed, row_seed = sketch_seeds(self.secret)
        return key_fingerprints(batch, key, key_seed), row_fingerprints(batch, columns, row_seed)

    def save(self, directory: Path) -> None:
        batch = iblt_arrow.to_arrow(self.table)
        meta = dict(batch.schema.metadata or {})
        meta[b"sketch.syncs"] = str(self.syncs).encode()
        if self.built_for is not None:
            meta[b"sketch.version"] = str(self.built_for[0]).encode()
            meta[b"sketch.sync_id"] = self.built_for[1].encode()
        batch = batch.replace_schema_metadata(meta)
        directory.mkdir(parents=True, exist_ok=True)
        with ipc.new_file(directory / FILE, batch.schema, options=ipc.IpcWriteOptions(compression="zstd")) as writer:
            writer.write_batch(batch)

    @classmethod
    def load(cls, directory: Path) -> SiteSketch | None:
        path = directory / FILE
        if not path.exists():
            return None
        with ipc.open_file(path) as reader:
            batch = reader.get_batch(0)
        meta = batch.schema.metadata or {}
        syncs = int(meta.get(b"sketch.syncs", b"0"))
        built_for = None
        if b"sketch.version" in meta:
            built_for = (int(meta[b"sketch.version"]), meta.get(b"sketch.sync_id", b"").decode())
        return cls(iblt_arrow.from_arrow(batch), syncs, built_for)

    @staticmethod
    def peek(directory: Path) -> tuple[int, int] | None:
        """(syncs, width) of the table stored in `directory`, from its footer alone; None if none is."""
        path = directory / FILE
        if not path.exists():
            return None
        with ipc.open_file(path) as reader:
            meta = reader.schema.metadata or {}
        width = int(meta[b"iblt.cells"]) // int(meta[b"iblt.hashes"])
        return int(meta.get(b"sketch.syncs", b"0")), width


def build(
    fragment: DataFrame | pa.Table, columns: list[Column], key: list[Column], rows: int, secret: int | None = None
) -> SiteSketch:
    """The table of a fragment: a Spark frame's built on the executors (a partial table per
    partition, then its occupied cells summed and XORed by cell index, only the table reaching
    the driver); an Arrow table's (the Arrow executor: warehouse/executor.py) the same way in
    this process, as one partition."""
    secret = secrets.randbits(64) if secret is None else secret
    width = stored_width(rows)
    key_seed, row_seed = sketch_seeds(secret)

    def run(batches):
        table = Iblt(width * HASHES, HASHES, secret)
        for batch in batches:
            if batch.num_rows:
                table.add(key_fingerprints(batch, key, key_seed), row_fingerprints(batch, columns, row_seed))
        used = np.flatnonzero(
            (table.count != 0) | (table.key_sum != 0) | (table.hash_sum != 0) | (table.check_sum != 0)
        )
        yield pa.RecordBatch.from_arrays(
            [pa.array(used, pa.int64()), pa.array(table.count[used])]
            + [pa.array(getattr(table, n)[used].view(np.int64)) for n in ("key_sum", "hash_sum", "check_sum")],
            names=["cell", "n", "k", "h", "c"],
        )

    names = [c.name for c in columns]
    if isinstance(fragment, pa.Table):
        cells = pa.Table.from_batches(list(run(fragment.select(names).to_batches())))
    else:
        parts = fragment.select(*names).mapInArrow(run, "cell bigint, n bigint, k bigint, h bigint, c bigint")
        cells = (
            parts.groupBy("cell")
            .agg(F.sum("n").alias("n"), F.bit_xor("k").alias("k"), F.bit_xor("h").alias("h"), F.bit_xor("c").alias("c"))
            .toArrow()
        )
    table = Iblt(width * HASHES, HASHES, secret)
    at = cells.column("cell").to_numpy()
    table.count[at] = cells.column("n").to_numpy()
    table.key_sum[at] = cells.column("k").to_numpy().view(np.uint64)
    table.hash_sum[at] = cells.column("h").to_numpy().view(np.uint64)
    table.check_sum[at] = cells.column("c").to_numpy().view(np.uint64)
    return SiteSketch(table)
