"""64-bit fingerprints of a row's key and of the whole row, as the sketch strategy pairs them.

Both sides compute them from the same canonical encoding, so a row read from SQLite,
PostgreSQL or the warehouse's Parquet gets the same pair. A key of one integer column is
its own fingerprint (its two's complement bits): unique, and invertible, so either side
goes from the fingerprint straight back to the key. Any other key gets a seeded 64-bit
hash of its canonical encoding; a side that needs the key back keeps the pairing it met.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat

import numpy as np
import pyarrow as pa
import xxhash

from deltasieve_protocol.encoding import reference_encoded_rows, row_bytes
from deltasieve_protocol.types import Column
from deltasieve_protocol.xxh3 import xxh3_64_slices


def sketch_seeds(secret: int) -> tuple[int, int]:
    """Seeds of the key fingerprints and of the row hashes of a sketch, from its secret.

    >>> sketch_seeds(5), sketch_seeds(2**64 - 1)
    ((5, 6), (18446744073709551615, 0))
    """
    return secret, (secret + 1) % 2**64


def integer_key(key: Sequence[Column]) -> bool:
    """Whether the key is one integer column (its values are their own fingerprints)."""
    return len(key) == 1 and key[0].type.kind == "int"


def key_fingerprints(batch: pa.RecordBatch | pa.Table, key: Sequence[Column], seed: int) -> np.ndarray:
    """The key fingerprint of every row, as uint64.

    >>> from deltasieve_protocol.types import LogicalType
    >>> ints = [Column("id", LogicalType.parse("int"))]
    >>> key_fingerprints(pa.table({"id": [1, -1]}), ints, seed=7).tolist()
    [1, 18446744073709551615]
    >>> texts = [Column("code", LogicalType.parse("text"))]
    >>> a, b = key_fingerprints(pa.table({"code": ["x", "x"]}), texts, seed=7)
    >>> bool(a == b)
    True
    """
    if integer_key(key):
        values = batch.column(key[0].name)
        if values.null_count:
            raise ValueError(f"key column {key[0].name!r} holds NULL")
        return values.to_numpy(zero_copy_only=False).astype(np.int64).view(np.uint64)
    return row_fingerprints(batch, key, seed)


def row_fingerprints(batch: pa.RecordBatch | pa.Table, columns: Sequence[Column], seed: int) -> np.ndarray:
    """Seeded xxh3-64 of each row's canonical encoding over `columns`, as uint64 (compiled:
    the rows are encoded into one buffer and hashed in place)."""
    rows = row_bytes(batch, columns)
    return xxh3_64_slices(rows.offsets, rows.data, seed)


def reference_row_fingerprints(batch: pa.RecordBatch | pa.Table, columns: Sequence[Column], seed: int) -> np.ndarray:
    """`row_fingerprints` by the reference encoding and the xxhash package, row by row: the
    definition the compiled path is tested against."""
    # map runs the calls from C: a generator expression cost a Python frame per row
    rows = reference_encoded_rows(batch, columns).to_pylist()
    data = b"".join(map(xxhash.xxh3_64_digest, rows, repeat(seed)))
    return np.frombuffer(data, dtype=">u8").astype(np.uint64)


def keys_from_fingerprints(fingerprints: np.ndarray, key: Sequence[Column]) -> pa.Table:
    """The keys of an integer key's fingerprints (see `integer_key`).

    >>> from deltasieve_protocol.types import LogicalType
    >>> keys_from_fingerprints(np.array([5, 2**64 - 2], np.uint64), [Column("id", LogicalType.parse("int"))]).column(0).to_pylist()
    [5, -2]
    """
    if not integer_key(key):
        raise ValueError("only a key of one integer column is its own fingerprint")
    return pa.table({key[0].name: pa.array(np.asarray(fingerprints, np.uint64).view(np.int64), key[0].type.arrow())})


def compile_kernels() -> int:
    """Build the row kernel, the hash and the IBLT fold ahead of time (`compiled.build`, unless
    built from these sources already), so that no process loads numba to run them; `make
    install` and the Docker images call it. Returns the fingerprint of one row of every kind,
    computed by the kernels the process then uses.

    >>> compile_kernels() > 0
    True
    """
    from deltasieve_protocol import compiled

    compiled.build()
    import datetime as dt
    from decimal import Decimal

    from deltasieve_protocol.iblt import Iblt
    from deltasieve_protocol.types import LogicalType

    for compact in (False, True):  # the fold's two layouts (iblt_fold.LAYOUTS)
        Iblt(6, compact=compact).add(np.ones(2, np.uint64), np.ones(2, np.uint64))

    kinds = ["int", "float", "decimal(10,2)", "text", "bytes", "bool", "date", "timestamp", "timestamptz"]
    values = [1, 0.5, Decimal("1.25"), "a", b"b", True, dt.date(2000, 1, 1), dt.datetime(2000, 1, 1)]
    values.append(dt.datetime(2000, 1, 1, tzinfo=dt.UTC))
    columns = [Column(f"c{i}", LogicalType.parse(k)) for i, k in enumerate(kinds)]
    batch = pa.table({c.name: pa.array([v], c.type.arrow()) for c, v in zip(columns, values, strict=True)})
    return int(row_fingerprints(batch, columns, seed=1)[0])
