"""Steps 2 and 3 of the extraction, run next to the legacy database.

The warehouse sends units (a uid, the keys of a group of tuples, the group's hash). The
agent reads the site query once and answers with:

- rows whose key is in no unit (new tuples and the part the warehouse left ungrouped);
- keys of a unit that are gone from the site query, with the unit's uid;
- for a unit that lost keys, the hash and count of what is left, so the warehouse can check
  the surviving part against its own copy without resending the unit;
- the current rows of every intact unit whose hash differs.

Memory is bounded by the request, not by the table: about 17 bytes per unit key (plus the
key's own bytes when it is not a single integer; see keyindex.py), about 80 per unit, the
request body while it is decoded, and one batch of rows in flight.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import chunks
from .adapters.base import Adapter, ColumnInfo, Session
from .errors import BadRequest, SourceDataError, example_row
from .keyindex import KeyIndex
from .protocol import frames
from .protocol.encoding import LIMB_BITS, carry_limbs, limbs_from_bytes, limbs_to_bytes, row_hash_limbs
from .protocol.models import SiteColumn
from .protocol.types import Column, arrow_schema
from .protocol.wire import COUNT, HASH, UID, key_values
from .sitequery import ValidatedQuery

#: Keys per lookup statement; well under SQLite's and PostgreSQL's bound-parameter limits.
LOOKUP_CHUNK = 500


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


def wire_hashes(batch: pa.RecordBatch, bits: int, what: str, setting: str) -> list[bytes]:
    """The HASH column of a request frame, each checked to be `bits` wide."""
    hashes = batch.column(HASH).to_pylist()
    bad = next((h for h in hashes if h is None or len(h) != bits // 8), b"")
    if bad != b"":
        raise BadRequest(f"{what} {bad!r} is not {bits // 8} bytes ({setting} {bits})")
    return hashes


class UnitIndex:
    """The units of one request: their keys, and per unit its uid, expected hash, and the
    running sum and count of the rows the scan met.

    Columnar throughout (numpy arrays and a `KeyIndex`), so a request of millions of keys
    costs tens of bytes a key on the agent, not the hundreds a dict of Python objects did.
    """

    def __init__(self, key: Sequence[Column], bits: int):
        self.key = list(key)
        self.bits = bits
        self.keys = KeyIndex(self.key, "unit")
        self._uid_parts: list[np.ndarray] = []
        self._hash_parts: list[bytes] = []
        self.uids = np.empty(0, np.int64)
        self.expected = np.empty((0, bits // LIMB_BITS), np.uint64)
        self._uid_order: np.ndarray | None = None
        self.sums = self.expected.copy()
        self.counts = np.empty(0, np.int64)
        self.sizes = np.empty(0, np.int64)

    def add_units(self, batch: pa.RecordBatch) -> None:
        hashes = wire_hashes(batch, self.bits, "unit hash", "hash_bits")
        uids = batch.column(UID).to_numpy(zero_copy_only=False)
        if batch.column(UID).null_count:
            raise BadRequest("a unit has no uid")
        self._uid_parts.append(uids.astype(np.int64))
        self._hash_parts.extend(hashes)

    def _freeze_units(self) -> None:
        if self._uid_order is not None:
            return
        self.uids = np.concatenate(self._uid_parts) if self._uid_parts else np.empty(0, np.int64)
        self.expected = limbs_from_bytes(self._hash_parts, self.bits) if self._hash_parts else self.expected
        self._uid_parts, self._hash_parts = [], []
        self._uid_order = np.argsort(self.uids, kind="stable")
        ordered = self.uids[self._uid_order]
        twice = np.flatnonzero(ordered[1:] == ordered[:-1])
        if len(twice):
            raise BadRequest(f"unit {int(ordered[twice[0]])} sent twice")
        self.sums = np.zeros_like(self.expected)
        self.counts = np.zeros(len(self.uids), np.int64)

    def add_keys(self, batch: pa.RecordBatch) -> None:
        """Keys with the uid of their unit; every unit must have been added before."""
        self._freeze_units()
        if batch.column(UID).null_count:
            raise BadRequest("a unit key has no uid")
        uids = batch.column(UID).to_numpy(zero_copy_only=False).astype(np.int64)
        ordered = self.uids[self._uid_order]
        at = np.searchsorted(ordered, uids)
        at[at == len(ordered)] = 0
        unknown = np.flatnonzero(ordered[at] != uids) if len(ordered) else np.arange(len(uids))
        if len(unknown):
            row = int(unknown[0])
            missing = [c.name for c in self.key if c.name not in batch.schema.names]
            where = f"key {key_values(batch.slice(row, 1), [c.name for c in self.key])[0]!r}" if not missing else "a key"
            raise BadRequest(f"{where} refers to unit {int(uids[row])}, which was not sent")
        self.keys.add(batch, self._uid_order[at])

    def freeze(self) -> None:
        """Done adding: index the keys and size the units."""
        self._freeze_units()
        self.keys.freeze()
        self.sizes = np.bincount(self.keys.payload, minlength=len(self.uids)).astype(np.int64)

    def met(self, positions: np.ndarray, limbs: np.ndarray) -> None:
        """Scanned rows at key `positions` (each new) with their row hashes as limbs."""
        self.keys.seen[positions] = True
        unit = self.keys.payload[positions]
        np.add.at(self.sums, unit, limbs)
        self.counts += np.bincount(unit, minlength=len(self.counts))

    def totals(self, units: np.ndarray) -> np.ndarray:
        """The hash of what the scan met of each unit, as limbs."""
        return carry_limbs(self.sums[units])


class TupleIndex:
    """Per-tuple hashes (the ⟨K, b⟩ baseline): the keys, and the expected hash of each."""

    def __init__(self, key: Sequence[Column], bits: int = 64):
        self.key = list(key)
        self.bits = bits
        self.keys = KeyIndex(self.key, "tuple hash", twice="sent twice")
        self._parts: list[np.ndarray] = []
        self.expected = np.empty((0, bits // LIMB_BITS), np.uint64)
        self._count = 0

    def add(self, batch: pa.RecordBatch) -> None:
        if HASH not in batch.schema.names:
            raise BadRequest(f"tuple hash frame lacks columns {[HASH]}")
        hashes = wire_hashes(batch, self.bits, "tuple hash", "tuple_hash_bits")
        self.keys.add(batch, np.arange(self._count, self._count + len(hashes)))
        self._count += len(hashes)
        if hashes:
            self._parts.append(limbs_from_bytes(hashes, self.bits))

    def freeze(self) -> None:
        self.keys.freeze()
        if self._parts:
            self.expected = np.concatenate(self._parts)[self.keys.payload]
            self._parts = []


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


def key_columns(query: ValidatedQuery) -> list[Column]:
    """The key columns of a site query with their logical types, in key order."""
    types = {c.name: c.type for c in query.columns}
    return [Column(k, types[k]) for k in query.key]


def _first_repeat(positions: np.ndarray, seen: np.ndarray) -> int | None:
    """Index into `positions` of the first one met before (in an earlier batch or this one)."""
    again = seen[positions]
    if again.any():
        return int(np.flatnonzero(again)[0])
    order = np.argsort(positions, kind="stable")
    same = np.flatnonzero(positions[order][1:] == positions[order][:-1])
    return int(order[same[0] + 1]) if len(same) else None


class Extraction:
    """One extraction request: state and the generator of response frames."""

    def __init__(self, adapter: Adapter, query: ValidatedQuery, expected_columns: list[SiteColumn], units: UnitIndex, *, seed: int, bits: int, batch_rows: int, tuples: TupleIndex | None = None, chunk_rows: int = chunks.DEFAULT_CHUNK_ROWS):
        check_columns(query, expected_columns)
        self.adapter = adapter
        self.query = query
        self.units = units
        self.tuples = tuples or TupleIndex(key_columns(query))
        self.units.freeze()
        self.tuples.freeze()
        self.seed = seed
        self.bits = bits
        self.batch_rows = batch_rows
        self.chunk_rows = chunk_rows
        self.converter = RowConverter(adapter, query.columns, query.where())
        self.hash_columns = [Column(c.name, c.type) for c in query.columns]
        self.stats = {"rows_scanned": 0, "rows_ungrouped": 0, "rows_changed": 0, "units": len(units.uids), "unit_keys": len(units.keys), "tuple_hashes": len(self.tuples.keys)}

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
            if len(self.tuples.keys):
                batch, changed = self._compare_tuples(batch)
                if changed is not None:
                    self.stats["rows_changed"] += changed.num_rows
                    yield frames.arrow_frame(frames.CHANGED_ROWS, changed)
            positions = units.keys.find(batch)
            in_unit = positions >= 0
            if in_unit.any():
                met = positions[in_unit]
                repeat = _first_repeat(met, units.keys.seen)
                if repeat is not None:
                    raise self._duplicate(batch, int(np.flatnonzero(in_unit)[repeat]))
                units.met(met, row_hash_limbs(batch.filter(pa.array(in_unit)), self.hash_columns, self.seed, self.bits))
            if not in_unit.all():
                rest = batch.filter(pa.array(~in_unit))
                pending.append(rest)
                pending_rows += rest.num_rows
                self.stats["rows_ungrouped"] += rest.num_rows
                if pending_rows >= self.batch_rows:
                    yield frames.arrow_frame(frames.UNGROUPED_ROWS, pa.Table.from_batches(pending))
                    pending, pending_rows = [], 0
        if pending:
            yield frames.arrow_frame(frames.UNGROUPED_ROWS, pa.Table.from_batches(pending))

    def _duplicate(self, batch: pa.RecordBatch, row: int) -> SourceDataError:
        keys = key_values(batch, self.query.key)
        return duplicate_key(keys[row], self.query, batch, keys)

    def _compare_tuples(self, batch: pa.RecordBatch):
        """Split off rows that carry a per-tuple hash; return the rest and the changed ones."""
        tuples = self.tuples
        positions = tuples.keys.find(batch)
        hashed = positions >= 0
        if not hashed.any():
            return batch, None
        met = positions[hashed]
        repeat = _first_repeat(met, tuples.keys.seen)
        if repeat is not None:
            raise self._duplicate(batch, int(np.flatnonzero(hashed)[repeat]))
        tuples.keys.seen[met] = True
        sub = batch.filter(pa.array(hashed))
        got = row_hash_limbs(sub, self.hash_columns, self.seed, tuples.bits)
        changed = (got != tuples.expected[met]).any(axis=1)
        out = sub.filter(pa.array(changed)) if changed.any() else None
        return batch.filter(pa.array(~hashed)), out

    def _deleted_and_broken(self) -> Iterator[bytes]:
        yield from self._deleted_tuples()
        units = self.units
        gone = np.flatnonzero(~units.keys.seen)
        for start in range(0, len(gone), self.batch_rows):
            part = gone[start:start + self.batch_rows]
            yield self._deleted_frame(units.uids[units.keys.payload[part]], units.keys.keys(part))
        self.stats["keys_deleted"] = len(gone)
        broken = np.flatnonzero(units.counts < units.sizes)
        self.stats["units_broken"] = len(broken)
        for start in range(0, len(broken), self.batch_rows):
            part = broken[start:start + self.batch_rows]
            batch = pa.RecordBatch.from_pydict(
                {
                    UID: pa.array(units.uids[part], pa.int64()),
                    HASH: pa.array(limbs_to_bytes(units.totals(part)), pa.binary(self.bits // 8)),
                    COUNT: pa.array(units.counts[part], pa.int64()),
                }
            )
            yield frames.arrow_frame(frames.BROKEN_UNITS, batch)

    def _deleted_tuples(self) -> Iterator[bytes]:
        """Keys sent with a per-tuple hash that the scan did not meet (uid -1: no unit)."""
        tuples = self.tuples
        gone = np.flatnonzero(~tuples.keys.seen)
        self.stats["tuples_deleted"] = len(gone)
        for start in range(0, len(gone), self.batch_rows):
            part = gone[start:start + self.batch_rows]
            yield self._deleted_frame(np.full(len(part), -1, np.int64), tuples.keys.keys(part))

    def _deleted_frame(self, uids: np.ndarray, keys: pa.Table) -> bytes:
        data = {UID: pa.array(uids, pa.int64())}
        for name in self.query.key:
            data[name] = keys.column(name).combine_chunks()
        return frames.arrow_frame(frames.DELETED_KEYS, pa.RecordBatch.from_pydict(data))

    def _changed_units(self) -> np.ndarray:
        units = self.units
        whole = np.flatnonzero(units.counts == units.sizes)
        differ = (units.totals(whole) != units.expected[whole]).any(axis=1)
        changed = whole[differ]
        self.stats["units_changed"] = len(changed)
        self.stats["units_identical"] = len(units.uids) - len(changed) - self.stats["units_broken"]
        return changed

    def _changed_rows(self, session: Session, changed: np.ndarray) -> Iterator[bytes]:
        if not len(changed):
            return
        units = self.units
        wanted = np.flatnonzero(np.isin(units.keys.payload, changed))
        keys = key_values(units.keys.keys(wanted), [c.name for c in units.key])
        sent = 0
        for batch in lookup_rows(self.adapter, session, self.query, self.converter, keys, self.batch_rows, self.chunk_rows):
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
