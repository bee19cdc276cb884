"""Table views: the SELECT and key a view of every column of a table stands for."""

from __future__ import annotations

import pytest

from deltasieve_protocol.schema import ColumnInfo, SourceSchema, TableInfo
from deltasieve_protocol.types import LogicalType
from warehouse.viewdef import (
    UnknownSourceError,
    ViewDef,
    ViewDefinitionError,
    analyze_table_view,
    table_view_key,
    table_view_sql,
)


def col(name: str, kind: str = "int", nullable: bool = False) -> ColumnInfo:
    return ColumnInfo(name, LogicalType.parse(kind), nullable, kind)


KEYED = TableInfo("orders", (col("id"), col("total", "decimal(10,2)", True), col("note", "text", True)), ("id",))
# No primary key: a unique key over a nullable column, then one over NOT NULL columns.
UNIQUE = TableInfo(
    "codes", (col("seq", nullable=True), col("a"), col("b"), col("label", "text", True)), (), (("seq",), ("a", "b"))
)
NULLABLE_UNIQUE = TableInfo("tags", (col("seq", nullable=True), col("label", "text", True)), (), (("seq",),))
KEYLESS = TableInfo("logs", (col("at", "timestamp", True), col("message", "text", True)), ())
ERP = TableInfo("erp.orders", (col("no"), col("customer", "text", True)), ("no",), schema="erp")
SCHEMAS = {"src": SourceSchema("postgres", {t.name: t for t in (KEYED, UNIQUE, NULLABLE_UNIQUE, KEYLESS, ERP)})}


def test_keyed_by_the_primary_key():
    view = analyze_table_view("src.orders", SCHEMAS)
    assert view.sql == table_view_sql("src", KEYED) == 'SELECT "id", "total", "note" FROM "src"."orders"'
    assert [c.name for c in view.columns] == ["id", "total", "note"]
    assert view.key == ["id"] and view.multiset is None and view.table == "src.orders"


def test_keyed_by_a_unique_key_over_not_null_columns():
    view = analyze_table_view("src.codes", SCHEMAS)
    assert table_view_key(UNIQUE) == ("a", "b") and view.key == ["a", "b"] and view.multiset is None


@pytest.mark.parametrize("table", ["tags", "logs"])
def test_without_a_not_null_key_a_multiset(table):
    view = analyze_table_view(f"src.{table}", SCHEMAS)
    assert view.key == [] and view.multiset is not None and view.sites[0].grouped


def test_a_table_of_another_schema():
    view = analyze_table_view("src.erp.orders", SCHEMAS)
    assert view.sql == 'SELECT "no", "customer" FROM "src"."erp"."orders"'
    assert view.table == "src.erp.orders" and view.key == ["no"]
    assert '"erp"."orders"' in view.sites[0].sql


def test_names_are_matched_ignoring_case_and_stored_as_the_agent_spells_them():
    assert analyze_table_view("src.ORDERS", SCHEMAS).table == "src.orders"


def test_the_table_survives_the_catalog():
    view = analyze_table_view("src.erp.orders", SCHEMAS)
    assert ViewDef.from_json(view.to_json()) == view
    assert view.to_json()["table"] == "src.erp.orders"


def test_an_old_definition_has_no_table():
    view = analyze_table_view("src.orders", SCHEMAS)
    old = {k: v for k, v in view.to_json().items() if k != "table"}
    assert ViewDef.from_json(old).table is None


@pytest.mark.parametrize(
    ("written", "needles"),
    [
        ("src.nope", ["no table 'nope'", "--allow nope"]),
        ("src.sales.orders", ["no table 'sales.orders'", "--allow sales.orders"]),
        ("orders", ["names no source", "source.table"]),
        ("src.", ["names no source"]),
    ],
)
def test_refused(written, needles):
    with pytest.raises(ViewDefinitionError) as info:
        analyze_table_view(written, SCHEMAS)
    for needle in needles:
        assert needle in info.value.detail


def test_unknown_source():
    with pytest.raises(UnknownSourceError):
        analyze_table_view("crm.orders", SCHEMAS)
