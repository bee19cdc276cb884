"""The canonical row encoding compiled: a batch's rows in one call, no Python object per row.

The kernel takes every batch in one layout of plain NumPy arrays (`ColumnArrays`), so that
one compiled version serves every schema: per column a kind, a tag byte and a parameter,
and either one int64 per row (integers, dates, timestamps, booleans, float bits, the
unscaled values of decimals of up to 18 digits) or the bytes of each row (text, bytes).
What the kernel does not encode itself (decimals of more digits, Arrow types the encoding
takes value by value) arrives already encoded, by the function the caller names, and is
copied verbatim: so the rows are bit for bit those of `encoding.reference_encoded_rows`,
the definition the tests hold the kernel to (spec: openapi/row-encoding.md).

The kernel writes the rows one after another into one byte buffer, `EncodedRows`: the
buffers of an Arrow binary array, and what `xxh3.xxh3_64_slices` hashes row by row.
The kernel itself is `kernels/row_encoding.py`, run from its ahead-of-time build or numba's
JIT of the same source (compiled.py): numba is a dependency, not an option, since a second
path chosen by what is installed would be a second definition of the bits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from deltasieve_protocol import compiled
from deltasieve_protocol.kernels.row_kinds import DAYS, DECIMAL, FLAG, FLOAT, PREFIXED, VERBATIM, WIDEST, WORD
from deltasieve_protocol.types import Column, LogicalType

#: Decimals whose unscaled value the kernel takes as an int64 (as `encoding` does).
_INT64_DECIMAL_DIGITS = 18


@dataclass(frozen=True)
class ColumnArrays:
    """A batch's columns in the layout the kernel is compiled for.

    `kinds`, `tags`, `params` (a decimal's scale) and `slots` hold one int64 per column;
    a column's slot is its row of `values` (one int64 per row, for the fixed-width kinds)
    or of `offsets` (for the two kinds with bytes of their own: row i's bytes are
    `data[offsets[slot, i]:offsets[slot, i + 1]]`). `valid` (columns x rows) is False where
    the value is NULL.
    """

    kinds: np.ndarray
    tags: np.ndarray
    params: np.ndarray
    slots: np.ndarray
    values: np.ndarray
    valid: np.ndarray
    offsets: np.ndarray
    data: np.ndarray

    @property
    def rows(self) -> int:
        return int(self.valid.shape[1])


@dataclass(frozen=True)
class EncodedRows:
    """The canonical bytes of a batch's rows: row i is `data[offsets[i]:offsets[i + 1]]`."""

    offsets: np.ndarray
    data: np.ndarray

    def to_arrow(self) -> pa.Array:
        """The rows as a binary array (large_binary past 2 GiB), sharing the data buffer."""
        rows = len(self.offsets) - 1
        if self.offsets[-1] < 2**31:
            offsets, type_ = self.offsets.astype(np.int32), pa.binary()
        else:
            offsets, type_ = self.offsets, pa.large_binary()
        return pa.Array.from_buffers(type_, rows, [None, pa.py_buffer(offsets), pa.py_buffer(self.data)])


#: Encodes one column the kernel does not cover into a binary array of canonical encodings.
EncodeColumn = Callable[[LogicalType, pa.Array], pa.Array]


def encode(batch: pa.RecordBatch | pa.Table, columns: Sequence[Column], encode_other: EncodeColumn) -> EncodedRows:
    """The canonical bytes of every row of `batch`, columns taken in the order of `columns`.

    Args:
        encode_other: encodes a column the kernel does not take (see `column_arrays`).
    """
    if batch.num_rows == 0:
        return EncodedRows(np.zeros(1, np.int64), np.empty(0, np.uint8))
    arrays = column_arrays(batch, columns, encode_other)
    out = _pooled(int(WIDEST[arrays.kinds].sum()) * arrays.rows + len(arrays.data), np.uint8)
    starts = _pooled(arrays.rows + 1, np.int64)
    end = compiled.kernel("encode")(
        arrays.kinds,
        arrays.tags,
        arrays.params,
        arrays.slots,
        arrays.values,
        arrays.valid,
        arrays.offsets,
        arrays.data,
        out,
        starts,
    )
    return EncodedRows(starts, out[:end])


def column_arrays(
    batch: pa.RecordBatch | pa.Table, columns: Sequence[Column], encode_other: EncodeColumn
) -> ColumnArrays:
    """The columns of `batch` in the kernel's layout; a column that the kernel does not encode
    itself is encoded by `encode_other` and copied verbatim."""
    rows = batch.num_rows
    forms = [_form(column.type, batch.column(column.name), encode_other) for column in columns]
    # fresh, writable arrays, filled in one pass each: numba compiles a version of its own
    # for read-only arrays (NumPy views of Arrow buffers)
    values = _pooled((sum(f.values is not None for f in forms), rows), np.int64)
    offsets = _pooled((len(forms) - len(values), rows + 1), np.int64)
    valid = _pooled((len(forms), rows), np.bool_)
    valid[...] = True
    slots: list[int] = []
    pieces: list[np.ndarray] = []
    size = 0
    for i, form in enumerate(forms):
        if form.array.null_count:
            valid[i] = form.array.is_valid().to_numpy(zero_copy_only=False)
        if form.values is not None:
            slots.append(len(slots) - len(pieces))
            values[slots[-1]] = form.values
        else:
            slots.append(len(pieces))
            starts, bytes_ = _binary(form.array)
            np.subtract(starts, int(starts[0]) - size, out=offsets[slots[-1]], dtype=np.int64)
            pieces.append(bytes_[starts[0] : starts[-1]])
            size += len(pieces[-1])
    return ColumnArrays(
        kinds=np.array([f.kind for f in forms], np.int64),
        tags=np.array([f.tag for f in forms], np.int64),
        params=np.array([f.param for f in forms], np.int64),
        slots=np.array(slots, np.int64),
        values=values,
        valid=valid,
        offsets=offsets,
        data=np.concatenate(pieces, out=_pooled(size, np.uint8)) if pieces else _pooled(0, np.uint8),
    )


def _pooled(shape: int | tuple[int, ...], dtype: type) -> np.ndarray:
    """An uninitialized array in Arrow's memory pool, which keeps the memory a batch frees for
    the next one: malloc handed blocks of this size (a batch's rows, ~2 MiB) back to the
    system and the next batch faulted them in again, which doubled the CPU time of
    `encode` in the hash benchmark (tests/benchmarks/hash_phase.py)."""
    dtype_ = np.dtype(dtype)
    count = int(np.prod(shape))
    return np.frombuffer(pa.allocate_buffer(count * dtype_.itemsize), dtype_, count=count).reshape(shape)


@dataclass(frozen=True)
class _Form:
    """How the kernel takes one column: its kind, tag and parameter; `values`, the fixed-width
    values (any integer dtype, or float bits as int64) or None for the kinds with bytes of
    their own, which are those of `array` (string or binary), whose NULLs are the column's."""

    kind: int
    tag: int
    array: pa.Array
    values: np.ndarray | None = None
    param: int = 0


def _form(type_: LogicalType, array: pa.Array | pa.ChunkedArray, encode_other: EncodeColumn) -> _Form:
    """The kernel's form of a column. The Arrow types it takes are those that
    `encoding._encode_column_arrow` takes; the rest are encoded by `encode_other`."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    kind, t = type_.kind, array.type
    if kind == "int" and pa.types.is_integer(t):
        return _Form(WORD, ord("i"), array, _words(array if t == pa.int64() else array.cast(pa.int64()), np.int64))
    if kind == "float" and pa.types.is_floating(t):
        bits = _words(array if t == pa.float64() else array.cast(pa.float64()), np.float64).view(np.int64)
        return _Form(FLOAT, ord("f"), array, bits)
    if kind == "text" and (pa.types.is_string(t) or pa.types.is_large_string(t)):
        return _Form(PREFIXED, ord("s"), array)
    if kind == "bytes" and (pa.types.is_binary(t) or pa.types.is_large_binary(t)):
        return _Form(PREFIXED, ord("b"), array)
    if kind == "bool" and pa.types.is_boolean(t):
        return _Form(FLAG, ord("?"), array, array.fill_null(False).to_numpy(zero_copy_only=False))
    if kind == "date" and (pa.types.is_date32(t) or pa.types.is_date64(t)):
        days = array if pa.types.is_date32(t) else array.cast(pa.date32())
        return _Form(DAYS, ord("d"), array, _words(days, np.int32))
    if kind in ("timestamp", "timestamptz") and pa.types.is_timestamp(t) and t.unit == "us":
        # naive values count from the naive epoch, aware ones are stored in UTC: either
        # way the stored integer is the value's
        return _Form(WORD, ord("T" if kind == "timestamp" else "Z"), array, _words(array, np.int64))
    if kind == "decimal" and pa.types.is_decimal128(t) and t.precision <= _INT64_DECIMAL_DIGITS:
        # the low 8 bytes of each 16-byte little-endian value are the unscaled value itself
        return _Form(DECIMAL, ord("n"), array, _words(array, np.int64, per_value=2)[::2], param=t.scale)
    encoded = encode_other(type_, array)
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks()
    return _Form(VERBATIM, 0, encoded)


def _words(array: pa.Array, dtype: type, per_value: int = 1) -> np.ndarray:
    """A view of the fixed-width values in the data buffer of `array`, `per_value` words of
    `dtype` (little-endian) to a value (what a NULL holds there is never read)."""
    word = np.dtype(dtype).newbyteorder("<")
    buffer = array.buffers()[1]
    count = len(array) * per_value
    if buffer is None:
        return np.zeros(count, word)
    return np.frombuffer(buffer, word, count=count, offset=array.offset * per_value * word.itemsize)


def _binary(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Views of the offsets (int32 or int64) and data (uint8) of a string or binary array."""
    wide = pa.types.is_large_string(array.type) or pa.types.is_large_binary(array.type)
    width = 8 if wide else 4
    _, offsets, data = array.buffers()
    starts = np.frombuffer(offsets, f"<i{width}", count=len(array) + 1, offset=array.offset * width)
    return starts, np.frombuffer(data, np.uint8) if data is not None else np.empty(0, np.uint8)
