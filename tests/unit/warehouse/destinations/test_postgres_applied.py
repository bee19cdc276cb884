"""deltasieve_applied names the table each sync was applied to: a view's two tables in one
schema are each written and each say which sync they hold, and a log made before the
table_name column is given it in place by the next apply (a server the suite starts)."""

from __future__ import annotations

import datetime as dt

import psycopg
import pyarrow as pa

from deltasieve_protocol.types import Column, LogicalType
from warehouse.destinations.modes import Publishing
from warehouse.destinations.postgres import PostgresDestination
from warehouse.names import OP

COLUMNS = [Column("k", LogicalType("int")), Column("v", LogicalType("text"))]
SCHEMA = pa.schema([pa.field("k", pa.int64()), pa.field("v", pa.string())])
AT = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)


def _update(k: int, v: str) -> list[pa.RecordBatch]:
    fields = [pa.field(OP, pa.string()), *SCHEMA]
    return [pa.RecordBatch.from_pylist([{OP: "update", "k": k, "v": v}], schema=pa.schema(fields))]


def _load(destination: PostgresDestination) -> None:
    rows = [pa.RecordBatch.from_pylist([{"k": 1, "v": "a"}, {"k": 2, "v": "b"}], schema=SCHEMA)]
    destination.rebuild("s1", 1, COLUMNS, ["k"], rows, False, "load", AT)


def test_two_tables_of_one_view_in_one_schema_are_each_written(postgres):
    url = postgres.owner_url
    current = PostgresDestination(url, "bi.students", "students")
    history = PostgresDestination(url, "bi.students_history", "students", Publishing("history"))
    _load(current)
    assert history.applied() is None  # the log holds s1 for the other table only
    _load(history)
    for destination in (current, history):
        destination.apply("s2", 2, COLUMNS, ["k"], _update(2, "B"), False, AT + dt.timedelta(minutes=1))
    assert (current.applied(), history.applied()) == ("s2", "s2")
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT k, v FROM bi.students ORDER BY k").fetchall() == [(1, "a"), (2, "B")]
        versions = conn.execute("SELECT k, v FROM bi.students_history ORDER BY k, v").fetchall()
    assert versions == [(1, "a"), (2, "B"), (2, "b")]


def test_a_log_made_before_table_names_is_given_them_by_the_next_apply(postgres):
    url = postgres.owner_url
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA old")
        conn.execute("CREATE TABLE old.students (k bigint PRIMARY KEY, v text)")
        conn.execute("INSERT INTO old.students VALUES (1, 'a'), (2, 'b')")
        conn.execute(  # the log as releases before table_name made it
            "CREATE TABLE old.deltasieve_applied (view text NOT NULL, sync_id text NOT NULL, "
            "applied_at timestamptz NOT NULL DEFAULT clock_timestamp(), version bigint, rebuild text, "
            "seq bigserial NOT NULL, PRIMARY KEY (view, sync_id))"
        )
        conn.execute("INSERT INTO old.deltasieve_applied (view, sync_id, version) VALUES ('students', 's1', 1)")
    table = PostgresDestination(url, "old.students", "students")
    added = PostgresDestination(url, "old.students_copy", "students")
    assert (table.applied(), added.applied()) == ("s1", None)  # a table not there holds nothing
    table.apply("s1", 1, COLUMNS, ["k"], _update(2, "X"), False, AT)  # held already: nothing done
    table.apply("s2", 2, COLUMNS, ["k"], _update(2, "B"), False, AT)
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT v FROM old.students WHERE k = 2").fetchone() == ("B",)
        logged = conn.execute("SELECT table_name, sync_id FROM old.deltasieve_applied ORDER BY seq").fetchall()
    assert logged == [("", "s1"), ("students", "s2")]
    assert table.applied() == "s2"
