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
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame

from warehouse.errors import FormatError
from warehouse.names import TNO, UNO
from warehouse.store import parquet_files

#: The histogram: count of tuples per (syncs seen, updates seen).
Histogram = Counter

FILE = "omega.parquet"
SCHEMA = pa.schema([pa.field("tno", pa.int64()), pa.field("uno", pa.int64()), pa.field("count", pa.int64())])


@dataclass(frozen=True)
class UpdateTotals:
    """The sums the planner reads (site_sync._estimate) over the tuples of a histogram.

    With t a tuple's syncs seen and u its updates seen minus its entry, u / t is its update
    probability with no prior, and (u + prior) / t with one: the planner's expected updates
    are Σ u/t + prior · Σ 1/t, and their spread needs the squares of the same terms.
    """

    #: Tuples.
    tuples: int = 0
    #: Observations after each tuple's entry: Σ (t − 1).
    observations: int = 0
    #: Updates seen after each tuple's entry: Σ u.
    updates: int = 0
    #: Σ u/t.
    rates: float = 0.0
    #: Σ 1/t.
    weights: float = 0.0
    #: Σ u²/t².
    rates_squared: float = 0.0
    #: Σ u/t².
    rates_by_weights: float = 0.0
    #: Σ 1/t².
    weights_squared: float = 0.0

    def expected_updates(self, prior: float) -> tuple[float, float]:
        """Σ P(update) over the tuples, and Σ P(update)², each tuple's P = (u + prior) / t.

        >>> totals(Counter({(1, 1): 3, (2, 2): 1})).expected_updates(1.0)
        (4.0, 4.0)
        """
        mean = self.rates + prior * self.weights
        squares = self.rates_squared + 2 * prior * self.rates_by_weights + prior * prior * self.weights_squared
        return mean, squares


def totals(hist: Histogram) -> UpdateTotals:
    """The planner's sums over the tuples of `hist` (UpdateTotals).

    >>> t = totals(Counter({(1, 1): 3, (2, 2): 1}))
    >>> t.tuples, t.observations, t.updates, t.rates, t.weights, t.weights_squared
    (4, 1, 1, 0.5, 3.5, 3.25)
    """
    counts = [0, 0, 0]  # tuples, observations, updates
    moments = [0.0] * 5  # Σ u/t, Σ 1/t, Σ u²/t², Σ u/t², Σ 1/t²
    for (syncs_seen, updates_seen), count in hist.items():
        u, t = updates_seen - 1, float(syncs_seen)
        for i, whole in enumerate((1, syncs_seen - 1, u)):
            counts[i] += count * whole
        for i, term in enumerate((u / t, 1 / t, u * u / (t * t), u / (t * t), 1 / (t * t))):
            moments[i] += count * term
    return UpdateTotals(*counts, *moments)


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


def load(site_dir: Path) -> Histogram:
    """The histogram kept beside a version's fragment (every version keeps one: FormatError
    for a site without it)."""
    path = site_dir / FILE
    if not path.exists():
        raise FormatError(f"{path} is missing: the site's version was not written by this deltasieve")
    columns = parquet_files.read(path).to_pydict()
    return Counter(dict(zip(zip(columns["tno"], columns["uno"]), columns["count"], strict=True)))
