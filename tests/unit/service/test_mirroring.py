"""A mirror against a real catalog and a schema (service/mirroring.py), without HTTP or agents.

Each table gets its view or a reason; run again, the views are existing; a view created by
a request running at once is found as existing when it is the table's view and as a name
taken otherwise; a table no view can keep is skipped with the binding's reason.
"""

from __future__ import annotations

import pytest

from deltasieve_protocol.schema import ColumnInfo, SourceSchema, TableInfo
from deltasieve_protocol.types import LogicalType
from service import mirroring
from service.catalog import Catalog
from service.errors import Unprocessable
from service.routes.views import define_table_view
from service.settings import ServiceSettings
from warehouse.view_options import ViewOptions

INT = LogicalType("int")


def table(name: str, *columns: str, key: tuple[str, ...] = ("id",)) -> TableInfo:
    return TableInfo(name, tuple(ColumnInfo(c, INT, c not in key, "integer") for c in columns), key)


SCHEMAS = {
    "src": SourceSchema(
        "sqlite",
        {
            t.name: t
            for t in (
                table("orders", "id", "v"),
                table("Order Lines", "id", "v"),
                table("logs", "v", key=()),
                table("bad", "id", "__v"),
            )
        },
    )
}


@pytest.fixture
def catalog(tmp_path):
    c = Catalog(tmp_path / "catalog.db")
    c.add_source("src", "http://127.0.0.1:1", None)
    yield c
    c.close()


def definer(catalog: Catalog, tmp_path, before=None) -> mirroring.Define:
    """Binds as the route does; `before(written)` runs first, as a request running at once would."""
    settings = ServiceSettings(data_dir=tmp_path)

    def define(written: str):
        if before is not None:
            before(written)
        return define_table_view(written, SCHEMAS, catalog, settings, "auto", None, "evolve", [])

    return define


def run(catalog: Catalog, define: mirroring.Define) -> mirroring.Mirror:
    tables = mirroring.mirrored_tables(SCHEMAS["src"], None)
    return mirroring.mirror("src", tables, mirroring.table_views(catalog), catalog, define)


def test_each_table_its_view_then_existing(catalog, tmp_path):
    done = run(catalog, definer(catalog, tmp_path))
    assert [(m.table, m.view, m.key) for m in done.created] == [
        ("Order Lines", "src_order_lines", ["id"]),
        ("logs", "src_logs", []),
        ("orders", "src_orders", ["id"]),
    ]
    assert [s.table for s in done.skipped] == ["bad"] and "reserved" in done.skipped[0].reason
    assert catalog.view("src_order_lines").sql == 'SELECT "id", "v" FROM "src"."Order Lines"'
    again = run(catalog, definer(catalog, tmp_path))
    assert again.created == [] and [m.view for m in again.existing] == [m.view for m in done.created]
    assert again.skipped == done.skipped


def test_a_view_created_meanwhile(catalog, tmp_path):
    """A mirror running at once made `src_orders` (existing); someone made `src_logs` as SQL (taken)."""
    settings = ServiceSettings(data_dir=tmp_path)

    def other_request(written: str) -> None:
        if written == "src.orders":
            definition, options = define_table_view(written, SCHEMAS, catalog, settings, "auto", None, "evolve", [])
            catalog.add_view("src_orders", definition.sql, definition.to_json(), options)
        if written == "src.logs":
            sql_view = define_table_view("src.orders", SCHEMAS, catalog, settings, "auto", None, "evolve", [])[0]
            as_sql = {**sql_view.to_json(), "table": None}
            catalog.add_view("src_logs", "SELECT ...", as_sql, ViewOptions.from_stored({"strategy": "auto"}))

    done = run(catalog, definer(catalog, tmp_path, other_request))
    assert [m.view for m in done.created] == ["src_order_lines"]
    assert [(m.table, m.view, m.key) for m in done.existing] == [("orders", "src_orders", ["id"])]
    reasons = {s.table: s.reason for s in done.skipped}
    assert reasons["logs"].startswith("name taken: view 'src_logs' is a view given as SQL"), reasons


def test_unknown_tables_are_named():
    with pytest.raises(Unprocessable) as raised:
        mirroring.mirrored_tables(SCHEMAS["src"], ["orders", "nope", "gone"])
    assert "'nope', 'gone'" in str(raised.value.detail)
