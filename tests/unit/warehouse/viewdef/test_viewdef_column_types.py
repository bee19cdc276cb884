"""A view's column_types resolved, applied to the schemas and named in the site queries (viewdef/column_types.py)."""

from __future__ import annotations

import pytest

from deltasieve_protocol.schema import ColumnInfo, SourceSchema, TableInfo
from deltasieve_protocol.types import LogicalType
from warehouse.viewdef import ViewDef, ViewDefinitionError, analyze_view
from warehouse.viewdef.column_types import asked_schemas, resolve, with_read_from


def col(name: str, kind: str = "int") -> ColumnInfo:
    return ColumnInfo(name, LogicalType.parse(kind), True, kind.upper())


ORDERS = TableInfo("orders", (col("id"), col("at", "text"), col("flag"), col("amount", "text")), ("id",))
LOGS = TableInfo("logs", (col("at", "text"), col("message", "text")), ())
SCHEMAS = {
    "a": SourceSchema("sqlite", {"orders": ORDERS, "logs": LOGS}),
    "b": SourceSchema("sqlite", {"orders": ORDERS}),
}
ONE = "SELECT o.id, o.at, o.flag, o.amount FROM a.orders o"
BOTH = "SELECT o.id, o.at, p.id AS pid FROM a.orders o JOIN b.orders p ON p.id = o.id"


def define(sql: str, given: dict) -> ViewDef:
    asked = resolve(given, sql, SCHEMAS)
    return with_read_from(analyze_view(sql, asked_schemas(SCHEMAS, asked)), asked)


def test_the_view_reads_the_asked_types_and_the_site_names_the_declared_ones():
    view = define(ONE, {"orders.at": "timestamp", "a.orders.flag": "bool", "orders.amount": "decimal(8,2)"})
    assert {c.name: str(c.type) for c in view.columns} == {
        "id": "int",
        "at": "timestamp",
        "flag": "bool",
        "amount": "decimal(8,2)",
    }
    (site,) = view.sites
    assert site.read_from == {"at": "text", "flag": "int", "amount": "text"}
    assert ViewDef.from_json(view.to_json()) == view  # stored with the definition


def test_a_view_without_column_types_is_stored_as_before():
    view = define(ONE, {})
    assert "read_from" not in view.to_json()["sites"][0]


def test_a_source_qualified_column_picks_one_of_two_sources():
    view = define(BOTH, {"a.orders.at": "timestamp"})
    reading = [s for s in view.sites if s.read_from]
    assert [(s.source, s.read_from) for s in reading] == [("a", {"at": "text"})]


@pytest.mark.parametrize(
    ("sql", "given", "words"),
    [
        (
            BOTH,
            {"orders.at": "timestamp"},
            "ambiguous, table 'orders' comes from several sources: write a.orders.at or b.orders.at",
        ),
        (ONE, {"orders.nope": "timestamp"}, "has no column 'nope'"),
        (ONE, {"logs.at": "timestamp"}, "names no table the view reads"),
        (ONE, {"at": "timestamp"}, "is not written table.column"),
        (ONE, {"orders.at": "float"}, "cannot be read as float; allowed (declared -> asked): text -> int"),
        (ONE, {"orders.at": "instant"}, "unknown logical type"),
        (ONE, {"orders.id": "bool"}, "is a key column of the view"),
        ("SELECT o.id FROM a.orders o", {"orders.at": "timestamp"}, "the view does not select 'orders.at'"),
        ("SELECT l.at, l.message FROM a.logs l", {"logs.at": "timestamp"}, "for keyed views"),
    ],
)
def test_what_cannot_be_read_so_is_refused(sql, given, words):
    with pytest.raises(ViewDefinitionError) as caught:
        define(sql, given)
    assert words in caught.value.detail
