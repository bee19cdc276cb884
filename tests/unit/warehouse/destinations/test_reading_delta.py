"""The examples of docs/results/destinations.md, run as written against a table the Delta
destination wrote: deltalake on S3 (the suite's S3-protocol server), deltalake and pandas,
Polars, DuckDB over the Arrow dataset, Spark over the current files."""

from __future__ import annotations

import pyarrow as pa
import pytest

from deltasieve_protocol.types import Column, LogicalType
from tests.support.page_examples import DESTINATIONS_PAGE, examples, run
from tests.support.s3_server import ACCESS_KEY_ID, SECRET_ACCESS_KEY
from warehouse.destinations.delta import DeltaDestination
from warehouse.names import OP
from warehouse.spark import build_session

COLUMNS = [Column("k", LogicalType("int")), Column("v", LogicalType("text"))]


def _examples() -> list[str]:
    return examples(DESTINATIONS_PAGE, "Reading the Delta table")


def _on_s3() -> str:
    (example,) = examples(DESTINATIONS_PAGE, "Delta tables on S3")
    return example


@pytest.fixture(scope="module")
def uri(tmp_path_factory) -> str:
    """A table of three rows, after two syncs (the second deleted one row and updated one)."""
    path = str(tmp_path_factory.mktemp("reading") / "view")
    destination = DeltaDestination(path)
    schema = pa.schema([(OP, pa.string()), ("k", pa.int64()), ("v", pa.string())])
    first = pa.RecordBatch.from_pylist([{OP: "insert", "k": k, "v": str(k)} for k in range(4)], schema=schema)
    destination.apply("s1", 1, COLUMNS, ["k"], [first], False)
    second = [{OP: "delete", "k": 0, "v": None}, {OP: "update", "k": 1, "v": "one"}]
    destination.apply("s2", 2, COLUMNS, ["k"], [pa.RecordBatch.from_pylist(second, schema=schema)], False)
    return path


def _run(example: str, **names) -> dict:
    return run(DESTINATIONS_PAGE, example, **names)


def test_the_page_has_its_examples():
    assert len(_examples()) == 4


def test_deltalake_on_s3(s3_server):
    """The example of a table on S3, against the suite's S3-protocol server."""
    uri = f"s3://{s3_server.bucket()}/views/active_students"
    destination = DeltaDestination(uri, s3_server.storage_options())
    schema = pa.schema([(OP, pa.string()), ("k", pa.int64()), ("v", pa.string())])
    lines = pa.RecordBatch.from_pylist([{OP: "insert", "k": k, "v": str(k)} for k in range(3)], schema=schema)
    destination.apply("s1", 1, COLUMNS, ["k"], [lines], False)
    scope = _run(_on_s3(), uri=uri, endpoint=s3_server.endpoint, key_id=ACCESS_KEY_ID, secret=SECRET_ACCESS_KEY)
    assert sorted(scope["rows"]["v"]) == ["0", "1", "2"]


def test_deltalake_and_pandas(uri):
    scope = _run(_examples()[0], uri=uri)
    assert sorted(scope["rows"]["v"]) == ["2", "3", "one"]
    assert [s for _, s in scope["history"]] == ["s2", "s1"]
    assert len(scope["as_loaded"]) == 4


def test_polars(uri):
    assert sorted(_run(_examples()[1], uri=uri)["rows"]["v"].to_list()) == ["2", "3", "one"]


def test_duckdb(uri):
    assert _run(_examples()[2], uri=uri)["count"] == 3


def test_spark_over_the_current_files(uri):
    spark = build_session("local[1]")
    rows = _run(_examples()[3], uri=uri, spark=spark)["rows"]
    assert sorted(r["v"] for r in rows.collect()) == ["2", "3", "one"]
