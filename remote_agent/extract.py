"""Steps 2 and 3 of the extraction, run next to the legacy database.

The warehouse sends units (a uid, the keys of a group of tuples, the group's hash). The
agent reads the site query once and answers with:

- rows whose key is in no unit (new tuples and the part the warehouse left ungrouped);
- keys of a unit that are gone from the site query, with the unit's uid;
- for a unit that lost keys, the hash and count of what is left, so the warehouse can check
  the surviving part against its own copy without resending the unit;
- the current rows of every intact unit whose hash differs.

Memory is bounded by the request, not by the table: one entry per unit key (about 120
bytes each in CPython) and per unit, plus one batch of rows in flight.
"""

from __future__ import annotations

import datetime as dt
import time
from array import array
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from . import chunks
from .adapters.base import Adapter, ColumnInfo, Session
from .errors import BadRequest, SourceDataError, example_row
from .protocol import frames
from .protocol.encoding import combine, hash_from_bytes, hash_to_bytes, row_hashes
from .protocol.models import SiteColumn
from .protocol.types import Column, arrow_schema
from .sitequery import ValidatedQuery

UID = "__uid"
HASH = "__hash"
COUNT = "__count"
#: Keys per lookup statement; well under SQLite's and PostgreSQL's bound-parameter limits.
LOOKUP_CHUNK = 500


def key_values(batch: pa.RecordBatch | pa.Table, key: Sequence[str]) -> list:
    """The key of every row: a scalar for a one-column key, else a tuple."""
    if len(key) == 1:
        return batch.column(key[0]).to_pylist()
    return list(zip(*(batch.column(k).to_pylist() for k in key)))


class RowConverter:
    """Turns raw database rows into Arrow batches of canonical values.

    `where` names what the rows come from in error messages ("table 'people'").
    """

    def __init__(self, adapter: Adapter, columns: Sequence[ColumnInfo], where: str = "the site query"):
        self.columns = list(columns)
        self.converters = [adapter.converter(c) for c in columns]
        self.schema = arrow_schema([Column(c.name, c.type) for c in columns])
        self.where = where

    def batch(self, rows: list[tuple], key: Sequence[str]) -> pa.RecordBatch:
        if not rows:
            return pa.RecordBatch.from_pylist([], schema=self.schema)
        arrays = []
        for i, (column, convert, raw) in enumerate(zip(self.columns, self.converters, zip(*rows))):
            fast = _whole_column(column.type.kind, list(raw), self.schema.field(i).type)
            if fast is not None:
                arrays.append(fast)
                continue
            values = []
            for row in rows:
                try:
                    values.append(convert(row[i]))
                except (ValueError, TypeError, ArithmeticError) as exc:
                    example = {k: row[self._pos(k)] for k in key}
                    whole = example_row({c.name: v for c, v in zip(self.columns, row)})
                    raise SourceDataError(
                        f"{self.where}: column {column.name!r} should hold {column.type} values, but the row with key {example} has {row[i]!r}, "
                        f"which cannot be read as {column.type} ({exc}); the row: {whole}. Fix the value at the source, "
                        f"or redefine the view if the column's meaning changed"
                    ) from None
            arrays.append(pa.array(values, type=self.schema.field(i).type))
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _pos(self, name: str) -> int:
        return next(i for i, c in enumerate(self.columns) if c.name == name)


_NONE = type(None)
#: Raw value types a driver hands over that already are the canonical value of the column's
#: kind, exactly (bool is not int, datetime is not date): such a column is built by Arrow
#: in one call instead of value by value.
_CANONICAL_TYPES = {"int": {int, _NONE}, "float": {float, _NONE}, "text": {str, _NONE}, "bytes": {bytes, _NONE}, "date": {dt.date, _NONE}}
#: Day number of 0001-01-01: Arrow reads year 0 from text, Python's dates start at year 1.
_FIRST_DAY = (dt.date(1, 1, 1) - dt.date(1970, 1, 1)).days


def _whole_column(kind: str, values: list, arrow_type: pa.DataType) -> pa.Array | None:
    """The column as an Arrow array when no value needs converting (None: convert one by one).

    Also takes dates stored as ISO text (SQLite): Arrow's parser accepts exactly
    YYYY-MM-DD, which reads the same as date.fromisoformat; anything else falls back to
    the value-by-value converter and its error message.
    """
    present = set(map(type, values))
    try:
        if present <= _CANONICAL_TYPES.get(kind, set()):
            return pa.array(values, arrow_type)
        if kind == "date" and present <= {str, _NONE}:
            days = pa.array(values, pa.string()).cast(pa.date32())
            low = pc.min(days.cast(pa.int32())).as_py()
            return days if low is None or low >= _FIRST_DAY else None
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return None
    return None


@dataclass
class UnitIndex:
    """The units of one request: key -> position, and per unit its expected and running hash."""

    key: list[str]
    bits: int
    positions: dict = field(default_factory=dict)
    key_unit: array = field(default_factory=lambda: array("l"))  # unit index of each key
    seen: bytearray = field(default_factory=bytearray)
    uids: list[int] = field(default_factory=list)
    expected: list[int] = field(default_factory=list)
    sums: list[int] = field(default_factory=list)
    counts: array = field(default_factory=lambda: array("l"))
    sizes: array = field(default_factory=lambda: array("l"))
    unit_of_uid: dict[int, int] = field(default_factory=dict)

    def add_units(self, batch: pa.RecordBatch) -> None:
        for uid, h in zip(batch.column(UID).to_pylist(), batch.column(HASH).to_pylist()):
            if uid in self.unit_of_uid:
                raise BadRequest(f"unit {uid} sent twice")
            self.unit_of_uid[uid] = len(self.uids)
            self.uids.append(uid)
            self.expected.append(hash_from_bytes(h))
            self.sums.append(0)
            self.counts.append(0)
            self.sizes.append(0)

    def add_keys(self, batch: pa.RecordBatch) -> None:
        missing = [k for k in self.key if k not in batch.schema.names]
        if missing:
            raise BadRequest(f"unit key frame lacks key columns {missing}")
        for uid, k in zip(batch.column(UID).to_pylist(), key_values(batch, self.key)):
            unit = self.unit_of_uid.get(uid)
            if unit is None:
                raise BadRequest(f"key {k!r} refers to unit {uid}, which was not sent")
            if k in self.positions:
                raise BadRequest(f"key {k!r} is in more than one unit")
            self.positions[k] = len(self.key_unit)
            self.key_unit.append(unit)
            self.seen.append(0)
            self.sizes[unit] += 1


@dataclass
class TupleIndex:
    """Per-tuple hashes (the ⟨K, b⟩ baseline): key -> position, expected hash, seen flag."""

    key: list[str]
    positions: dict = field(default_factory=dict)
    expected: list[int] = field(default_factory=list)
    seen: bytearray = field(default_factory=bytearray)

    def add(self, batch: pa.RecordBatch) -> None:
        missing = [k for k in [*self.key, HASH] if k not in batch.schema.names]
        if missing:
            raise BadRequest(f"tuple hash frame lacks columns {missing}")
        for k, h in zip(key_values(batch, self.key), batch.column(HASH).to_pylist()):
            if k in self.positions:
                raise BadRequest(f"key {k!r} sent twice")
            self.positions[k] = len(self.expected)
            self.expected.append(hash_from_bytes(h))
            self.seen.append(0)


def check_columns(query: ValidatedQuery, expected: list[SiteColumn]) -> None:
    """Refuse a site query whose columns at the source no longer match the registered ones."""
    got = [{"name": c.name, "type": str(c.type)} for c in query.columns]
    want = [{"name": c.name, "type": c.type} for c in expected]
    if got == want:
        return
    origins = dict(zip((c.name for c in query.columns), query.origins))
    have = {g["name"]: g["type"] for g in got}
    problems = []
    for w in want:
        name = w["name"]
        if name not in have:
            problems.append(f"column {name!r} is gone")
        elif have[name] != w["type"]:
            problems.append(f"column {name!r} ({origins.get(name, name)}) is {have[name]} at the source but was {w['type']} when the view was registered")
    problems += [f"column {g['name']!r} is new" for g in got if g["name"] not in {w["name"] for w in want}]
    if not problems:
        problems.append(f"the columns are now {[g['name'] for g in got]} instead of {[w['name'] for w in want]}")
    raise SourceDataError(
        f"the source schema of {query.where()} changed since the view was registered: {'; '.join(problems)}. "
        "Restore the column at the source, or redefine the view (PUT /v1/views/NAME) to match the new schema"
    )


def duplicate_key(k, query: ValidatedQuery, batch: pa.RecordBatch, keys: list) -> SourceDataError:
    """The error for key `k` met a second time in one scan, quoting the row of this batch."""
    row = batch.slice(keys.index(k), 1).to_pylist()[0]
    return SourceDataError(
        f"{query.where()}: key {dict(zip(query.key, k if isinstance(k, tuple) else (k,)))} occurs more than once, e.g. in the row {example_row(row)}; "
        f"the declared key {list(query.key)} is not unique at the source: remove the duplicate rows, or redefine the view with a key that is unique"
    )


class Extraction:
    """One extraction request: state and the generator of response frames."""

    def __init__(self, adapter: Adapter, query: ValidatedQuery, expected_columns: list[SiteColumn], units: UnitIndex, *, seed: int, bits: int, batch_rows: int, tuples: TupleIndex | None = None, tuple_bits: int = 64, chunk_rows: int = chunks.DEFAULT_CHUNK_ROWS):
        check_columns(query, expected_columns)
        self.adapter = adapter
        self.query = query
        self.units = units
        self.tuples = tuples or TupleIndex(key=query.key)
        self.tuple_bits = tuple_bits
        self.seed = seed
        self.bits = bits
        self.batch_rows = batch_rows
        self.chunk_rows = chunk_rows
        self.converter = RowConverter(adapter, query.columns, query.where())
        self.hash_columns = [Column(c.name, c.type) for c in query.columns]
        self.stats = {"rows_scanned": 0, "rows_ungrouped": 0, "rows_changed": 0, "units": len(units.uids), "unit_keys": len(units.key_unit), "tuple_hashes": len(self.tuples.expected)}

    def run(self) -> Iterator[bytes]:
        started = time.monotonic()
        # One connection; every chunk and every lookup is a short transaction of its own
        # (see chunks.py for why the answer stays exact).
        with self.adapter.session() as session:
            yield from self._scan(session)
            scanned = time.monotonic()
            yield from self._deleted_and_broken()
            changed = self._changed_units()
            yield from self._changed_rows(session, changed)
        self.stats.update(scan_s=round(scanned - started, 4), elapsed_s=round(time.monotonic() - started, 4))
        yield frames.json_frame(frames.SUMMARY, self.stats)

    def _scan(self, session: Session) -> Iterator[bytes]:
        units = self.units
        pending: list[pa.RecordBatch] = []
        pending_rows = 0
        for rows in slices(chunks.scan(self.adapter, session, self.query, self.chunk_rows), min(self.batch_rows, 10_000)):
            batch = self.converter.batch(rows, self.query.key)
            self.stats["rows_scanned"] += batch.num_rows
            keys = key_values(batch, self.query.key)
            if self.tuples.positions:
                batch, keys, changed = self._compare_tuples(batch, keys)
                if changed is not None:
                    self.stats["rows_changed"] += changed.num_rows
                    yield frames.arrow_frame(frames.CHANGED_ROWS, changed)
            positions = [units.positions.get(k) for k in keys]
            in_unit = [p is not None for p in positions]
            if any(in_unit):
                grouped = batch.filter(pa.array(in_unit))
                hashes = row_hashes(grouped, self.hash_columns, self.seed, self.bits)
                for pos, h, k in zip((p for p in positions if p is not None), hashes, (k for k, f in zip(keys, in_unit) if f)):
                    if units.seen[pos]:
                        raise duplicate_key(k, self.query, batch, keys)
                    units.seen[pos] = 1
                    unit = units.key_unit[pos]
                    units.sums[unit] += h
                    units.counts[unit] += 1
            if not all(in_unit):
                rest = batch.filter(pa.array([not f for f in in_unit]))
                pending.append(rest)
                pending_rows += rest.num_rows
                self.stats["rows_ungrouped"] += rest.num_rows
                if pending_rows >= self.batch_rows:
                    yield frames.arrow_frame(frames.UNGROUPED_ROWS, pa.Table.from_batches(pending))
                    pending, pending_rows = [], 0
        if pending:
            yield frames.arrow_frame(frames.UNGROUPED_ROWS, pa.Table.from_batches(pending))

    def _compare_tuples(self, batch: pa.RecordBatch, keys: list):
        """Split off rows that carry a per-tuple hash; return the rest and the changed ones."""
        tuples = self.tuples
        positions = [tuples.positions.get(k) for k in keys]
        hashed = [p is not None for p in positions]
        if not any(hashed):
            return batch, keys, None
        sub = batch.filter(pa.array(hashed))
        changed = []
        for pos, h, k in zip((p for p in positions if p is not None), row_hashes(sub, self.hash_columns, self.seed, self.tuple_bits), (k for k, f in zip(keys, hashed) if f)):
            if tuples.seen[pos]:
                raise duplicate_key(k, self.query, batch, keys)
            tuples.seen[pos] = 1
            changed.append(h != tuples.expected[pos])
        rest = [not f for f in hashed]
        out = sub.filter(pa.array(changed)) if any(changed) else None
        return batch.filter(pa.array(rest)), [k for k, f in zip(keys, rest) if f], out

    def _deleted_and_broken(self) -> Iterator[bytes]:
        yield from self._deleted_tuples()
        units = self.units
        key_schema = [(k, self.converter.schema.field(k).type) for k in self.query.key]
        deleted_uids, deleted_keys = [], []
        count = 0
        for k, pos in units.positions.items():
            if not units.seen[pos]:
                deleted_uids.append(units.uids[units.key_unit[pos]])
                deleted_keys.append(k)
                count += 1
                if len(deleted_keys) >= self.batch_rows:
                    yield self._deleted_frame(deleted_uids, deleted_keys, key_schema)
                    deleted_uids, deleted_keys = [], []
        if deleted_keys:
            yield self._deleted_frame(deleted_uids, deleted_keys, key_schema)
        self.stats["keys_deleted"] = count
        broken = [u for u in range(len(units.uids)) if units.counts[u] < units.sizes[u]]
        self.stats["units_broken"] = len(broken)
        for start in range(0, len(broken), self.batch_rows):
            part = broken[start:start + self.batch_rows]
            batch = pa.RecordBatch.from_pydict(
                {
                    UID: pa.array([units.uids[u] for u in part], pa.int64()),
                    HASH: pa.array([hash_to_bytes(combine([units.sums[u]], self.bits), self.bits) for u in part], pa.binary(self.bits // 8)),
                    COUNT: pa.array([units.counts[u] for u in part], pa.int64()),
                }
            )
            yield frames.arrow_frame(frames.BROKEN_UNITS, batch)

    def _deleted_tuples(self) -> Iterator[bytes]:
        """Keys sent with a per-tuple hash that the scan did not meet (uid -1: no unit)."""
        tuples = self.tuples
        key_schema = [(k, self.converter.schema.field(k).type) for k in self.query.key]
        gone = [k for k, pos in tuples.positions.items() if not tuples.seen[pos]]
        self.stats["tuples_deleted"] = len(gone)
        for start in range(0, len(gone), self.batch_rows):
            part = gone[start:start + self.batch_rows]
            yield self._deleted_frame([-1] * len(part), part, key_schema)

    def _deleted_frame(self, uids: list[int], keys: list, key_schema) -> bytes:
        data = {UID: pa.array(uids, pa.int64())}
        if len(key_schema) == 1:
            data[key_schema[0][0]] = pa.array(keys, key_schema[0][1])
        else:
            for i, (name, type_) in enumerate(key_schema):
                data[name] = pa.array([k[i] for k in keys], type_)
        return frames.arrow_frame(frames.DELETED_KEYS, pa.RecordBatch.from_pydict(data))

    def _changed_units(self) -> set[int]:
        units = self.units
        changed = {u for u in range(len(units.uids)) if units.counts[u] == units.sizes[u] and combine([units.sums[u]], self.bits) != units.expected[u]}
        self.stats["units_changed"] = len(changed)
        self.stats["units_identical"] = len(units.uids) - len(changed) - self.stats["units_broken"]
        return changed

    def _changed_rows(self, session: Session, changed: set[int]) -> Iterator[bytes]:
        if not changed:
            return
        units = self.units
        wanted = [k for k, pos in units.positions.items() if units.key_unit[pos] in changed]
        sent = 0
        for batch in lookup_rows(self.adapter, session, self.query, self.converter, wanted, self.batch_rows, self.chunk_rows):
            sent += batch.num_rows
            yield frames.arrow_frame(frames.CHANGED_ROWS, batch)
        self.stats["rows_changed"] += sent


def slices(chunked: Iterable[list[tuple]], size: int) -> Iterator[list[tuple]]:
    """The rows of every chunk again, in lists of at most `size`.

    >>> list(slices([[1, 2, 3], [4]], 2))
    [[1, 2], [3], [4]]
    """
    for rows in chunked:
        for start in range(0, len(rows), size):
            yield rows[start:start + size]


def lookup_rows(adapter: Adapter, session: Session, query: ValidatedQuery, converter: RowConverter, keys: list, batch_rows: int, chunk_rows: int = chunks.DEFAULT_CHUNK_ROWS) -> Iterator[pa.RecordBatch]:
    """Current rows of the site query for `keys`, in batches.

    At most `chunk_rows` keys per statement, each statement in a transaction of its own.
    """
    if not keys:
        return
    if adapter.can_lookup([c.type for c in query.columns if c.name in query.key]):
        pending: list[pa.RecordBatch] = []
        pending_rows = 0
        per_statement = min(LOOKUP_CHUNK, chunk_rows)
        for start in range(0, len(keys), per_statement):
            chunk = keys[start:start + per_statement]
            params: list[Any] = []
            for k in chunk:
                params.extend(k if isinstance(k, tuple) else (k,))
            with session.read() as reader:  # a key matches one row at most: the read is bounded
                rows = reader.rows(query.lookup_sql(len(chunk)), [adapter.bind(v) for v in params], limit=len(chunk))
            if rows:
                batch = converter.batch(rows, query.key)
                pending.append(batch)
                pending_rows += batch.num_rows
            if pending_rows >= batch_rows:
                yield pa.Table.from_batches(pending, schema=converter.schema).combine_chunks().to_batches()[0]
                pending, pending_rows = [], 0
        if pending_rows:
            yield pa.Table.from_batches(pending, schema=converter.schema).combine_chunks().to_batches()[0]
        return
    # Keys whose stored form may differ from their canonical value (dates kept as text in
    # SQLite, for instance) cannot be matched in SQL reliably: filter a rescan instead.
    wanted = set(keys)
    for rows in chunks.scan(adapter, session, query, chunk_rows):
        batch = converter.batch(rows, query.key)
        mask = [k in wanted for k in key_values(batch, query.key)]
        if any(mask):
            yield batch.filter(pa.array(mask))
