"""The agent reads a view's column_types strictly: site queries with read_from, and the definition's sample."""

from __future__ import annotations

import sqlite3

import pytest

from deltasieve_protocol.models import ColumnSampleRequest, SiteColumn, SiteSpec
from remote_agent.adapters.files import FileAdapter
from remote_agent.adapters.rows import RowConverter
from remote_agent.adapters.sqlite import SqliteAdapter
from remote_agent.column_types import read_as_asked, sample_column
from remote_agent.errors import BadRequest, Forbidden, SourceDataError, UnsupportedQuery
from remote_agent.sitequery import validate_site_query
from remote_agent.strategies.checks import check_columns

SQL = 'SELECT "o"."id" AS "id", "o"."at" AS "at" FROM "orders" AS "o"'


@pytest.fixture
def adapter(tmp_path):
    path = tmp_path / "legacy.db"
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, at TEXT)")
        c.executemany("INSERT INTO orders VALUES (?, ?)", [(i, f"2026-11-{i:02d} 10:00:00") for i in range(1, 20)])
        c.execute("INSERT INTO orders VALUES (20, NULL)")
    return SqliteAdapter(f"sqlite:///{path}", statement_timeout_s=10)


def spec(read_from: dict | None, at: str = "timestamp") -> SiteSpec:
    return SiteSpec(
        sql=SQL,
        key=["id"],
        columns=[SiteColumn(name="id", type="int"), SiteColumn(name="at", type=at)],
        read_from=read_from,
    )


def query(adapter, site: SiteSpec):
    tables = {t.name: t for t in adapter.describe()}
    return read_as_asked(
        adapter, validate_site_query(site.sql, site.key, tables, adapter.dialect, adapter.key_order), site
    )


def convert(adapter, site: SiteSpec):
    q = query(adapter, site)
    with adapter.read() as reader:
        rows = reader.rows(q.chunk_sql(100, from_cursor=False), limit=100)
    return RowConverter(adapter, q.columns, q.where()).batch(rows, q.key)


def test_a_text_column_is_read_as_the_asked_timestamp(adapter):
    batch = convert(adapter, spec({"at": "text"}))
    assert str(batch.schema.field("at").type) == "timestamp[us]"
    assert batch.column(1)[0].as_py().isoformat() == "2026-11-01T10:00:00"


def test_a_value_that_does_not_read_fails_naming_its_key(adapter, tmp_path):
    with sqlite3.connect(tmp_path / "legacy.db") as c:
        c.execute("UPDATE orders SET at = '01/11/2026' WHERE id = 7")
    with pytest.raises(SourceDataError, match=r"key \{'id': 7\} has '01/11/2026'"):
        convert(adapter, spec({"at": "text"}))


def test_without_read_from_the_column_is_what_the_source_declares(adapter):
    site = spec(None)  # an agent that predates read_from refuses the same way, rather than misread
    with pytest.raises(SourceDataError, match="is text at the source but was timestamp"):
        check_columns(query(adapter, site), site.columns)


@pytest.mark.parametrize(
    ("read_from", "at", "error", "words"),
    [
        ({"nope": "text"}, "timestamp", BadRequest, "not an output column"),
        ({"id": "int"}, "timestamp", BadRequest, "key column"),
        ({"at": "int"}, "bool", SourceDataError, "is text at the source, but the view reads it from int"),
        ({"at": "text"}, "float", UnsupportedQuery, "cannot be read as float"),
    ],
)
def test_read_from_is_checked(adapter, read_from, at, error, words):
    with pytest.raises(error, match=words):
        query(adapter, spec(read_from, at))


def test_the_sample_counts_values_and_nulls(adapter):
    request = ColumnSampleRequest(table="orders", column="at", read_from="text", type="timestamp", rows=1000)
    tables = {t.name: t for t in adapter.describe()}
    assert sample_column(adapter, tables, request).model_dump() == {"rows_read": 20, "nulls": 1, "bad": None}
    few = request.model_copy(update={"rows": 5})
    assert sample_column(adapter, tables, few).rows_read == 5


def test_the_sample_quotes_a_bad_value_with_its_key(adapter, tmp_path):
    with sqlite3.connect(tmp_path / "legacy.db") as c:
        c.execute("UPDATE orders SET at = '2026-11-03T10:00' WHERE id = 3")
    request = ColumnSampleRequest(table="orders", column="at", read_from="text", type="timestamp")
    answer = sample_column(adapter, {t.name: t for t in adapter.describe()}, request)
    assert answer.bad is not None
    assert (answer.bad.value, answer.bad.key) == ("'2026-11-03T10:00'", {"id": "3"})


def test_the_sample_reads_only_exposed_columns(adapter):
    tables = {t.name: t for t in adapter.describe()}
    request = ColumnSampleRequest(table="secrets", column="at", read_from="text", type="timestamp")
    with pytest.raises(Forbidden):
        sample_column(adapter, tables, request)


def test_a_spec_without_read_from_is_sent_as_before():
    assert "read_from" not in spec(None).model_dump()
    assert spec({"at": "text"}).model_dump()["read_from"] == {"at": "text"}


def test_an_agent_on_dump_files_refuses_column_types(tmp_path):
    files = FileAdapter(f"file://{tmp_path}", statement_timeout_s=10)
    request = ColumnSampleRequest(table="orders", column="at", read_from="text", type="timestamp")
    with pytest.raises(UnsupportedQuery, match="dump files"):
        sample_column(files, {}, request)


@pytest.mark.parametrize(("bad_id", "found"), [(1, True), (19, True), (10, False)])
def test_the_sample_reads_the_first_and_the_last_rows_in_key_order(adapter, tmp_path, bad_id, found):
    with sqlite3.connect(tmp_path / "legacy.db") as c:
        c.execute("UPDATE orders SET at = 'soon' WHERE id = ?", (bad_id,))
    request = ColumnSampleRequest(table="orders", column="at", read_from="text", type="timestamp", rows=4)
    answer = sample_column(adapter, {t.name: t for t in adapter.describe()}, request)
    assert answer.rows_read == 4
    assert (answer.bad is not None) is found
