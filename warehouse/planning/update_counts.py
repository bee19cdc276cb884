"""Update statistics as a histogram: how many tuples of a fragment have each pair of counts.

A tuple's update statistics are two counters: the syncs it has seen (stored as TNO,
counting its entry) and the updates it has seen (UNO, counting the entry as one). The
planner needs sums over the fragment's tuples of functions of this pair — how many
observations and updates were seen, and the moments of P(update t). Tuples sharing a pair
contribute alike, and few pairs occur, so the sums are taken over the histogram instead of
the fragment. The histogram is kept beside each version (`omega.parquet`) and carried from
one version to the next by the changed tuples alone: every tuple sees one sync more, the
replaced and deleted ones leave, the new and updated ones arrive — work in
proportion to the change, not to the fragment.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame

from warehouse.names import TNO, UNO

#: The histogram: count of tuples per (syncs seen, updates seen).
Histogram = Counter

FILE = "omega.parquet"
SCHEMA = pa.schema([pa.field("tno", pa.int64()), pa.field("uno", pa.int64()), pa.field("count", pa.int64())])


def totals(hist: Histogram) -> dict:
    """The sums the planner reads (site_sync._estimate) over the tuples of the histogram.

    With t a tuple's syncs seen and u its updates seen minus its entry (so that u / t is
    its update probability with no prior): tuples `n`, observations `obs` = Σ(t − 1),
    updates `upd` = Σ u, and a = Σ u/t, b = Σ 1/t, c = Σ u²/t², e = Σ u/t², f = Σ 1/t².

    >>> t = totals(Counter({(1, 1): 3, (2, 2): 1}))
    >>> t["n"], t["obs"], t["upd"], t["a"], t["b"], t["f"]
    (4, 1, 1, 0.5, 3.5, 3.25)
    """
    out = dict.fromkeys(("n", "obs", "upd"), 0) | dict.fromkeys(("a", "b", "c", "e", "f"), 0.0)
    for (syncs_seen, updates_seen), count in hist.items():
        u, t = updates_seen - 1, float(syncs_seen)
        out["n"] += count
        out["obs"] += count * (syncs_seen - 1)
        out["upd"] += count * u
        out["a"] += count * u / t
        out["b"] += count / t
        out["c"] += count * u * u / (t * t)
        out["e"] += count * u / (t * t)
        out["f"] += count / (t * t)
    return out


def advanced(hist: Histogram, left: Iterable[tuple[int, int]], arrived: Iterable[tuple[int, int]]) -> Histogram:
    """The histogram of the next version: every tuple observed once more; the tuples that
    `left` (their counts before this sync: replaced or deleted) out, those that
    `arrived` (their counts after it: inserted or updated) in.

    >>> h = advanced(Counter({(1, 1): 3}), left=[(1, 1)], arrived=[(2, 2), (1, 1)])
    >>> sorted(h.items())
    [((1, 1), 1), ((2, 1), 2), ((2, 2), 1)]
    """
    out = Counter({(syncs + 1, updates): count for (syncs, updates), count in hist.items()})
    for syncs, updates in left:
        out[(syncs + 1, updates)] -= 1
    out.update(arrived)
    if any(count < 0 for count in out.values()):
        raise ValueError("a tuple left the histogram that it did not hold")
    return Counter({pair: count for pair, count in out.items() if count})


def of_frame(fragment: DataFrame) -> Histogram:
    """The histogram of a fragment (one aggregation on the executors)."""
    rows = fragment.groupBy(TNO, UNO).count().collect()
    return Counter({(r[TNO], r[UNO]): r["count"] for r in rows})


def of_table(fragment: pa.Table) -> Histogram:
    """The histogram of a fragment held in Arrow (with the update statistics columns).

    >>> sorted(of_table(pa.table({TNO: [1, 1, 3], UNO: [1, 1, 2]})).items())
    [((1, 1), 2), ((3, 2), 1)]
    """
    counts = fragment.group_by([TNO, UNO]).aggregate([([], "count_all")])
    return Counter(dict(zip(pairs(counts), counts.column("count_all").to_pylist(), strict=True)))


def pairs(table: pa.Table) -> list[tuple[int, int]]:
    """The (syncs seen, updates seen) of each row of an Arrow table with the update statistics columns.

    >>> pairs(pa.table({TNO: [1, 3], UNO: [1, 2]}))
    [(1, 1), (3, 2)]
    """
    return list(zip(table.column(TNO).to_pylist(), table.column(UNO).to_pylist(), strict=True))


def save(hist: Histogram, site_dir: Path) -> None:
    """Keep `hist` beside a version's fragment (columns tno, uno, count: a stored format)."""
    items = sorted(hist.items())
    table = pa.table(
        [[t for (t, _), _ in items], [u for (_, u), _ in items], [c for _, c in items]],
        schema=SCHEMA,
    )
    pq.write_table(table, site_dir / FILE)


def load(site_dir: Path) -> Histogram | None:
    """The histogram kept beside a version's fragment; None for versions written without one."""
    path = site_dir / FILE
    if not path.exists():
        return None
    columns = pq.read_table(path).to_pydict()
    return Counter(dict(zip(zip(columns["tno"], columns["uno"]), columns["count"], strict=True)))
