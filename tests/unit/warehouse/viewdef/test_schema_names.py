"""Tables outside the default schema: `source.schema.table` in a view, `schema.table` at the agent."""

from __future__ import annotations

import pytest

from deltasieve_protocol.schema import ColumnInfo, SourceSchema, TableInfo
from deltasieve_protocol.types import LogicalType
from remote_agent.sitequery import validate_site_query
from warehouse.strategies.stamps import StampSettings, apply_delete_flags, check_settings
from warehouse.viewdef import ViewDefinitionError, analyze_view


def col(name: str, kind: str = "int", nullable: bool = False) -> ColumnInfo:
    return ColumnInfo(name, LogicalType.parse(kind), nullable, kind)


# `orders` of the default schema and `orders` of schema erp: one name, two tables.
PUBLIC_ORDERS = TableInfo("orders", (col("id"), col("total", "decimal(10,2)", True)), ("id",))
ERP_ORDERS = TableInfo("erp.orders", (col("no"), col("customer", "text", True)), ("no",), schema="erp")
TABLES = {t.name: t for t in (PUBLIC_ORDERS, ERP_ORDERS)}


@pytest.mark.parametrize("dialect", ["postgres", "mysql"])
def test_two_tables_of_one_name_never_collide(dialect):
    view = analyze_view(
        "SELECT p.id, p.total, e.no, e.customer FROM src.orders p JOIN src.erp.orders e ON e.no = p.id",
        {"src": SourceSchema(dialect, TABLES)},
    )
    (site,) = view.sites
    quote = "`" if dialect == "mysql" else '"'
    assert f"{quote}erp{quote}.{quote}orders{quote} AS" in site.sql
    assert f"FROM {quote}orders{quote} AS" in site.sql
    # the agent accepts the site query as the warehouse wrote it, and reads the same two tables
    query = validate_site_query(site.sql, site.key, TABLES, dialect)
    assert query.tables == ("orders", "erp.orders")
    assert query.sql.count(f"{quote}erp{quote}.{quote}orders{quote}") == 1


def test_an_unaliased_table_is_visible_by_its_own_name():
    view = analyze_view(
        "SELECT orders.no, orders.customer FROM src.erp.orders", {"src": SourceSchema("postgres", TABLES)}
    )
    assert [c.name for c in view.columns] == ["no", "customer"] and view.key == ["no"]
    with pytest.raises(ViewDefinitionError, match="stands for two tables"):
        analyze_view(
            "SELECT orders.id FROM src.orders JOIN src.erp.orders ON orders.id = orders.no",
            {"src": SourceSchema("postgres", TABLES)},
        )


def test_a_table_not_exposed_names_the_allow_rule():
    schemas = {"src": SourceSchema("postgres", {"orders": PUBLIC_ORDERS})}
    with pytest.raises(ViewDefinitionError) as info:
        analyze_view("SELECT o.no FROM src.erp.orders o", schemas)
    assert "no table 'erp.orders'" in info.value.detail and "--allow erp.orders" in info.value.detail


def test_sqlite_says_attached_databases_are_not_read():
    with pytest.raises(ViewDefinitionError, match="attached databases are not read"):
        analyze_view("SELECT o.id FROM src.main.orders o", {"src": SourceSchema("sqlite", {"orders": PUBLIC_ORDERS})})


def test_schema_json_keeps_the_schema_and_leaves_it_out_in_the_default_one():
    schema = SourceSchema("postgres", TABLES)
    body = schema.to_json()
    assert [t.get("schema") for t in body["tables"]] == [None, "erp"]
    assert "schema" not in body["tables"][0]
    assert SourceSchema.from_json(body) == schema


def test_strategy_settings_name_a_table_of_another_schema_with_its_schema():
    stamped = TableInfo(
        "erp.items", (col("id"), col("at", "timestamp", True), col("gone", "bool", True)), ("id",), schema="erp"
    )
    schemas = {"src": SourceSchema("postgres", {**TABLES, stamped.name: stamped})}
    view = analyze_view("SELECT i.id, i.at FROM src.erp.items i", schemas)
    got = check_settings(StampSettings({"src.erp.items": "at"}, {"erp.items": "gone"}), view, schemas, "timestamp")
    assert (got.timestamps, got.delete_flags) == ({"src.erp.items": "at"}, {"src.erp.items": "gone"})
    (site,) = apply_delete_flags(view, got, schemas).sites
    assert '"erp"."items" AS "i"' in site.sql and '"i"."gone"' in site.sql
