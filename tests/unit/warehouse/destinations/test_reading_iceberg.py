"""The Iceberg examples of docs/results/destinations.md, run as written against a table the
Iceberg destination wrote in its embedded catalog: pyiceberg with time travel, DuckDB over
pyiceberg's Arrow table, Spark over the current snapshot's files."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from deltasieve_protocol.types import Column, LogicalType
from tests.support.page_examples import DESTINATIONS_PAGE, examples, run
from warehouse.destinations import open_destination
from warehouse.names import OP
from warehouse.view_options import DestinationSpec

COLUMNS = [Column("k", LogicalType("int")), Column("v", LogicalType("text"))]


def _examples() -> list[str]:
    return examples(DESTINATIONS_PAGE, "Reading the Iceberg table")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    """A service's DATA_DIR whose iceberg destination holds three rows after two syncs (the
    second deleted one row and updated one)."""
    data_dir = tmp_path_factory.mktemp("reading")
    spec = DestinationSpec(kind="iceberg", table="analytics.active_students")
    destination = open_destination(spec, data_dir, "active_students")
    schema = pa.schema([(OP, pa.string()), ("k", pa.int64()), ("v", pa.string())])
    first = pa.RecordBatch.from_pylist([{OP: "insert", "k": k, "v": str(k)} for k in range(4)], schema=schema)
    destination.apply("s1", 1, COLUMNS, ["k"], [first], False)
    second = [{OP: "delete", "k": 0, "v": None}, {OP: "update", "k": 1, "v": "one"}]
    destination.apply("s2", 2, COLUMNS, ["k"], [pa.RecordBatch.from_pylist(second, schema=schema)], False)
    return data_dir


def _run(example: str, **names) -> dict:
    return run(DESTINATIONS_PAGE, example, **names)


def test_the_page_has_its_examples():
    assert len(_examples()) == 3


def test_pyiceberg_and_duckdb(data_dir):
    scope = _run(_examples()[0], data_dir=data_dir, first_sync="s1")
    assert sorted(scope["rows"].column("v").to_pylist()) == ["2", "3", "one"]
    assert set(scope["syncs"]) == {"s1", "s2"}
    assert len(scope["as_loaded"]) == 4
    assert _run(_examples()[1], table=scope["table"])["count"] == 3


def test_spark_over_the_current_files(data_dir):
    from warehouse.spark import build_session

    table = _run(_examples()[0], data_dir=data_dir, first_sync="s1")["table"]
    rows = _run(_examples()[2], table=table, spark=build_session("local[1]"))["rows"]
    assert sorted(r["v"] for r in rows.collect()) == ["2", "3", "one"]
