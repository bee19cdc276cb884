"""The agent's checks of source data against the view: messages name table, key and row."""

from __future__ import annotations

import pyarrow as pa
import pytest

from deltasieve_protocol.models import SiteColumn
from remote_agent.chunks import check_key
from remote_agent.errors import SchemaChanged, SourceDataError, example_row
from remote_agent.strategies.checks import check_columns, duplicate_key
from tests.unit.remote_agent.test_sitequery import check


def test_site_query_knows_its_tables_and_where_each_column_comes_from():
    query = check(
        "SELECT o.shop, o.no AS number, c.name FROM orders o JOIN customers c ON c.id = o.customer_id",
        key=("shop", "number"),
    )
    assert query.tables == ("orders", "customers")
    assert query.origins == ("orders.shop", "orders.no", "customers.name")
    assert query.where() == "tables 'orders', 'customers' (joined)"
    assert check("SELECT c.id FROM customers c").where() == "table 'customers'"


def test_a_changed_column_type_is_named_with_its_table():
    query = check("SELECT c.id, c.name AS who FROM customers c")
    check_columns(query, [SiteColumn(name="id", type="int"), SiteColumn(name="who", type="text")])
    with pytest.raises(SourceDataError) as caught:
        check_columns(query, [SiteColumn(name="id", type="int"), SiteColumn(name="who", type="int")])
    message = caught.value.message
    assert (
        "table 'customers'" in message
        and "'who' (customers.name) is text at the source but was int" in message
        and "redefine the view" in message
    )
    assert caught.value.code == "schema_changed"
    assert caught.value.changes == [{"table": "customers", "column": "name", "old": "int", "new": "text"}]


def test_a_vanished_or_new_column_is_named():
    query = check("SELECT c.id, c.region FROM customers c")
    with pytest.raises(SourceDataError, match=r"column 'name' is gone; column 'region' is new"):
        check_columns(query, [SiteColumn(name="id", type="int"), SiteColumn(name="name", type="text")])


def test_null_keys_are_refused_with_the_row():
    query = check("SELECT o.shop, o.no, o.amount FROM orders o", key=("shop", "no"))
    check_key((1, 1), query, (1, 1, 3))
    with pytest.raises(SourceDataError) as caught:
        check_key((1, None), query, (1, None, 4))
    message = caught.value.message
    assert message.startswith("table 'orders': NULL in key column(s) ['shop', 'no']") and "'amount': 4" in message


def test_duplicate_key_names_the_table_key_and_row():
    query = check("SELECT c.id, c.name FROM customers c")
    batch = pa.RecordBatch.from_pylist([{"id": 5, "name": "Ann"}, {"id": 7, "name": "Bo"}])
    message = duplicate_key(7, query, batch, [5, 7]).message
    assert "table 'customers': key {'id': 7}" in message and "'name': 'Bo'" in message and "not unique" in message


def test_example_rows_cut_long_values():
    text = example_row({"id": 1, "blob": "x" * 1000})
    assert text.startswith("{'id': 1, 'blob': 'xxx") and text.endswith("...}") and len(text) < 120


def test_a_schema_change_lists_the_changed_columns_for_the_warehouse():
    query = check("SELECT c.id, c.name AS who FROM customers c")
    with pytest.raises(SchemaChanged) as caught:
        check_columns(query, [SiteColumn(name="id", type="int"), SiteColumn(name="who", type="int")])
    assert caught.value.fields() == {
        "code": "schema_changed",
        "changes": [{"table": "customers", "column": "name", "old": "int", "new": "text"}],
    }
    assert caught.value.status == 409
