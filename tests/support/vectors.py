"""The row-encoding test vectors (openapi/row-encoding-vectors.json) as Python values."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path

import pyarrow as pa

from deltasieve_protocol.types import LogicalType

PATH = Path(__file__).resolve().parents[2] / "openapi" / "row-encoding-vectors.json"
VECTORS = json.loads(PATH.read_text())
SEED: int = VECTORS["seed"]


def value(type_: str, v):
    """The canonical Python value of a vector's JSON value."""
    if v is None:
        return None
    kind = LogicalType.parse(type_).kind
    return {
        "int": int,
        "float": float,
        "decimal": Decimal,
        "text": str,
        "bytes": bytes.fromhex,
        "bool": bool,
        "date": dt.date.fromisoformat,
        "timestamp": dt.datetime.fromisoformat,
        "timestamptz": lambda s: dt.datetime.fromisoformat(s).astimezone(dt.UTC),
    }[kind](v)


def arrow_column(type_: str, values: list) -> pa.Array:
    return pa.array([value(type_, v) for v in values], LogicalType.parse(type_).arrow())
