"""A driver's values of one column, converted by Arrow as a whole, to canonical Arrow arrays.

An adapter names for each column a *wire type* (`Adapter.wire_type`): the Arrow type its
driver's values are handed to Arrow as, all the rows of a batch in one call, without a
Python object per value. The wire type is chosen so that Arrow either reads every value
the driver can hand over exactly as the column's converter would, or refuses the batch
(then the converter reads it value by value). `finish` turns the wire array into the
column's canonical array, or says that some value needs the converter's judgement.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltasieve_protocol.types import LogicalType

#: Scaled decimals below this magnitude are exact in a float64 with room to spare: two
#: multiples of 10**-scale never read back as the same float (see `decimals_from_floats`).
_EXACT_UNITS = 2.0**50
#: Powers of ten up to this one are exact in a float64.
_MAX_EXACT_SCALE = 22
_INT64_LIMIT = 2.0**63
#: Day number of 0001-01-01: Arrow reads year 0 from text, Python's dates start at year 1.
_FIRST_DAY = -719162


def finish(type_: LogicalType, wire: pa.Array, arrow_type: pa.DataType) -> pa.Array | None:
    """The canonical array of a column read as `wire`, or None where a value needs its converter.

    >>> finish(LogicalType.parse("int"), pa.array([1.0, None, -3.0]), pa.int64()).to_pylist()
    [1, None, -3]
    >>> finish(LogicalType.parse("int"), pa.array([1.5]), pa.int64()) is None
    True
    """
    if wire.type == arrow_type:
        return wire
    if pa.types.is_float64(wire.type):
        if type_.kind == "int":
            return ints_from_floats(wire)
        if type_.kind == "decimal":
            return decimals_from_floats(wire, arrow_type)
    return None


def whole(column: pa.ChunkedArray) -> pa.Array:
    """The column as one array: its only chunk as it is (combine_chunks would copy it), or its chunks joined.

    >>> whole(pa.chunked_array([[1, 2]])).to_pylist(), whole(pa.chunked_array([[1], [2]])).to_pylist()
    ([1, 2], [1, 2])
    """
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def _values(wire: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The floats (nulls as 0.0) and which are valid."""
    valid = wire.is_valid().to_numpy(zero_copy_only=False)
    return np.where(valid, wire.to_numpy(zero_copy_only=False), 0.0), valid


def ints_from_floats(wire: pa.Array) -> pa.Array | None:
    """Integral floats (SQLite's integers, read as doubles) as int64; None if one is not integral.

    >>> ints_from_floats(pa.array([2.0**53, -0.0])).to_pylist()
    [9007199254740992, 0]
    >>> ints_from_floats(pa.array([float("inf")])) is None
    True
    """
    x, valid = _values(wire)
    if not (np.isfinite(x).all() and (np.floor(x) == x).all() and (np.abs(x) < _INT64_LIMIT).all()):
        return None
    return pa.array(x.astype(np.int64), pa.int64(), mask=~valid)


def decimals_from_floats(wire: pa.Array, arrow_type: pa.Decimal128Type) -> pa.Array | None:
    """Floats as the decimals their shortest text reads as, or None if one needs rounding.

    The converter takes a float `v` as `Decimal(repr(v))` quantized to the scale. When
    `n / 10**scale` reads back as `v` for an integer `n` below 2**50, no other multiple
    of 10**-scale does (the float's neighbours are closer than 10**-scale / 2), and the
    shortest text of `v` is that multiple: the decimal is exactly `n` units. Any float
    with more digits than the scale, or out of range, is left to the converter.

    >>> t = pa.decimal128(4, 2)
    >>> decimals_from_floats(pa.array([1.25, 3.0, None, -0.1]), t).to_pylist()
    [Decimal('1.25'), Decimal('3.00'), None, Decimal('-0.10')]
    >>> decimals_from_floats(pa.array([1.005]), t) is None  # 1.00 after rounding: the converter's call
    True
    >>> decimals_from_floats(pa.array([100.0]), t) is None  # 100.00 does not fit decimal(4, 2)
    True
    """
    scale = arrow_type.scale
    if scale > _MAX_EXACT_SCALE:
        return None
    x, valid = _values(wire)
    unit = 10.0**scale
    if not np.isfinite(x).all():
        return None
    scaled = x * unit
    if (np.abs(scaled) >= _EXACT_UNITS).any():
        return None
    units = np.rint(scaled)
    if not (units / unit == x).all():  # some float has more digits than the scale
        return None
    if (np.abs(units) >= 10.0**arrow_type.precision).any():  # too wide: the converter says so
        return None
    ints = units.astype(np.int64)
    words = np.empty((len(ints), 2), np.int64)  # 128-bit little-endian: low word, then sign
    words[:, 0] = ints
    words[:, 1] = ints >> 63
    array = pa.Array.from_buffers(arrow_type, len(ints), [None, pa.py_buffer(words)])
    if valid.all():
        return array
    return pc.if_else(pa.array(valid), array, pa.scalar(None, arrow_type))


def dates_from_text(wire: pa.Array) -> pa.Array | None:
    """ISO dates stored as text (SQLite) as date32, or None where one needs `date.fromisoformat`'s judgement.

    Arrow's parser accepts exactly YYYY-MM-DD, which reads the same as date.fromisoformat;
    any other form, and year 0 (which Python cannot hold), is left to the converter.

    >>> dates_from_text(pa.array(["2024-02-29", None])).to_pylist()
    [datetime.date(2024, 2, 29), None]
    >>> dates_from_text(pa.array(["2024-2-29"])), dates_from_text(pa.array(["0000-01-01"]))
    (None, None)
    """
    try:
        days = wire.cast(pa.date32())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    low = pc.min(days.cast(pa.int32())).as_py()
    return days if low is None or low >= _FIRST_DAY else None
