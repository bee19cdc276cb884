"""The binary form of a compact IBLT on the wire: its cells as packed little-endian arrays.

An Arrow stream's schema and metadata cost about 900 bytes around a table, more than a
small table itself (the first stage of a sketch exchange is 3 cells). This form is a
6-byte header (form, sub-tables, cells) and then the cells' counts modulo 4 packed four to
a byte, their key sums (8 bytes each, stored byte plane by byte plane: the XOR of integer
keys keeps its high bytes zero, long runs of zeros once so laid out), their row-hash sums
(8 bytes) and their 32-bit checksums: 20.25 bytes a cell, fewer once zstd has taken the
zeros and the repetitions (a table one cell wide repeats one cell per sub-table). The
body after the header is compressed when that makes it shorter (form ZSTD), else sent as
it is (PLAIN). The seed travels in the control message.
"""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa

from deltasieve_protocol.iblt import Iblt

#: The forms of the body after the header (a new layout takes a new number).
PLAIN, ZSTD = 1, 2
_HEADER = struct.Struct("<BBI")
_ZSTD = pa.Codec("zstd", compression_level=3)


def _packed_counts(cells: int) -> int:
    return -(-cells // 4)


def table_bytes(cells: int) -> int:
    """Bytes of a table of `cells` cells in the plain form (at most: see the module docstring).

    >>> table_bytes(3), table_bytes(3 * 1024)
    (67, 62214)
    """
    return _HEADER.size + _packed_counts(cells) + cells * 20


def to_bytes(table: Iblt) -> bytes:
    """A compact table in this form.

    >>> t = Iblt(6, seed=5, compact=True)
    >>> t.add(np.array([1, 2], dtype=np.uint64), np.array([7, 8], dtype=np.uint64), sign=-1)
    >>> back = from_bytes(to_bytes(t), seed=5)
    >>> back.compact, back.cells, bool((back.count == t.count).all() and (back.key_sum == t.key_sum).all())
    (True, 6, True)
    >>> wide = Iblt(3 * 64, seed=5, compact=True)
    >>> wide.add(np.arange(10_000, dtype=np.uint64), np.arange(10_000, dtype=np.uint64) * 2**40)
    >>> len(to_bytes(wide)) < table_bytes(wide.cells), bool((from_bytes(to_bytes(wide), 5).hash_sum == wide.hash_sum).all())
    (True, True)
    """
    if not table.compact:
        raise ValueError("only a compact table has a binary form (Iblt.to_compact)")
    counts = np.zeros(4 * _packed_counts(table.cells), np.uint8)
    counts[: table.cells] = table.count.astype(np.uint8)
    quads = counts.reshape(-1, 4)
    packed = quads[:, 0] | (quads[:, 1] << 2) | (quads[:, 2] << 4) | (quads[:, 3] << 6)
    body = b"".join(
        [
            packed.astype(np.uint8).tobytes(),
            table.key_sum.astype("<u8").view(np.uint8).reshape(-1, 8).T.tobytes(),
            table.hash_sum.astype("<u8").tobytes(),
            table.check_sum.astype("<u4").tobytes(),
        ]
    )
    compressed = _ZSTD.compress(body, asbytes=True)
    if len(compressed) < len(body):
        return _HEADER.pack(ZSTD, table.hashes, table.cells) + compressed
    return _HEADER.pack(PLAIN, table.hashes, table.cells) + body


def from_bytes(data: bytes, seed: int) -> Iblt:
    """The compact table `to_bytes` wrote, with `seed`; ValueError on anything else.

    >>> from_bytes(b"\\x01\\x03", seed=0)
    Traceback (most recent call last):
    ...
    ValueError: a binary IBLT holds at least a 6-byte header, got 2 bytes
    """
    if len(data) < _HEADER.size:
        raise ValueError(f"a binary IBLT holds at least a {_HEADER.size}-byte header, got {len(data)} bytes")
    form, hashes, cells = _HEADER.unpack_from(data)
    if form not in (PLAIN, ZSTD):
        raise ValueError(f"unknown binary IBLT form {form} (this side reads {PLAIN} and {ZSTD})")
    if hashes < 1 or cells < 1 or cells % hashes:
        raise ValueError(f"a binary IBLT of {cells} cells in {hashes} sub-tables: not a positive multiple")
    size = table_bytes(cells) - _HEADER.size
    body = memoryview(data)[_HEADER.size :]  # no copy: the arrays below are filled from it
    if form == ZSTD:
        try:
            body = _ZSTD.decompress(body, decompressed_size=size, asbytes=True)
        except (pa.ArrowException, OSError) as exc:
            raise ValueError(f"a compressed binary IBLT does not decompress: {exc}") from None
    if len(body) != size:
        raise ValueError(f"a binary IBLT of {cells} cells takes {size} bytes after its header, got {len(body)}")
    packed = np.frombuffer(body, np.uint8, _packed_counts(cells))
    at = packed.size
    counts = np.stack([(packed >> shift) & 3 for shift in (0, 2, 4, 6)], axis=1).reshape(-1)[:cells]
    table = Iblt(cells, hashes, seed, compact=True)
    table.count[:] = counts  # two bits each: within the compact range already
    # Straight into the table's arrays, which cast on assignment: no array of a cell's size between.
    planes = np.frombuffer(body, np.uint8, 8 * cells, at).reshape(8, cells)
    table.key_sum[:] = np.ascontiguousarray(planes.T).view("<u8").reshape(-1)
    at += 8 * cells
    table.hash_sum[:] = np.frombuffer(body, "<u8", cells, at)
    table.check_sum[:] = np.frombuffer(body, "<u4", cells, at + 8 * cells)
    return table
