"""A columnar index of the keys an extraction request carries.

The agent matches every scanned row against the keys the warehouse sent (unit keys, or
keys with a per-tuple hash). A Python dict from key to position costs about 150 bytes a
key; at millions of keys that is the agent's largest allocation, on a host we are guests
on. This index keeps the keys sorted by a 64-bit fingerprint in numpy arrays instead:

- one integer key column: the fingerprint *is* the key, so a match is exact;
- any other key: the fingerprint is xxh3-64 of the key's canonical encoding, and every
  fingerprint match is confirmed by comparing the key columns themselves. The rare
  fingerprints shared by two different keys of the request are looked up in a small dict.

At rest, 17 bytes a key (fingerprint, payload, seen flag), plus the key columns as Arrow
arrays when the key is not a single integer; building it briefly needs about three times
that.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from deltasieve_protocol.encoding import encode_rows
from deltasieve_protocol.types import Column
from remote_agent.errors import BadRequest

#: Seed of the key fingerprints; they never leave the agent, so any fixed value will do.
FINGERPRINT_SEED = 0

Fingerprint = Callable[[pa.Table], np.ndarray]


def _integer_fingerprint(keys: pa.Table) -> np.ndarray:
    return keys.column(0).to_numpy(zero_copy_only=False).astype(np.int64, copy=False).view(np.uint64)


def hashed_fingerprint(columns: Sequence[Column]) -> Fingerprint:
    """xxh3-64 of the canonical encoding of the key columns, row by row."""

    def fingerprint(keys: pa.Table) -> np.ndarray:
        encoded = encode_rows(keys, columns)
        return np.fromiter(
            (xxhash.xxh3_64_intdigest(row, FINGERPRINT_SEED) for row in encoded), dtype=np.uint64, count=len(encoded)
        )

    return fingerprint


class KeyIndex:
    """Keys of one request, each with an integer payload and a seen flag.

    Build with `add` (any number of batches), then `freeze` once; afterwards `find` maps
    scanned keys to positions, and positions index `payload`, `seen` and `keys()`.

    >>> from deltasieve_protocol.types import Column, LogicalType
    >>> index = KeyIndex([Column("id", LogicalType("int"))], "unit")
    >>> index.add(pa.table({"id": [30, 10, 20]}), np.array([3, 1, 2]))
    >>> index.freeze()
    >>> [int(index.payload[p]) if p >= 0 else None for p in index.find(pa.table({"id": [20, 99, 30]}))]
    [2, None, 3]
    """

    def __init__(
        self,
        columns: Sequence[Column],
        what: str,
        twice: str = "is in more than one unit",
        fingerprint: Fingerprint | None = None,
    ):
        self.columns = list(columns)
        self.schema = pa.schema([pa.field(c.name, c.type.arrow()) for c in self.columns])
        self.what = what  # names the request part in errors ("unit", "tuple hash")
        self.twice = twice  # what a key sent twice did, for its error
        self.exact = fingerprint is None and len(self.columns) == 1 and self.columns[0].type.kind == "int"
        self.fingerprint = fingerprint or (_integer_fingerprint if self.exact else hashed_fingerprint(self.columns))
        self._parts: list[tuple[pa.Table, np.ndarray]] = []
        self.fingerprints = np.empty(0, np.uint64)
        self.payload = np.empty(0, np.int64)
        self.seen = np.empty(0, np.bool_)
        self._keys: pa.Table | None = None
        self._shared: dict = {}  # key -> position, for fingerprints that several keys share

    def __len__(self) -> int:
        return len(self.payload)

    def add(self, keys: pa.Table | pa.RecordBatch, payload: np.ndarray) -> None:
        """Queue keys (columns named as the key) with one payload integer each."""
        missing = [c.name for c in self.columns if c.name not in keys.schema.names]
        if missing:
            raise BadRequest(f"{self.what} key frame lacks key columns {missing}")
        try:
            table = pa.Table.from_batches([keys]) if isinstance(keys, pa.RecordBatch) else keys
            table = table.select([c.name for c in self.columns]).cast(self.schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise BadRequest(
                f"{self.what} keys do not have the key's types {[str(c.type) for c in self.columns]}: {exc}"
            ) from None
        if table.num_rows:
            for c in self.columns:
                if table.column(c.name).null_count:
                    raise BadRequest(f"{self.what} key column {c.name!r} holds NULL; keys are never NULL")
            self._parts.append((table, np.asarray(payload, np.int64)))

    def freeze(self) -> None:
        """Sort what was added; a key sent twice is a BadRequest."""
        if not self._parts:
            return
        keys = pa.concat_tables([t for t, _ in self._parts]).combine_chunks()
        payload = np.concatenate([p for _, p in self._parts])
        self._parts = []
        prints = self.fingerprint(keys)
        order = np.argsort(prints, kind="stable")
        self.fingerprints = prints[order]
        self.payload = payload[order]
        self.seen = np.zeros(len(order), np.bool_)
        if not self.exact:
            self._keys = keys.take(pa.array(order))
        same = np.flatnonzero(self.fingerprints[1:] == self.fingerprints[:-1])
        if len(same) == 0:
            return
        if self.exact:
            raise BadRequest(f"key {self._key_at(int(same[0]))!r} {self.twice}")
        for pos in np.unique(np.concatenate([same, same + 1])):
            key = self._key_at(int(pos))
            if key in self._shared:
                raise BadRequest(f"key {key!r} {self.twice}")
            self._shared[key] = int(pos)

    def find(self, keys: pa.Table | pa.RecordBatch) -> np.ndarray:
        """Position of every key in `keys` (-1 where the request does not carry it)."""
        table = pa.Table.from_batches([keys]) if isinstance(keys, pa.RecordBatch) else keys
        table = table.select([c.name for c in self.columns])
        if not len(self) or not table.num_rows:
            return np.full(table.num_rows, -1, np.int64)
        prints = self.fingerprint(table)
        pos = np.searchsorted(self.fingerprints, prints)
        pos[pos == len(self)] = 0
        pos = np.where(self.fingerprints[pos] == prints, pos, -1).astype(np.int64)
        if self.exact:
            return pos
        hit = np.flatnonzero(pos >= 0)
        if len(hit):
            stored = self.keys(pos[hit])
            scanned = table.take(pa.array(hit))
            same = np.ones(len(hit), np.bool_)
            for c in self.columns:
                equal = pc.equal(stored.column(c.name), scanned.column(c.name)).to_numpy(zero_copy_only=False)
                same &= np.asarray(equal, np.bool_)
            pos[hit[~same]] = -1
        if self._shared:
            shared = np.flatnonzero(np.isin(prints, self.fingerprints[list(self._shared.values())]))
            for row in shared:
                key = _key_of(table, int(row), self.columns)
                pos[row] = self._shared.get(key, -1)
        return pos

    def keys(self, positions: np.ndarray | None = None) -> pa.Table:
        """The keys at `positions` (all of them by default), as a table of the key columns."""
        if self.exact:
            values = self.fingerprints if positions is None else self.fingerprints[positions]
            return pa.table({self.columns[0].name: pa.array(values.view(np.int64), self.schema.field(0).type)})
        if self._keys is None:
            return self.schema.empty_table()
        return self._keys if positions is None else self._keys.take(pa.array(positions, pa.int64()))

    def _key_at(self, pos: int):
        return _key_of(self.keys(np.array([pos])), 0, self.columns)


def _key_of(table: pa.Table, row: int, columns: Sequence[Column]):
    """One key as the agent's errors and lookups use it: a scalar, or a tuple of scalars."""
    values = tuple(table.column(c.name)[row].as_py() for c in columns)
    return values[0] if len(values) == 1 else values
