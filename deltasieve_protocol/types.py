"""Logical column types shared by the agent and the warehouse.

Every column of a site query has one logical type. It fixes the Arrow type used on the
wire, the Spark type used in the warehouse, and the canonical encoding used for hashing,
so that the same logical row hashes to the same bits whatever engine produced it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pyarrow as pa

#: Widest decimal Spark can store; unconstrained source numerics are read with this shape.
MAX_DECIMAL_PRECISION = 38
#: Scale used for a SQLite `NUMERIC`/`DECIMAL` declared without one: a value with more fractional
#: digits is refused by name, never rounded (PostgreSQL's unconstrained numeric is read as its text).
DEFAULT_DECIMAL_SCALE = 10

_KINDS = ("int", "float", "decimal", "text", "bytes", "bool", "date", "timestamp", "timestamptz")
_DECIMAL_RE = re.compile(r"^decimal\((\d+),(\d+)\)$")


@dataclass(frozen=True)
class LogicalType:
    """One of the supported column types; decimals carry precision and scale."""

    kind: str
    precision: int = 0
    scale: int = 0

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"unknown logical type {self.kind!r}; supported: {', '.join(_KINDS)}")
        if self.kind == "decimal" and not (
            0 <= self.scale <= self.precision <= MAX_DECIMAL_PRECISION and self.precision > 0
        ):
            raise ValueError(f"bad decimal shape ({self.precision},{self.scale})")

    def __str__(self) -> str:
        if self.kind == "decimal":
            return f"decimal({self.precision},{self.scale})"
        return self.kind

    @classmethod
    def parse(cls, text: str) -> LogicalType:
        """Parse the string form used in JSON messages.

        >>> LogicalType.parse("decimal(10,2)")
        LogicalType(kind='decimal', precision=10, scale=2)
        >>> str(LogicalType.parse("text"))
        'text'
        """
        text = text.strip().lower().replace(" ", "")
        match = _DECIMAL_RE.match(text)
        if match:
            return cls("decimal", int(match.group(1)), int(match.group(2)))
        return cls(text)

    def arrow(self) -> pa.DataType:
        """The Arrow type of this column on the wire and in Parquet."""
        return {
            "int": pa.int64(),
            "float": pa.float64(),
            "decimal": pa.decimal128(max(self.precision, 1), self.scale),
            "text": pa.string(),
            "bytes": pa.binary(),
            "bool": pa.bool_(),
            "date": pa.date32(),
            "timestamp": pa.timestamp("us"),
            "timestamptz": pa.timestamp("us", tz="UTC"),
        }[self.kind]

    def spark_ddl(self) -> str:
        """The Spark SQL type name of this column."""
        return {
            "int": "bigint",
            "float": "double",
            "decimal": f"decimal({self.precision},{self.scale})",
            "text": "string",
            "bytes": "binary",
            "bool": "boolean",
            "date": "date",
            "timestamp": "timestamp_ntz",
            "timestamptz": "timestamp",
        }[self.kind]


@dataclass(frozen=True)
class Column:
    """A named, typed column of a site query's output."""

    name: str
    type: LogicalType

    def to_json(self) -> dict:
        return {"name": self.name, "type": str(self.type)}

    @classmethod
    def from_json(cls, data: dict) -> Column:
        return cls(data["name"], LogicalType.parse(data["type"]))


def key_columns(columns: list[Column], key: list[str]) -> list[Column]:
    """The columns of `key`, in the key's order (which need not be the columns').

    >>> cols = [Column("a", LogicalType("int")), Column("b", LogicalType("text")), Column("c", LogicalType("int"))]
    >>> [c.name for c in key_columns(cols, ["c", "a"])]
    ['c', 'a']
    >>> key_columns(cols, ["x"])
    Traceback (most recent call last):
    KeyError: "key column 'x' is not among the columns ['a', 'b', 'c']"
    """
    by_name = {c.name: c for c in columns}
    missing = [k for k in key if k not in by_name]
    if missing:
        raise KeyError(f"key column {missing[0]!r} is not among the columns {list(by_name)}")
    return [by_name[k] for k in key]


def arrow_schema(columns: list[Column]) -> pa.Schema:
    """Arrow schema for rows with these columns (all nullable)."""
    return pa.schema([pa.field(c.name, c.type.arrow()) for c in columns])
