"""Per-column digests of updated rows: which columns changed, without shipping the row.

Once a sketch exchange has peeled, the agent knows which keys were updated (their key is
on both sides of the difference) and the warehouse holds each one's old row. For each
updated row the agent sends its key, one DIGEST_BITS-bit digest per column and the row's
64-bit sketch row hash (fingerprints.py); the warehouse compares the digests with those of
the old row and asks for the cells whose digest differs; it rebuilds the new row from the
old one and those cells (`rebuild`), and checks the rebuilt row's hash. A changed column
whose digests collide (probability 2**-DIGEST_BITS) leaves a rebuilt row whose hash differs
(all but 2**-64 of the time, the sketch's own bound on a missed update): that row is
fetched whole (docs/protocol.md).

The digests are seeded with the sketch's row seed, a salt the agent draws for the
exchange and the column's position (`exchange_seed`): crafted values cannot aim at a
collision without the view's secret, and a collision between two values lasts one
exchange. With one seed per view, two values of a status column whose digests collided
(odds of 1 in 256 per pair of values) would send every row that moves between them whole,
on every sync of the view.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from deltasieve_protocol.defaults import DIGEST_BITS, ROW_CHECK_BITS
from deltasieve_protocol.encoding import encode_rows
from deltasieve_protocol.types import Column

#: Bits of the salt the agent draws per exchange (its summary's `digest_salt`): an integer
#: every JSON reader holds exactly.
SALT_BITS = 32
#: An odd 64-bit multiplier spreading the salt over the seed's bits, so that no two salts
#: give two columns the same seed.
_SPREAD = 0x9E3779B97F4A7C15
#: Name of the digests column in UPDATED_DIGESTS frames: fixed-size binary, a byte per column.
DIGESTS = "__ds_digests"
#: Name of the row hash (uint64, the sketch's row fingerprint) in UPDATED_DIGESTS frames,
#: or of its low ROW_CHECK_BITS bits (uint16) when the request asks for short checks.
CHECK = "__ds_row_hash"
#: Key of the summary that gives, with short checks, the XOR of the updated rows' whole row
#: hashes: 16 hex digits (a JSON number would not hold 64 bits exactly in every reader).
HASH_XOR = "row_hash_xor"
#: Name of the changed-columns bitmap in CHANGED_COLUMNS frames: ceil(columns / 8) bytes, most
#: significant bit first (numpy.packbits).
CHANGED = "__ds_changed"


def exchange_seed(row_seed: int, salt: int) -> int:
    """The digests' seed in one exchange: the sketch's row seed mixed with the exchange's salt
    (0, the seed itself: what an agent that draws no salt uses).

    >>> exchange_seed(7, 0), exchange_seed(7, 1) != exchange_seed(7, 2)
    (7, True)
    """
    return (row_seed ^ (salt * _SPREAD)) % 2**64


def column_digests(
    batch: pa.RecordBatch | pa.Table, columns: Sequence[Column], seed: int, bits: int = DIGEST_BITS
) -> np.ndarray:
    """One byte per column per row (rows × columns, uint8): the low `bits` bits of a seeded
    xxh3-64 of the value's canonical encoding, NULL included (0 bits: all zero, every
    changed cell a collision).

    >>> from deltasieve_protocol.types import LogicalType
    >>> cols = [Column("id", LogicalType.parse("int")), Column("name", LogicalType.parse("text"))]
    >>> d = column_digests(pa.table({"id": [1, 1], "name": ["a", None]}), cols, seed=9)
    >>> d.shape, bool(d[0, 0] == d[1, 0]), bool(d[0, 1] == d[1, 1])
    ((2, 2), True, False)
    """
    out = np.zeros((batch.num_rows, len(columns)), np.uint8)
    for i, column in enumerate(columns):
        data = b"".join(map(xxhash.xxh3_64_digest, encode_rows(batch, [column]), repeat((seed + i) % 2**64)))
        out[:, i] = np.frombuffer(data, np.uint8).reshape(-1, 8)[:, 7]
    return out & np.uint8((1 << bits) - 1)


def digests_array(digests: np.ndarray) -> pa.Array:
    """The digests matrix as the fixed-size binary column of an UPDATED_DIGESTS frame."""
    width = max(1, digests.shape[1])
    flat = np.ascontiguousarray(digests if digests.shape[1] else np.zeros((len(digests), 1), np.uint8))
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), len(flat), [None, pa.py_buffer(flat.tobytes())])


def digests_matrix(array: pa.Array | pa.ChunkedArray, columns: int) -> np.ndarray:
    """The digests matrix back from its column (the inverse of `digests_array`).

    >>> m = np.array([[1, 2, 3], [4, 5, 6]], np.uint8)
    >>> digests_matrix(digests_array(m), 3).tolist()
    [[1, 2, 3], [4, 5, 6]]
    """
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if array.type != pa.binary(columns) or array.null_count:
        raise ValueError(f"column digests must be {columns}-byte values without NULL, got {array.type}")
    data = np.frombuffer(array.buffers()[1], np.uint8, len(array) * columns, array.offset * columns)
    return data.reshape(len(array), columns)


def row_checks(hashes: np.ndarray, bits: int) -> pa.Array:
    """The CHECK column of an UPDATED_DIGESTS frame: the row hashes whole (64 bits) or their
    low ROW_CHECK_BITS bits.

    >>> row_checks(np.array([0x12345, 7], np.uint64), 16).to_pylist(), row_checks(np.array([5], np.uint64), 64).type
    ([9029, 7], DataType(uint64))
    """
    if bits == 64:
        return pa.array(hashes, pa.uint64())
    if bits != ROW_CHECK_BITS:
        raise ValueError(f"row checks are {ROW_CHECK_BITS} or 64 bits, not {bits}")
    return pa.array((hashes & np.uint64(0xFFFF)).astype(np.uint16), pa.uint16())


def checks_match(hashes: np.ndarray, checks: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Which of the rebuilt rows' row hashes agree with the CHECK column the agent sent: in
    whole, or in their low bits when it sent short checks (the type says which).

    >>> sent = row_checks(np.array([0x10005, 9], np.uint64), 16)
    >>> checks_match(np.array([0x20005, 8], np.uint64), sent).tolist()
    [True, False]
    """
    values = checks.to_numpy() if isinstance(checks, pa.Array) else checks.combine_chunks().to_numpy()
    if checks.type == pa.uint64():
        return hashes == values
    if checks.type != pa.uint16():
        raise ValueError(f"row checks must be uint64 or uint16, got {checks.type}")
    return (hashes & np.uint64(0xFFFF)) == values


def hash_xor(hashes: np.ndarray) -> str:
    """The XOR of row hashes as HASH_XOR carries it (0 for none).

    >>> hash_xor(np.array([1, 2, 2**63], np.uint64)), hash_xor(np.array([], np.uint64))
    ('8000000000000003', '0000000000000000')
    """
    return format(int(np.bitwise_xor.reduce(hashes, initial=np.uint64(0))), "016x")


def xor_agrees(hashes: np.ndarray, summary: dict) -> bool:
    """Whether the row hashes of all the updated rows as the warehouse ends with them (rebuilt
    or fetched) agree with the XOR the agent's summary gives (True when it gives none: each
    row was then checked by its whole hash).

    >>> xor_agrees(np.array([1, 2], np.uint64), {HASH_XOR: "0000000000000003"}), xor_agrees(np.array([1], np.uint64), {})
    (True, True)
    >>> xor_agrees(np.array([1, 6], np.uint64), {HASH_XOR: "0000000000000003"})
    False
    """
    return HASH_XOR not in summary or hash_xor(hashes) == summary[HASH_XOR]


def bitmap_array(changed: np.ndarray) -> pa.Array:
    """A boolean matrix (rows × columns) as the bitmap column of a CHANGED_COLUMNS frame.

    >>> bitmap_matrix(bitmap_array(np.array([[True, False, True]])), 3).tolist()
    [[True, False, True]]
    """
    packed = np.packbits(changed.astype(bool), axis=1) if changed.shape[1] else np.zeros((len(changed), 1), np.uint8)
    return digests_array(packed)


def bitmap_matrix(array: pa.Array | pa.ChunkedArray, columns: int) -> np.ndarray:
    """The boolean matrix of a bitmap column (the inverse of `bitmap_array`)."""
    packed = digests_matrix(array, max(1, -(-columns // 8)))
    return np.unpackbits(packed, axis=1, count=columns).astype(bool)


def only_changed(rows: pa.Table, changed: np.ndarray) -> pa.Table:
    """`rows` with every cell not marked changed set to NULL: what the agent ships.

    >>> t = only_changed(pa.table({"a": [1, 2], "b": ["x", "y"]}), np.array([[True, False], [False, True]]))
    >>> t.column("a").to_pylist(), t.column("b").to_pylist()
    ([1, None], [None, 'y'])
    """
    arrays = [
        pc.if_else(pa.array(changed[:, i]), rows.column(i), pa.nulls(rows.num_rows, rows.schema.field(i).type))
        for i in range(rows.num_columns)
    ]
    return pa.Table.from_arrays(arrays, schema=rows.schema)


def rebuild(old: pa.Table, cells: pa.Table, changed: np.ndarray) -> pa.Table:
    """The new rows: each changed cell from `cells`, every other from `old` (same order and
    schema); a changed cell that is NULL in `cells` is a value that became NULL.

    >>> old = pa.table({"a": [1, 2], "b": ["x", None]})
    >>> new = rebuild(old, pa.table({"a": [None, None], "b": [None, "z"]}), np.array([[True, False], [False, True]]))
    >>> new.column("a").to_pylist(), new.column("b").to_pylist()
    ([None, 2], ['x', 'z'])
    """
    if old.num_rows != cells.num_rows or changed.shape != (old.num_rows, old.num_columns):
        raise ValueError(
            f"{old.num_rows} old rows, {cells.num_rows} rows of cells and a {changed.shape} bitmap do not match"
        )
    arrays = [pc.if_else(pa.array(changed[:, i]), cells.column(i), old.column(i)) for i in range(old.num_columns)]
    return pa.Table.from_arrays(arrays, schema=old.schema)
