"""Raw database rows to Arrow batches of canonical values, whatever the adapter."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import replace
from operator import itemgetter
from typing import Any

import pyarrow as pa

from deltasieve_protocol import column_types
from deltasieve_protocol.types import Column, arrow_schema
from remote_agent import policies
from remote_agent.adapters.base import Adapter, ColumnInfo
from remote_agent.adapters.columns import dates_from_text, finish
from remote_agent.errors import SourceDataError, example_row


class RowConverter:
    """Turns raw database rows into Arrow batches of canonical values.

    `where` names what the rows come from in error messages ("table 'people'").

    The columns the adapter gives a wire type (`Adapter.wire_type`, see columns.py) are
    read by Arrow from the rows in one call, without a Python object per value; the
    others, and any column whose wire array a value keeps from finishing, are taken
    column by column, and value by value where needed.
    """

    def __init__(
        self,
        adapter: Adapter,
        columns: Sequence[ColumnInfo],
        where: str = "the site query",
        *,
        hash_key: bytes | None = None,
    ):
        """`hash_key`: what a hashed column (`ColumnInfo.policy`) is keyed with (remote_agent/policies.py)."""
        self.columns = list(columns)
        # a column read as a stronger type than declared (a view's column_types) is read strictly;
        # a hashed or masked one (a column policy) is read as its type, then transformed
        self.converters = [_converter(adapter, c, hash_key) for c in columns]
        self.schema = arrow_schema([Column(c.name, c.type) for c in columns])
        self.where = where
        wire = [adapter.wire_type(c) if c.read_from is None and c.policy is None else None for c in columns]
        self._wired = [i for i, t in enumerate(wire) if t is not None]
        self._wire = pa.struct([(str(i), wire[i]) for i in self._wired]) if self._wired else None
        # the wired columns of a row as a tuple, when not all of them are
        self._pick = _picker(self._wired) if self._wired and len(self._wired) < len(self.columns) else None

    def batch(self, rows: list[tuple], key: Sequence[str]) -> pa.RecordBatch:
        if not rows:
            return pa.RecordBatch.from_pylist([], schema=self.schema)
        arrays: list[pa.Array | None] = [None] * len(self.columns)
        for i, wire in zip(self._wired, self._read_wire(rows)):
            arrays[i] = finish(self.columns[i].type, wire, self.schema.field(i).type)
        for i, array in enumerate(arrays):
            if array is None:
                arrays[i] = self._column(i, rows, key)
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _read_wire(self, rows: list[tuple]) -> list[pa.Array]:
        """The wired columns as Arrow reads them, or none if Arrow refuses a value."""
        if self._wire is None:
            return []
        source = rows if self._pick is None else list(map(self._pick, rows))
        try:
            read = pa.array(source, self._wire)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            return []
        return [read.field(j) for j in range(len(self._wired))]

    def _column(self, i: int, rows: list[tuple], key: Sequence[str]) -> pa.Array:
        """Column `i`, built by Arrow if its values are canonical already, else value by value."""
        column, convert, arrow_type = self.columns[i], self.converters[i], self.schema.field(i).type
        raw = [row[i] for row in rows]
        plain = column.read_from is None and column.policy is None
        fast = _whole_column(column.type.kind, raw, arrow_type) if plain else None
        if fast is not None:
            return fast
        values = []
        for row, value in zip(rows, raw):
            try:
                values.append(convert(value))
            except (ValueError, TypeError, ArithmeticError) as exc:
                example = {k: row[self._pos(k)] for k in key}
                # never the raw value of a hashed or masked column, not even in an error
                whole = example_row({c.name: policies.redacted(c, v) for c, v in zip(self.columns, row)})
                if column.policy is not None:
                    value = policies.redacted(column, value)
                asked = (
                    ""
                    if column.read_from is None
                    else f" (declared {column.read_from}, read as the view's column_types ask)"
                )
                raise SourceDataError(
                    f"{self.where}: column {column.name!r}{asked} should hold {column.type} values, but the row with key {example} has {value!r}, "
                    f"which cannot be read as {column.type} ({exc}); the row: {whole}. Fix the value at the source, "
                    f"or redefine the view if the column's meaning changed"
                ) from None
        return pa.array(values, type=arrow_type)

    def _pos(self, name: str) -> int:
        return next(i for i, c in enumerate(self.columns) if c.name == name)


def _converter(adapter: Adapter, column: ColumnInfo, hash_key: bytes | None) -> Callable[[Any], Any]:
    """The function making a raw value of `column` its canonical value, its policy applied."""
    if column.read_from is not None:
        return column_types.converter(column.read_from, column.type)
    if column.policy is None:
        return adapter.converter(column)
    read = adapter.converter(replace(column, type=column.policy_from or column.type, policy=None, policy_from=None))
    apply = policies.transform(column, hash_key)
    assert apply is not None
    return lambda value: apply(read(value))


def _picker(positions: list[int]) -> Callable[[tuple], tuple]:
    """A function taking the values at `positions` of a row, as a tuple.

    >>> _picker([2])(("a", "b", "c")), _picker([0, 2])(("a", "b", "c"))
    (('c',), ('a', 'c'))
    """
    if len(positions) == 1:
        (only,) = positions
        return lambda row: (row[only],)
    return itemgetter(*positions)


_NONE = type(None)
#: Raw value types a driver hands over that already are the canonical value of the column's
#: kind, exactly (bool is not int, datetime is not date): such a column is built by Arrow
#: in one call instead of value by value.
_CANONICAL_TYPES = {
    "int": {int, _NONE},
    "float": {float, _NONE},
    "text": {str, _NONE},
    "bytes": {bytes, _NONE},
    "date": {dt.date, _NONE},
}


def _whole_column(kind: str, values: list, arrow_type: pa.DataType) -> pa.Array | None:
    """The column as an Arrow array when no value needs converting (None: convert one by one).

    Also takes dates stored as ISO text (SQLite): Arrow's parser accepts exactly
    YYYY-MM-DD, which reads the same as date.fromisoformat; anything else falls back to
    the value-by-value converter and its error message.

    >>> _whole_column("int", [1, None, 3], pa.int64()).to_pylist()
    [1, None, 3]
    >>> _whole_column("int", [1, True], pa.int64()) is None
    True
    """
    present = set(map(type, values))
    try:
        if present <= _CANONICAL_TYPES.get(kind, set()):
            return pa.array(values, arrow_type)
        if kind == "date" and present <= {str, _NONE}:
            return dates_from_text(pa.array(values, pa.string()))
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return None
    return None
