"""A uniform random sample of a view's rows, kept from each sync's delta.

The sample follows Gemulla and Lehner, "Deferred Maintenance of Disk-Based Random Samples".

A view with `"sample_size": M` keeps, in every version, a uniform random sample of at most
M of its rows (`sample/` as Parquet, the file's row order its positions) and its state
(`sample.json`): committed with the version, so a failed sync leaves the sample of the
version before it, like the view.

Each sync applies its delta to the sample in three steps, deletes before inserts (the
delta is net, so its order is ours to choose):

1. Deleted rows leave the sample and updated rows take their new values in place. A
   uniform sample less some of its rows is a uniform sample of the rest, of a smaller size
   s: the sample may shrink.
2. The inserts are streamed through reservoir sampling at size s: while the sample holds
   the whole view and fewer than M rows, an insert joins it; otherwise the i-th insert
   after N rows is a *candidate* with probability s / (N + i). Only candidates are logged
   (the candidate log, held in memory: E(|C|) ≈ s ln((N + n) / N) of n inserts).
3. The log is applied by a deferred refresh (sample_refresh.py): only the final
   candidates are read and written, in one sequential pass over the log and one over the
   sample; stack refresh while few are expected to be final, nomem above.

The refresh runs at each sync, not when the sample is read: the sync writes a new version
anyway, and the sample must be exact for that version; reads then never wait nor write,
and a sync's log is small (E(|C|) above for its n inserts). Deferring over several syncs
would only save the rewrite of an M-row file per sync.

When deletes have shrunk the sample below M while the view holds more rows, it is topped
up from the view at the same sync, so the sample keeps its size while the view has that
many rows: the missing rows are drawn uniformly from the view's rows outside the sample.
The top-up is uniform because a uniform sample S less some of its rows is a uniform sample
of the rest, and adding a uniform sample T of the view's rows outside S gives every subset
of the view of |S| + |T| rows the same chance. It costs one local scan of the view's stored
rows (`view_rows_read`), paid only by a sync whose deletes hit the sample; the deltas' inserts
stay with the deferred refresh. A load, a view's first sample and a larger M
are built so too; a smaller M keeps a uniform subset.

A multiset view (no key) samples occurrences, and its delta names contents with counts:
`multiset_removals` takes out of the sample's copies of a content as many as the deleted
occurrences would hit (hypergeometric, the content's count read from the stored view), and
a top-up draws the whole sample anew, equal occurrences being indistinguishable.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from deltasieve_protocol.types import arrow_schema
from warehouse import null_keys
from warehouse.formats import check_format
from warehouse.multisets import combinations, multiset
from warehouse.multisets.multiset import COUNT, OLD_PREFIX
from warehouse.names import DELETE, INSERT, OP, UPDATE
from warehouse.sample import refresh as sample_refresh
from warehouse.store import layers
from warehouse.store.versions import Version
from warehouse.viewdef import ViewDef

SAMPLE_DIR, STATE_FILE = "sample", "sample.json"
#: Inserts read from the delta at a time for the acceptance test.
INSERT_BATCH_ROWS = 65_536
#: The format of sample.json (formats.py).
SAMPLE_FORMAT = 1
_PRIORITY = "__ds_priority"


@dataclass
class SampleState:
    """What `sample.json` holds: the sample's size and how its last maintenance went."""

    target: int  # M
    size: int  # s, at most M
    view_rows: int  # N, the view's rows at this version
    #: the last sync's maintenance: candidates logged, their expected number, final
    #: candidates written and their expected number, the refresh ("stack", "nomem"; "build" when drawn
    #: from the view), rows the sync read from the view (a build) and wrote to the sample
    log_length: int = 0
    expected_log_length: float = 0.0
    displaced: int = 0
    expected_displaced: float = 0.0
    method: str = "build"
    view_rows_read: int = 0
    rows_written: int = 0
    refills: int = 0  # builds since the first, over the view's life

    def to_json(self) -> dict:
        return {"format": SAMPLE_FORMAT, **asdict(self)}


@dataclass
class Maintenance:
    """One sync's change of a sample: the new sample and its state."""

    rows: pa.Table
    state: SampleState


@dataclass(frozen=True)
class SampleSettings:
    """What a view asks of its sample."""

    target: int  # M, the most rows it holds
    key: list[str]  # the view's key; empty for a multiset, whose equal occurrences cannot be told apart
    schema: pa.Schema  # the view's columns, as the sample stores them
    #: the deferred refresh ("stack", "nomem"); None: the one sample_refresh.method picks for the log
    method: str | None = None


@dataclass(frozen=True)
class ViewChange:
    """What a sync changed in the view, as its sample's maintenance reads it."""

    view_rows_before: int  # N before the sync
    view_rows: int  # N after it
    #: rows the delta deleted (a multiset: the occurrences its delete and update lines take)
    deletes: int
    #: streams the inserted rows, in order
    inserts: Callable[[], Iterator[pa.Table]]
    #: the keys deleted (at least every sampled one) and the rows updated, with their new values
    #: (at least the sampled ones); a multiset gives `removals` instead
    deleted: pa.Table | None = None
    updated: pa.Table | None = None
    #: a multiset's removals of its deleted and updated occurrences (multiset_removals)
    removals: Callable[[pa.Table], tuple[pa.Table, int]] | None = None

    def removed_from(self, rows: pa.Table, key: list[str]) -> tuple[pa.Table, int]:
        """The sample `rows` less its deleted rows and with its updated rows' new values, and
        the number of sampled rows updated."""
        if self.removals is not None:
            return self.removals(rows)
        return apply_removals(rows, key, self.deleted, self.updated)


def state_of(version: Version | None) -> SampleState | None:
    """The state of the sample stored with `version`, if it has one."""
    if version is None or not (version.path / STATE_FILE).exists():
        return None
    data = json.loads((version.path / STATE_FILE).read_text())
    check_format(data, SAMPLE_FORMAT, f"the sample of version {version.number} ({version.path / STATE_FILE})")
    del data["format"]
    return SampleState(**data)


def load(version: Version | None) -> tuple[pa.Table, SampleState] | None:
    """The sample stored with `version` and its state, if it has one."""
    state = state_of(version)
    if version is None or state is None:
        return None
    return pq.read_table(version.path / SAMPLE_DIR), state


def save(version: Version, sample: Maintenance) -> None:
    """Write the sample into a staged version (committed with it)."""
    target = version.path / SAMPLE_DIR
    target.mkdir(parents=True, exist_ok=True)
    pq.write_table(sample.rows, target / "part-0.zstd.parquet", compression="zstd")
    (version.path / STATE_FILE).write_text(json.dumps(sample.state.to_json()))


def apply_removals(rows: pa.Table, key: list[str], deleted: pa.Table, updated: pa.Table) -> tuple[pa.Table, int]:
    """The sample less its rows whose key is in `deleted`, and with the new values of its
    rows whose key is in `updated` (moved to the end: positions are exchangeable). Returns
    it and the number of sampled rows updated.

    >>> s = pa.table({"k": [1, 2, 3], "v": ["a", "b", "c"]})
    >>> out, n = apply_removals(s, ["k"], pa.table({"k": [2, 9]}), pa.table({"k": [3, 8], "v": ["C", "x"]}))
    >>> out.to_pylist(), n
    ([{'k': 1, 'v': 'a'}, {'k': 3, 'v': 'C'}], 1)
    """
    keys = rows.select(key).schema
    if deleted.num_rows:
        rows = null_keys.join(rows, deleted.select(key).cast(keys), key, "left anti")
    if not updated.num_rows:
        return rows, 0
    new = null_keys.join(updated.select(rows.column_names).cast(rows.schema), rows.select(key), key, "left semi")
    kept = null_keys.join(rows, new.select(key), key, "left anti")
    return pa.concat_tables([kept, new]), new.num_rows


def log_candidates(
    inserts: Iterator[pa.Table | pa.RecordBatch], size: int, view_rows: int, target: int, rng: np.random.Generator
) -> tuple[list[pa.Table], pa.Table | None, int]:
    """Reservoir sampling's acceptance test on the inserts, in order, for a sample of `size`
    rows of a view of `view_rows`: the rows that join the sample directly (while it holds
    the whole view and fewer than `target`), the candidate log, and the number of inserts.

    >>> ins = iter([pa.table({"k": list(range(10))})])
    >>> joined, log, n = log_candidates(ins, 2, 2, 5, np.random.default_rng(0))
    >>> sum(t.num_rows for t in joined), n, log.num_rows <= 7
    (3, 10, True)
    """
    joined, logged, seen = [], [], 0
    for batch in inserts:
        batch = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
        n = batch.num_rows
        start = 0
        if size == view_rows + seen and size < target:  # whole and short: rows join as they come
            start = min(n, target - size)
            joined.append(batch.slice(0, start))
            size += start
        before = view_rows + seen + start  # rows ahead of the batch's first candidate test
        tests = n - start
        if tests:
            chance = size / (before + np.arange(1, tests + 1, dtype=np.float64))
            accepted = np.flatnonzero(rng.random(tests) < chance) + start
            logged.append(batch.take(pa.array(accepted)))
        seen += n
    log = pa.concat_tables(logged) if logged else None
    return joined, log, seen


def refreshed(
    rows: pa.Table, log: pa.Table | None, rng: np.random.Generator, method: str | None = None
) -> tuple[pa.Table, list]:
    """The sample with the final candidates of `log` written over the positions the refresh
    plan gives them (sample_refresh.py): one pass over each, in order.

    >>> s = pa.table({"k": [1, 2, 3]})
    >>> out, plan = refreshed(s, pa.table({"k": [7, 8]}), np.random.default_rng(3))
    >>> out.num_rows, sorted(out.column("k").to_pylist())[-1], len(plan) >= 1
    (3, 8, True)
    """
    if log is None or not log.num_rows or not rows.num_rows:
        return rows, []
    name = method or sample_refresh.method(rows.num_rows, log.num_rows)
    plan = sample_refresh.refresh(name, rows.num_rows, log.num_rows, rng)
    if not plan:
        return rows, plan
    positions = np.array([p for p, _ in plan], dtype=np.int64)
    chosen = log.take(pa.array([i for _, i in plan], pa.int64())).select(rows.column_names).cast(rows.schema)
    source = np.arange(rows.num_rows, dtype=np.int64)
    source[positions] = rows.num_rows + np.arange(len(plan), dtype=np.int64)
    return pa.concat_tables([rows, chosen]).take(pa.array(source)), plan


def drawn(
    batches: Iterator[pa.RecordBatch], count: int, exclude: pa.Table | None, key: list[str], rng: np.random.Generator
) -> tuple[pa.Table | None, int]:
    """`count` rows drawn uniformly from a stream of rows less those whose key is in
    `exclude`: each row gets a random priority and the `count` smallest are kept (memory:
    `count` rows and a batch). Returns them and the rows read.

    >>> t = pa.table({"k": list(range(100))})
    >>> rows, read = drawn(iter(t.to_batches(max_chunksize=30)), 5, pa.table({"k": [0, 1]}), ["k"], np.random.default_rng(2))
    >>> rows.num_rows, read, 0 in rows.column("k").to_pylist()
    (5, 100, False)
    """
    kept: pa.Table | None = None
    read = 0
    for batch in batches:
        table = pa.Table.from_batches([batch])
        read += table.num_rows
        if exclude is not None and exclude.num_rows:
            table = null_keys.join(table, exclude.select(key).cast(table.select(key).schema), key, "left anti")
        table = table.append_column(_PRIORITY, pa.array(rng.random(table.num_rows)))
        kept = table if kept is None else pa.concat_tables([kept, table])
        if kept.num_rows > count:
            kept = kept.sort_by(_PRIORITY).slice(0, count)
    if kept is None:
        return None, read
    return kept.drop_columns([_PRIORITY]).slice(0, count), read


def maintain(
    previous: tuple[pa.Table, SampleState] | None,
    settings: SampleSettings,
    change: ViewChange,
    view: Callable[[], Iterator[pa.RecordBatch]],
    rng: np.random.Generator,
) -> Maintenance:
    """The sample after a sync that made `change` to the view: its deleted and updated rows
    leave the sample or take their new values, its inserts go through the acceptance test
    and the deferred refresh. `previous` is the sample before the sync, if any (none: a
    build). `view()` streams the view's rows (as now) for a build or a top-up; a multiset's
    top-up draws its whole sample anew.

    >>> settings = SampleSettings(target=3, key=["k"], schema=pa.schema([("k", pa.int64())]))
    >>> view = pa.table({"k": list(range(10))}, schema=settings.schema)
    >>> built = maintain(None, settings, ViewChange(0, 10, 0, lambda: iter([])), view.to_batches, np.random.default_rng(0))
    >>> built.state.size, built.state.method
    (3, 'build')
    >>> gone = built.rows.slice(0, 1)  # a sampled row deleted: the sample is topped up from the view
    >>> now = view.filter(pc.invert(pc.is_in(view.column("k"), gone.column("k"))))
    >>> change = ViewChange(10, 9, 1, lambda: iter([]), deleted=gone, updated=settings.schema.empty_table())
    >>> kept = maintain((built.rows, built.state), settings, change, now.to_batches, np.random.default_rng(1))
    >>> kept.state.size, kept.state.refills, gone.column("k")[0].as_py() in kept.rows.column("k").to_pylist()
    (3, 1, False)
    """
    target, key, schema, method = settings.target, settings.key, settings.schema, settings.method
    if previous is None:
        return _build(schema.empty_table(), None, settings, change.view_rows, view, rng, 0)
    rows, state = previous
    rows = rows.select(schema.names).cast(schema)
    if state.target > target:  # a smaller M: a uniform subset
        keep = np.sort(rng.choice(rows.num_rows, size=min(target, rows.num_rows), replace=False))
        rows = rows.take(pa.array(keep))
    rows, touched = change.removed_from(rows, key)
    size = rows.num_rows
    after_deletes = change.view_rows_before - change.deletes
    joined, log, n = log_candidates(change.inserts(), size, after_deletes, target, rng)
    rows = pa.concat_tables([rows, *[t.select(schema.names).cast(schema) for t in joined]])
    added = rows.num_rows - size
    expected_log = _expected_log(rows.num_rows, after_deletes + added, n - added)
    rows, plan = refreshed(rows, log, rng, method)
    log_length = log.num_rows if log is not None else 0
    out = SampleState(
        target=target,
        size=rows.num_rows,
        view_rows=change.view_rows,
        log_length=log_length,
        expected_log_length=round(expected_log, 3),
        displaced=len(plan),
        expected_displaced=round(sample_refresh.expected_displaced(rows.num_rows, log_length), 3),
        method=(method or sample_refresh.method(rows.num_rows, log_length)) if log_length else "none",
        rows_written=len(plan) + touched + added,
        refills=state.refills,
    )
    if out.size < min(target, change.view_rows):  # kept at its size: topped up from the view's stored rows
        kept = rows if key else rows.slice(0, 0)  # equal occurrences cannot be told apart: draw anew
        return _build(kept, out, settings, change.view_rows, view, rng, state.refills + 1)
    return Maintenance(rows, out)


def _build(
    rows: pa.Table,
    state: SampleState | None,
    settings: SampleSettings,
    view_rows: int,
    view: Callable[[], Iterator[pa.RecordBatch]],
    rng: np.random.Generator,
    refills: int,
) -> Maintenance:
    """Top the sample up to min(target, view rows) with rows drawn from the rest of the view."""
    target, key = settings.target, settings.key
    missing = min(target, view_rows) - rows.num_rows
    more, read = drawn(view(), missing, rows if rows.num_rows else None, key, rng) if missing > 0 else (None, 0)
    if more is not None:
        rows = pa.concat_tables([rows, more.select(rows.column_names).cast(rows.schema)])
    base = state or SampleState(target=target, size=0, view_rows=view_rows)
    out = SampleState(
        **{
            **asdict(base),
            "target": target,
            "size": rows.num_rows,
            "view_rows": view_rows,
            "method": "build",
            "view_rows_read": read,
            "rows_written": rows.num_rows,
            "refills": refills,
        }
    )
    return Maintenance(rows, out)


def _expected_log(size: int, view_rows: int, inserts: int) -> float:
    """E(|C|) for `inserts` candidate tests on a sample of `size` of a view of `view_rows`:
    the sum of size / (N + i), about size ln((N + n) / N).

    >>> round(_expected_log(10, 100, 100), 2), _expected_log(10, 0, 0)
    (6.91, 0.0)
    """
    if inserts <= 0 or size <= 0:
        return 0.0
    i = np.arange(1, inserts + 1, dtype=np.float64)
    return float(np.sum(size / (view_rows + i)))


def from_delta(
    previous: tuple[pa.Table, SampleState] | None,
    target: int,
    view: ViewDef,
    delta: Path,
    view_rows_before: int,
    view_rows: int,
    deletes: int,
    rows: Callable[[], Iterator[pa.RecordBatch]],
    rng: np.random.Generator,
    method: str | None = None,
    counts: Callable[[pa.Table], dict] | None = None,
) -> Maintenance:
    """`maintain` from a sync's delta as staged (`delta`: Parquet, OP and the view's
    columns): of its deletes and updates only those near the sampled keys are read (a
    filter on the first key column), its inserts are streamed; `rows()` streams the view.
    A multiset's lines carry counts; `counts(contents)` gives how often each content
    occurred before the sync (`stored_counts`)."""
    if view.multiset:
        return _from_multiset_delta(
            previous, target, view, delta, view_rows_before, view_rows, rows, rng, method, counts
        )
    key, schema = view.key, arrow_schema(view.columns)
    typed = pa.schema([pa.field(OP, pa.string()), *schema])
    lines = ds.dataset(delta, format="parquet")
    deleted, updated = schema.empty_table().select(key), schema.empty_table()
    if previous is not None and previous[0].num_rows and lines.files:
        held = previous[0].column(key[0])
        near = ds.field(key[0]).isin(pc.unique(held).drop_null()) | ds.field(key[0]).is_null()
        touched = lines.to_table(typed.names, filter=ds.field(OP).isin([UPDATE, DELETE]) & near).cast(typed)
        ops = touched.column(OP)
        deleted = touched.filter(pc.equal(ops, DELETE)).select(key)
        updated = touched.filter(pc.equal(ops, UPDATE)).select(schema.names)

    def inserts() -> Iterator[pa.Table]:
        if lines.files:
            for batch in lines.to_batches(typed.names, filter=ds.field(OP) == INSERT, batch_size=INSERT_BATCH_ROWS):
                yield pa.Table.from_batches([batch]).cast(typed).select(schema.names)

    change = ViewChange(view_rows_before, view_rows, deletes, inserts, deleted=deleted, updated=updated)
    return maintain(previous, SampleSettings(target, key, schema, method), change, rows, rng)


def _from_multiset_delta(previous, target, view, delta, view_rows_before, view_rows, rows, rng, method, counts):
    """`from_delta` for a multiset: every delete and update line is read (the change's
    size), each insert line streams as many occurrences as its count."""
    names = [c.name for c in view.columns]
    schema = arrow_schema(view.columns)
    lines = ds.dataset(delta, format="parquet")
    gone = pa.table({OP: pa.array([], pa.string())})
    if lines.files:
        gone = lines.to_table(filter=ds.field(OP).isin([UPDATE, DELETE]))
    ops = gone.column(OP)
    deleted, updated = (gone.filter(pc.equal(ops, op)) for op in (DELETE, UPDATE))
    deleted, updated = (t if t.num_rows else None for t in (deleted, updated))  # no match: no old columns
    occurrences_gone = sum(pc.sum(t.column(COUNT)).as_py() or 0 for t in (deleted, updated) if t is not None)

    def inserts() -> Iterator[pa.Table]:
        if lines.files:
            for batch in lines.to_batches(filter=ds.field(OP) == INSERT, batch_size=INSERT_BATCH_ROWS):
                table = pa.Table.from_batches([batch])
                repeat = np.repeat(np.arange(table.num_rows), table.column(COUNT).to_numpy(zero_copy_only=False))
                yield table.select(names).cast(schema).take(pa.array(repeat))

    removals = multiset_removals(names, deleted, updated, counts, rng)
    change = ViewChange(view_rows_before, view_rows, occurrences_gone, inserts, removals=removals)
    return maintain(previous, SampleSettings(target, [], schema, method), change, rows, rng)


def multiset_removals(
    names: list[str], deleted: pa.Table | None, updated: pa.Table | None, counts, rng: np.random.Generator
) -> Callable[[pa.Table], tuple[pa.Table, int]]:
    """The removals of a multiset's sample. A delete line takes n of the N occurrences of a
    content; of the j the sample holds, as many go as n draws without replacement would
    hit (hypergeometric). An update (a pair `match` made) changes one occurrence of its old
    content, a sampled one with probability j/N, which then takes the new values.

    >>> sample = pa.table({"a": [1, 1, 2]})
    >>> gone = pa.table({"__op": ["delete"], "a": [1], "__ds_count": [3]})
    >>> rows, n = multiset_removals(["a"], gone, None, lambda c: {(1,): 3}, np.random.default_rng(0))(sample)
    >>> rows.column("a").to_pylist(), n
    ([2], 0)
    """

    def content(table: pa.Table, prefix: str = "") -> list[tuple]:
        columns = [table.column(prefix + n).to_pylist() for n in names]
        return list(zip(*columns, strict=True)) if columns else []

    def apply(rows: pa.Table) -> tuple[pa.Table, int]:
        held: dict[tuple, int] = {}
        for c in content(rows):
            held[c] = held.get(c, 0) + 1
        went = {} if deleted is None else dict(zip(content(deleted), deleted.column(COUNT).to_pylist(), strict=True))
        moved: dict[tuple, list[dict]] = {}
        if updated is not None:
            for c, new in zip(content(updated, OLD_PREFIX), updated.select(names).to_pylist(), strict=True):
                moved.setdefault(c, []).append(new)
        touched = [c for c in held if c in went or c in moved]
        if not touched:
            return rows, 0
        before = counts(pa.table({n: [c[i] for c in touched] for i, n in enumerate(names)}, schema=rows.schema))
        drop: dict[tuple, int] = {}
        new_rows = []
        for c in touched:
            j, total = held[c], before[c]
            if went.get(c):
                k = int(rng.hypergeometric(j, total - j, went[c])) if total > j else min(j, went[c])
                drop[c], j, total = k, j - k, total - went[c]
            for new in moved.get(c, []):
                if total > 0 and rng.random() * total < j:
                    drop[c] = drop.get(c, 0) + 1
                    new_rows.append(new)
                    j -= 1
                total -= 1
        keep = []
        for i, c in enumerate(content(rows)):
            if drop.get(c):
                drop[c] -= 1
            else:
                keep.append(i)
        out = rows.take(pa.array(keep, pa.int64()))
        if new_rows:
            out = pa.concat_tables([out, pa.Table.from_pylist(new_rows, schema=rows.schema)])
        return out, len(new_rows)

    return apply


def stored_counts(version: Version, view: ViewDef, contents: pa.Table) -> dict[tuple, int]:
    """How often each content of `contents` occurs in a multiset view stored at `version`:
    its stored rows read filtered on the first column (NULL read through its flag, or a
    padded combination), NULLs restored, counts added up by content."""
    names = [c.name for c in view.columns]
    first, flag = names[0], view.null_flags.get(names[0])
    wanted = ds.field(first).isin(pc.unique(contents.column(first)).drop_null()) | ds.field(first).is_null()
    if flag is not None:
        wanted = wanted | (ds.field(flag) == True)  # noqa: E712 (a dataset expression)
    if view.assembly is None:
        site = view.sites[0]
        stored = layers.rows_where(version, 0, site.columns, site.key, wanted)
        held = multiset.restored(stored, view).append_column(COUNT, stored.column(COUNT))
    else:
        held = combinations.occurrences(layers.view_lookup(version, combinations.stored_view(view), wanted), view)
    total = held.group_by(names, use_threads=False).aggregate([(COUNT, "sum")])
    columns = [total.column(n).to_pylist() for n in names]
    return dict(zip(zip(*columns, strict=True), total.column(f"{COUNT}_sum").to_pylist(), strict=True))
