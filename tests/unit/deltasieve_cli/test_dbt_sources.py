"""`deltasieve dbt sources`: the sources file of the views' published tables, parsed back as
dbt parses it and held to the rules of dbt's own schema of properties files (dbt 1.10 and
later: the keys each level takes, the required ones, freshness thresholds)."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest
import yaml

from deltasieve_cli import dbt

#: Views as GET /v1/views shows them (the fields the command reads).
VIEWS = [
    {
        "name": "orders",
        "sql": "SELECT o.id, o.total\n  FROM shop.orders o",
        "columns": ["id", "total"],
        "column_types": {"id": "int", "total": "decimal(12,2)"},
        "key": ["id"],
        "schedule": {"every_s": 600},
        "destinations": [
            {"kind": "delta", "uri": "/srv/deltasieve/tables/orders"},
            {"kind": "postgres", "url": "postgresql://loader:***@wh.example:5432/bi", "table": "sales.orders"},
            {"kind": "postgres", "url": "postgresql://loader:***@wh2.example:5432/bi", "table": "sales.orders_copy"},
        ],
    },
    {
        "name": "lines",
        "sql": "SELECT l.order_id, l.no, l.sku FROM shop.lines l",
        "columns": ["order_id", "no", "sku"],
        "column_types": {"order_id": "int", "no": "int", "sku": "text"},
        "key": ["order_id", "no"],
        "schedule": None,
        "destinations": [
            {
                "kind": "delta",
                "uri": "s3://lake/lines",
                "mode": "history",
                "columns": {"synced_at": "_fivetran_synced"},
            },
            {"kind": "postgres", "url": "env:WAREHOUSE_URL", "table": "sales.lines"},
        ],
    },
    {"name": "unpublished", "sql": "SELECT 1", "columns": [], "column_types": {}, "key": [], "destinations": []},
]

# -- dbt's rules for a sources file, as its JSON schema of properties files states them --

#: The keys each level may hold (dbt's schema forbids any other: additionalProperties false).
ALLOWED = {
    "file": {"version", "sources"},
    "source": {"name", "catalog", "config", "database", "description", "loader", "quoting", "schema", "tables"},
    "table": {
        "name",
        "columns",
        "config",
        "data_tests",
        "description",
        "external",
        "identifier",
        "loader",
        "quoting",
        "tests",
    },
    "table config": {
        "enabled",
        "event_time",
        "external_location",
        "formatter",
        "freshness",
        "loaded_at_field",
        "loaded_at_query",
        "meta",
        "schema_origin",
        "sync",
        "tags",
    },
    "freshness": {"error_after", "filter", "loaded_at_field", "loaded_at_query", "warn_after"},
    "threshold": {"count", "period"},
    "column": {
        "name",
        "classifiers",
        "column_mask",
        "config",
        "constraints",
        "data_tests",
        "data_type",
        "databricks_tags",
        "description",
        "dimension",
        "entity",
        "granularity",
        "policy_tags",
        "quote",
        "tests",
    },
}
PERIODS = {"minute", "hour", "day"}


def check_keys(level: str, value: object) -> dict:
    assert isinstance(value, dict), f"{level}: {value!r} is not a mapping"
    stray = set(value) - ALLOWED[level]
    assert not stray, f"{level} {value.get('name', '')!r} holds keys dbt does not take: {sorted(stray)}"
    return value


def check_dbt_rules(text: str) -> dict:
    """`text` parsed as dbt parses a properties file (YAML), and held to dbt's schema of one."""
    document = check_keys("file", yaml.safe_load(text))
    assert document["version"] == 2
    names = [check_keys("source", s)["name"] for s in document["sources"]]
    assert len(set(names)) == len(names), f"two sources of one name: {names}"
    for source in document["sources"]:
        assert all(isinstance(source.get(k, ""), str) for k in ("name", "database", "schema", "description"))
        tables = [check_keys("table", t)["name"] for t in source["tables"]]
        assert len(set(tables)) == len(tables), f"two tables of one name in {source['name']}: {tables}"
        for table in source["tables"]:
            config = check_keys("table config", table["config"])
            assert isinstance(config["loaded_at_field"], str)
            for side in ("warn_after", "error_after"):
                rule = check_keys("threshold", check_keys("freshness", config["freshness"])[side])
                assert isinstance(rule["count"], int) and rule["count"] > 0 and rule["period"] in PERIODS
            columns = [check_keys("column", c)["name"] for c in table["columns"]]
            assert config["loaded_at_field"] in columns
            assert all(isinstance(t, str) for c in table["columns"] for t in c.get("data_tests", []))
    return document


@pytest.fixture(scope="module")
def document() -> dict:
    text = dbt.render(dbt.sources(VIEWS), "http://ds:8000", dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    assert "loader:***@wh.example" in text  # a password as the API shows it: masked
    assert not re.search(r"[&*]id\d", text), "tables sharing a freshness are written out, not aliased"
    return check_dbt_rules(text)


def source(document: dict, name: str) -> dict:
    (found,) = [s for s in document["sources"] if s["name"] == name]
    return found


def table(document: dict, source_name: str, name: str) -> dict:
    (found,) = [t for t in source(document, source_name)["tables"] if t["name"] == name]
    return found


def test_one_source_per_kind_and_database_schema(document):
    assert [(s["name"], [t["name"] for t in s["tables"]]) for s in document["sources"]] == [
        ("deltasieve_delta", ["lines", "orders"]),
        ("deltasieve_postgres_sales", ["lines"]),  # a URL the service reads from the environment: no database
        ("deltasieve_bi_sales", ["orders"]),
        ("deltasieve_bi_sales_2", ["orders"]),  # another server's database and schema of the same names
    ]
    bi = source(document, "deltasieve_bi_sales")
    assert (bi["database"], bi["schema"], bi["config"]["meta"]["deltasieve_url"]) == (
        "bi",
        "sales",
        "postgresql://loader:***@wh.example:5432/bi",
    )
    assert table(document, "deltasieve_bi_sales_2", "orders")["identifier"] == "orders_copy"
    assert "identifier" not in table(document, "deltasieve_bi_sales", "orders")


def test_delta_tables_are_external_locations(document):
    lines = table(document, "deltasieve_delta", "lines")
    assert lines["external"] == {"location": "s3://lake/lines", "using": "delta"}
    assert lines["config"]["external_location"] == "delta_scan('s3://lake/lines')"
    assert lines["description"] == "deltasieve view lines: SELECT l.order_id, l.no, l.sku FROM shop.lines l"


def test_columns_carry_types_and_the_key_and_the_load_metadata_of_the_mode(document):
    orders = table(document, "deltasieve_delta", "orders")
    assert [(c["name"], c["description"], c.get("data_tests")) for c in orders["columns"][:2]] == [
        ("id", "key column, int", ["not_null", "unique"]),
        ("total", "decimal(12,2)", None),
    ]
    assert [c["name"] for c in orders["columns"][2:]] == ["_deltasieve_synced_at", "_deltasieve_sync_id"]
    lines = table(document, "deltasieve_delta", "lines")  # history, its synced-at column renamed
    assert [c["name"] for c in lines["columns"][3:]] == [
        "_fivetran_synced",
        "_deltasieve_sync_id",
        "_deltasieve_valid_from",
        "_deltasieve_valid_to",
        "_deltasieve_current",
    ]
    assert lines["config"]["loaded_at_field"] == "_fivetran_synced"
    assert lines["columns"][0]["data_tests"] == ["not_null"]  # one row per version of each key, and a two-column key
    assert lines["config"]["meta"] == {"deltasieve_view": "lines", "deltasieve_mode": "history"}


def test_freshness_follows_the_schedule_or_the_defaults_or_the_options(document):
    every_10_min = table(document, "deltasieve_delta", "orders")["config"]["freshness"]
    assert every_10_min == {
        "warn_after": {"count": 20, "period": "minute"},
        "error_after": {"count": 40, "period": "minute"},
    }
    unscheduled = table(document, "deltasieve_delta", "lines")["config"]["freshness"]
    assert unscheduled == {"warn_after": dbt.DEFAULT_WARN, "error_after": dbt.DEFAULT_ERROR}
    given = dbt.sources(VIEWS, prefix="wh", tests=False, warn=dbt.duration("1d"), error=dbt.duration("3d"))
    check_dbt_rules(yaml.safe_dump(given))
    for src in given["sources"]:
        assert src["name"].startswith("wh_")
        for t in src["tables"]:
            assert t["config"]["freshness"]["error_after"] == {"count": 3, "period": "day"}
            assert not any("data_tests" in c for c in t["columns"])


def test_a_duration_that_dbt_cannot_say_is_refused_by_name():
    for text in ("12", "0h", "1w", "1.5h", ""):
        with pytest.raises(ValueError, match="30m, 12h or 2d"):
            dbt.duration(text)


#: The view of the worked examples on docs/results/destinations.md, published in each mode.
MODES_VIEW = {
    "name": "students",
    "sql": "SELECT s.id, s.name FROM school.students s",
    "columns": ["id", "name"],
    "column_types": {"id": "int", "name": "text"},
    "key": ["id"],
    "schedule": None,
    "destinations": [
        {"kind": "postgres", "url": "env:WAREHOUSE_URL", "table": f"{schema}.students", "mode": mode}
        for schema, mode in (("bi", "merge"), ("bi_deleted", "soft_delete"), ("bi_history", "history"))
    ],
}


def test_the_file_on_the_destinations_page_is_the_commands():
    page = Path(__file__).parents[3] / "docs" / "results" / "destinations.md"
    section = page.read_text().split("### dbt sources of these tables\n", 1)[1]
    (shown,) = re.findall(r"```yaml\n(.*?)```", section.split("\n## ", 1)[0], flags=re.S)
    at = dt.datetime(2026, 3, 2, 12, 5, tzinfo=dt.UTC)
    assert shown == dbt.render(dbt.sources([MODES_VIEW]), "http://deltasieve.example:8000", at)
    check_dbt_rules(shown)
