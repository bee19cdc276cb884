"""The truth a view must equal, read straight from the source, and its true delta.

`SourceTruth` keeps one 128-bit hash per row of the site query and a 16-bit digest of each
of its values (about 180 bytes per row in CPython for a dozen columns), which tell which
columns an update changed (the column-level lower bound). After a round it re-reads only the keys the simulator
touched, which gives the round's true delta (real inserts, updates and deletes of the view)
at the cost of the change, not of the table. A full rescan, on the rounds that are
verified in full, checks that the incremental picture still equals the source.
`SourceTruth` reads a SQLite file through sqlite3; `PostgresTruth` reads a PostgreSQL
database through psycopg, as the agent does (`MariadbTruth` in mysqlsource.py, MariaDB
through MySQLdb). The floor a sync's time is set against is not this reading but the
engine's fastest bulk read (floors.py).

Source values are read as the agent reads them (`converter_for` of each column's logical
type: that *is* what a source value means on the wire); view rows come back as JSON and are
parsed to the same canonical Python values, so both sides can be hashed and compared.
"""

from __future__ import annotations

import base64
import datetime as dt
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import xxhash

from deltasieve_protocol import frames
from deltasieve_protocol.types import Column, LogicalType, arrow_schema
from remote_agent.adapters.convert import converter_for

#: Rows per Arrow frame when sizing the lower bound: the agent's default `batch_rows`, so the
#: load's bound is the site query as the wire would carry it (larger frames do not compress
#: better: 65,536-row frames came out 1 % larger on the students table).
LOWER_BOUND_FRAME_ROWS = 16_384
#: Keys per lookup statement (SQLite's default limit on bound parameters is 32,766).
LOOKUP_CHUNK = 5_000
#: Rows fetched per call while scanning.
FETCH_ROWS = 10_000
_MASK = (1 << 128) - 1


def row_hash(row: tuple) -> int:
    return xxhash.xxh3_128_intdigest(repr(row).encode())


#: Bytes of each column's digest kept per row, to tell which columns an update changed.
CELL_DIGEST_BYTES = 2


def row_state(row: tuple) -> bytes:
    """What the oracle keeps of a row: its 128-bit hash, then a 16-bit digest of each value
    (a changed value goes unseen with odds 2^-16: the column-level bound may come out a
    hair low, never high).

    >>> a, b = row_state((1, "x", None)), row_state((1, "y", None))
    >>> len(a), a[:16] == row_hash((1, "x", None)).to_bytes(16, "little"), changed_cells(a, b)
    (22, True, [1])
    """
    cells = b"".join(
        (xxhash.xxh32_intdigest(repr(v).encode()) & 0xFFFF).to_bytes(CELL_DIGEST_BYTES, "little") for v in row
    )
    return row_hash(row).to_bytes(16, "little") + cells


def changed_cells(old: bytes, new: bytes) -> list[int]:
    """The positions of the values whose digests differ between two row states."""
    n = CELL_DIGEST_BYTES
    return [
        i
        for i in range((len(new) - 16) // n)
        if old[16 + i * n : 16 + (i + 1) * n] != new[16 + i * n : 16 + (i + 1) * n]
    ]


def _hash_of(state: bytes) -> int:
    return int.from_bytes(state[:16], "little")


def json_parser(type_: LogicalType) -> Callable[[Any], Any]:
    """Parse one JSON value of the service's rows back into its canonical Python value.

    >>> json_parser(LogicalType.parse("decimal(4,2)"))("3.5")
    Decimal('3.50')
    >>> json_parser(LogicalType("date"))("2001-02-03")
    datetime.date(2001, 2, 3)
    """
    kind = type_.kind
    if kind == "decimal":
        quantum = Decimal(1).scaleb(-type_.scale)
        inner = lambda v: Decimal(v).quantize(quantum)  # noqa: E731
    elif kind == "float":
        inner = float  # also reads "NaN", "Infinity", "-Infinity"
    elif kind == "bytes":
        inner = base64.b64decode
    elif kind == "date":
        inner = dt.date.fromisoformat
    elif kind in ("timestamp", "timestamptz"):
        inner = dt.datetime.fromisoformat
    elif kind == "bool":
        inner = bool
    elif kind == "int":
        inner = int
    else:
        inner = lambda v: v  # noqa: E731
    return lambda v: None if v is None else inner(v)


@dataclass
class Fingerprint:
    """An order-independent digest of a set of rows: their count and the sum of their hashes."""

    count: int = 0
    total: int = 0

    def add(self, h: int) -> None:
        self.count += 1
        self.total = (self.total + h) & _MASK

    def remove(self, h: int) -> None:
        self.count -= 1
        self.total = (self.total - h) & _MASK


@dataclass
class TrueDelta:
    """What really changed in the view in one round; `rows` holds the new and updated rows."""

    inserted: list = field(default_factory=list)
    updated: list = field(default_factory=list)
    deleted: list = field(default_factory=list)
    rows: dict = field(default_factory=dict)
    lower_bound_bytes: int = 0
    #: Of each updated key, the positions of the columns its update changed.
    changed: dict = field(default_factory=dict)
    #: The bound if updates shipped only their changed cells (column_lower_bound).
    column_lower_bound_bytes: int = 0

    def counts(self) -> dict:
        return {"inserted": len(self.inserted), "updated": len(self.updated), "deleted": len(self.deleted)}


def _nullable(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch with every field nullable (a NOT NULL column's unchanged cells are null here)."""
    schema = pa.schema([f.with_nullable(True) for f in batch.schema])
    return pa.RecordBatch.from_arrays(batch.columns, schema=schema)


class SourceTruth:
    """The view's site query evaluated on a SQLite source, tracked round by round."""

    #: The driver's parameter marker, and the engine's quote of a name.
    PARAM = "?"
    QUOTE = '"'

    def __init__(self, db: Path, site_sql: str, columns: list[Column], key: list[str]):
        self.db = db
        self.site_sql = site_sql
        self.columns = columns
        self.key = key
        self.key_pos = [next(i for i, c in enumerate(columns) if c.name == k) for k in key]
        self.converters = [converter_for(c.type) for c in columns]
        self.parsers = [json_parser(c.type) for c in columns]
        self.schema = arrow_schema(columns)
        self.key_schema = arrow_schema([columns[i] for i in self.key_pos])
        self.hashes: dict = {}
        self.fingerprint = Fingerprint()

    # -- reading the source --------------------------------------------------------------
    def _connect(self):
        return sqlite3.connect(f"file:{self.db}?mode=ro", uri=True)

    def _canonical(self, raw: tuple) -> tuple:
        return tuple(conv(v) for conv, v in zip(self.converters, raw))

    def key_of(self, row: tuple):
        if len(self.key_pos) == 1:
            return row[self.key_pos[0]]
        return tuple(row[i] for i in self.key_pos)

    def _scan(self) -> Iterator[list[tuple]]:
        conn = self._connect()
        try:
            cursor = conn.execute(self.site_sql)
            while rows := cursor.fetchmany(FETCH_ROWS):
                yield rows
        finally:
            conn.close()

    def _lookup(self, keys: list) -> dict:
        """Current canonical rows of the site query for these keys (absent keys are gone)."""
        names = [f"{self.QUOTE}{self.columns[i].name}{self.QUOTE}" for i in self.key_pos]
        found = {}
        conn = self._connect()
        try:
            for start in range(0, len(keys), LOOKUP_CHUNK):
                chunk = keys[start : start + LOOKUP_CHUNK]
                mark = self.PARAM
                if len(names) == 1:
                    where, params = f"{names[0]} IN ({','.join([mark] * len(chunk))})", chunk
                else:
                    where = f"({', '.join(names)}) IN (VALUES {','.join('(' + ','.join([mark] * len(names)) + ')' for _ in chunk)})"
                    params = [v for k in chunk for v in k]
                # the alias: PostgreSQL before 16 wants one on a subquery
                for raw in conn.execute(f"SELECT * FROM ({self.site_sql}) AS site WHERE {where}", params):
                    row = self._canonical(raw)
                    found[self.key_of(row)] = row
        finally:
            conn.close()
        return found

    # -- rounds ----------------------------------------------------------------------------
    def load(self) -> TrueDelta:
        """Round 0: every row of the site query is new. Rows are sized, not kept."""
        self.hashes.clear()
        self.fingerprint = Fingerprint()
        delta = TrueDelta()
        pending: list[tuple] = []
        for raws in self._scan():
            for raw in raws:
                row = self._canonical(raw)
                k = self.key_of(row)
                state = row_state(row)
                if k in self.hashes:
                    raise AssertionError(f"duplicate key {k!r} in the site query")
                self.hashes[k] = state
                self.fingerprint.add(_hash_of(state))
                delta.inserted.append(k)
                pending.append(row)
            if len(pending) >= LOWER_BOUND_FRAME_ROWS:
                delta.lower_bound_bytes += self._rows_frame_bytes(pending)
                pending = []
        delta.lower_bound_bytes += self._rows_frame_bytes(pending) + self._keys_frame_bytes([])
        delta.column_lower_bound_bytes = delta.lower_bound_bytes
        return delta

    def advance(self, touched: Iterable) -> TrueDelta:
        """The true delta after a round that touched (at most) these keys."""
        keys = list(dict.fromkeys(touched))
        now = self._lookup(keys)
        delta = TrueDelta()
        for k in keys:
            before = self.hashes.get(k)
            row = now.get(k)
            if row is None:
                if before is not None:
                    delta.deleted.append(k)
                    self.fingerprint.remove(_hash_of(self.hashes.pop(k)))
                continue
            state = row_state(row)
            if before is not None and before[:16] == state[:16]:
                continue
            (delta.inserted if before is None else delta.updated).append(k)
            delta.rows[k] = row
            if before is not None:
                delta.changed[k] = changed_cells(before, state)
                self.fingerprint.remove(_hash_of(before))
            self.hashes[k] = state
            self.fingerprint.add(_hash_of(state))
        delta.lower_bound_bytes = self.lower_bound(delta)
        delta.column_lower_bound_bytes = self.column_lower_bound(delta)
        return delta

    def rescan(self) -> Fingerprint:
        """A full scan's fingerprint, to check the incremental one against."""
        fp = Fingerprint()
        for raws in self._scan():
            for raw in raws:
                fp.add(row_hash(self._canonical(raw)))
        return fp

    def rows(self) -> dict:
        """Every row of the site query, by key (only to explain a mismatch)."""
        out = {}
        for raws in self._scan():
            for raw in raws:
                row = self._canonical(raw)
                out[self.key_of(row)] = row
        return out

    # -- the lower bound -----------------------------------------------------------------
    def _rows_frame_bytes(self, rows: list[tuple]) -> int:
        if not rows:
            return 0
        arrays = [pa.array([r[i] for r in rows], type=f.type) for i, f in enumerate(self.schema)]
        return len(frames.arrow_frame(frames.UNGROUPED_ROWS, pa.RecordBatch.from_arrays(arrays, schema=self.schema)))

    def _keys_frame_bytes(self, keys: list) -> int:
        if not keys:
            return 0
        if len(self.key_pos) == 1:
            arrays = [pa.array(keys, type=self.key_schema[0].type)]
        else:
            arrays = [pa.array([k[i] for k in keys], type=f.type) for i, f in enumerate(self.key_schema)]
        return len(frames.arrow_frame(frames.DELETED_KEYS, pa.RecordBatch.from_arrays(arrays, schema=self.key_schema)))

    def lower_bound(self, delta: TrueDelta) -> int:
        """zstd-compressed Arrow frames of the new and updated rows in full plus the deleted keys."""
        rows = list(delta.rows.values())
        total = sum(
            self._rows_frame_bytes(rows[i : i + LOWER_BOUND_FRAME_ROWS])
            for i in range(0, len(rows), LOWER_BOUND_FRAME_ROWS)
        )
        return total + self._keys_frame_bytes(delta.deleted)

    def column_lower_bound(self, delta: TrueDelta) -> int:
        """As `lower_bound`, but each update ships only its key and the values it changed:
        zstd Arrow frames of the inserted rows in full, of the updated keys beside each
        other column's changed values (null where it did not change: the null bitmap is the
        presence bitmap), and of the deleted keys."""
        inserted = [delta.rows[k] for k in delta.inserted]
        total = sum(
            self._rows_frame_bytes(inserted[i : i + LOWER_BOUND_FRAME_ROWS])
            for i in range(0, len(inserted), LOWER_BOUND_FRAME_ROWS)
        )
        updated = delta.updated
        for start in range(0, len(updated), LOWER_BOUND_FRAME_ROWS):
            keys = updated[start : start + LOWER_BOUND_FRAME_ROWS]
            cells = [
                [delta.rows[k][i] if i in self.key_pos or i in delta.changed[k] else None for k in keys]
                for i in range(len(self.columns))
            ]
            arrays = [pa.array(values, type=f.type) for values, f in zip(cells, self.schema)]
            batch = pa.RecordBatch.from_arrays(arrays, schema=self.schema.with_metadata(None))
            total += len(frames.arrow_frame(frames.UNGROUPED_ROWS, _nullable(batch)))
        return total + self._keys_frame_bytes(delta.deleted)

    # -- checking a view -----------------------------------------------------------------
    def parse(self, obj: dict) -> tuple:
        """A view row as JSON (one NDJSON object) -> canonical tuple in column order."""
        return tuple(p(obj[c.name]) for p, c in zip(self.parsers, self.columns))

    def _json_key(self, obj: dict):
        parts = [self.parsers[i](obj[self.columns[i].name]) for i in self.key_pos]
        return parts[0] if len(parts) == 1 else tuple(parts)

    def check_rows(self, lines: Iterable[dict]) -> list[str]:
        """Problems found comparing all of a view's rows with the truth (empty: equal)."""
        fp = Fingerprint()
        for obj in lines:
            fp.add(row_hash(self.parse(obj)))
        if fp == self.fingerprint:
            return []
        return [f"view has {fp.count} rows, source {self.fingerprint.count}; row fingerprints differ"]

    def explain(self, lines: Iterable[dict]) -> list[str]:
        """Which rows differ (slow: holds both sides in memory; only after a mismatch)."""
        view = {}
        for obj in lines:
            row = self.parse(obj)
            view[self.key_of(row)] = row
        truth = self.rows()
        missing = [k for k in truth if k not in view]
        extra = [k for k in view if k not in truth]
        differ = [k for k in truth if k in view and view[k] != truth[k]]
        out = [f"{len(missing)} missing, {len(extra)} extra, {len(differ)} different rows"]
        out += [f"missing {k!r}" for k in missing[:3]] + [f"extra {k!r}" for k in extra[:3]]
        out += [f"differs {k!r}: view {view[k]!r} source {truth[k]!r}" for k in differ[:3]]
        return out

    def check_delta(self, lines: Iterable[dict], delta: TrueDelta) -> list[str]:
        """Problems found comparing a sync's delta (NDJSON {op, row}) with the true delta."""
        want = {
            **{k: "insert" for k in delta.inserted},
            **{k: "update" for k in delta.updated},
            **{k: "delete" for k in delta.deleted},
        }
        got: dict = {}
        problems = []
        for line in lines:
            op, obj = line["op"], line["row"]
            k = self._json_key(obj)
            if k in got:
                problems.append(f"key {k!r} twice in the delta")
            got[k] = op
            if op != "delete" and want.get(k) == op and self.parse(obj) != delta.rows[k]:
                problems.append(f"{op} of {k!r} carries {self.parse(obj)!r}, source has {delta.rows[k]!r}")
        wrong = [k for k in want.keys() | got.keys() if want.get(k) != got.get(k)]
        if wrong:
            problems.append(
                f"{len(wrong)} keys with the wrong operation, e.g. "
                + ", ".join(f"{k!r}: {got.get(k)} (true: {want.get(k)})" for k in wrong[:3])
            )
        return problems


class PostgresTruth(SourceTruth):
    """The same truth read from a PostgreSQL source (`db` is the reader's URL) through psycopg."""

    PARAM = "%s"

    def _connect(self):
        return psycopg.connect(self.db)

    def _scan(self) -> Iterator[list[tuple]]:
        # A server-side cursor, as the agent reads: a client-side one would hold the whole
        # result in memory before the first row.
        with self._connect() as conn, conn.cursor(name="oracle_scan") as cursor:
            cursor.execute(self.site_sql)
            while rows := cursor.fetchmany(FETCH_ROWS):
                yield rows
