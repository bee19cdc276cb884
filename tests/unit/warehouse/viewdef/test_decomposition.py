"""Decomposition of views over several sites: golden cases, the agent's view of them, and data.

Each `tests/fixtures/decomposition/*.json` holds a view's SQL and its sources' schemas (the
agents' GET /v1/schema bodies) in, and the expected site queries and assembly out. Cases
with `data` are also run: every source is a SQLite in-memory database, the truth is the
view over all of them ATTACHed to one connection, and the result is each site query run
at its own database, loaded into Spark as `site_i` and joined by the assembly.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest
import sqlglot
from sqlglot import exp

from deltasieve_protocol.types import Column, LogicalType
from remote_agent.sitequery import validate_site_query
from warehouse.spark import build_session
from warehouse.viewdef import ASSEMBLY_DIALECT, SourceSchema, ViewDef, analyze_view, site_table

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "decomposition"
CASES = {path.stem: json.loads(path.read_text()) for path in sorted(FIXTURES.glob("*.json"))}
WITH_DATA = [name for name, case in CASES.items() if "data" in case]

#: SQLite column types for the logical types the fixtures use.
SQLITE_TYPES = {
    "int": "INTEGER",
    "float": "REAL",
    "text": "TEXT",
    "decimal": "NUMERIC",
    "bool": "BOOLEAN",
    "bytes": "BLOB",
    "date": "DATE",
    "timestamp": "TIMESTAMP",
}


def schemas_of(case: dict) -> dict[str, SourceSchema]:
    return {name: SourceSchema.from_json(body) for name, body in case["sources"].items()}


def analyze(name: str) -> ViewDef:
    case = CASES[name]
    return analyze_view(case["view"], schemas_of(case))


@pytest.fixture(params=sorted(CASES))
def name(request) -> str:
    return request.param


def test_fixtures_cover_the_cases_asked_for():
    assert len(CASES) >= 10
    assert len(WITH_DATA) >= 2
    dialects = {s["dialect"] for case in CASES.values() for s in case["sources"].values()}
    assert dialects == {"sqlite", "postgres"}
    assert any(len(case["sources"]) == 3 for case in CASES.values())
    assert sum("LEFT JOIN" in case["view"] and "data" in case for case in CASES.values()) >= 2


def test_golden(name):
    view = analyze(name)
    expected = CASES[name]["expected"]
    assert [c.to_json() for c in view.columns] == expected["columns"]
    assert view.key == expected["key"]
    assert [p["in_view_key"] for p in view.key_derivation] == expected["key_tables"]
    assert [s.to_json() for s in view.sites] == expected["sites"]
    assert view.assembly == expected["assembly"]
    assert view.left_sites == expected.get("left_sites", [])


def test_agent_accepts_every_site_query_unchanged(name):
    schemas = schemas_of(CASES[name])
    for site in analyze(name).sites:
        schema = schemas[site.source]
        query = validate_site_query(site.sql, site.key, schema.tables, schema.dialect)
        assert query.sql == site.sql
        assert [Column(c.name, c.type) for c in query.columns] == site.columns
        assert query.key == site.key


def test_site_columns(name):
    """Sites share out the view's columns, carry their keys, and name extras collision-free."""
    view = analyze(name)
    outputs = [c.name for c in view.columns]
    projected = [c.name for site in view.sites for c in site.columns]
    assert len({n.casefold() for n in projected}) == len(projected)
    assert sorted(n for n in projected if n in outputs) == sorted(outputs)
    assert not any(n.startswith("__") for n in projected)
    for site in view.sites:
        assert site.key and set(site.key) <= {c.name for c in site.columns}
    # a site keeps every key of its tables; the view's key may leave out those its joins imply
    assert set(view.key) <= {k for site in view.sites for k in site.key}


def test_assembly_reads_the_site_columns(name):
    view = analyze(name)
    tree = sqlglot.parse_one(view.assembly, read=ASSEMBLY_DIALECT)
    assert isinstance(tree, exp.Select)
    assert [e.alias_or_name for e in tree.expressions] == [c.name for c in view.columns]
    aliases = {t.alias: t.name for t in tree.find_all(exp.Table)}
    assert sorted(aliases.values()) == sorted(site_table(i) for i in range(len(view.sites)))
    for col in tree.find_all(exp.Column):
        site = int(aliases[col.table].removeprefix("site_"))
        assert col.name in {c.name for c in view.sites[site].columns}, col.sql()


def test_json_round_trip(name):
    view = analyze(name)
    data = json.loads(json.dumps(view.to_json()))
    assert data["assembly"] == view.assembly
    assert ViewDef.from_json(data) == view


# --- end to end on data -------------------------------------------------------------------


@pytest.fixture(scope="module")
def spark():
    return build_session("local[2]")


class Sources:
    """One SQLite in-memory database per source, alive while the connections are open."""

    def __init__(self, case: dict):
        self.uris: dict[str, str] = {}
        self.connections: dict[str, sqlite3.Connection] = {}
        for name, body in case["sources"].items():
            uri = f"file:{name}-{uuid.uuid4().hex}?mode=memory&cache=shared"
            conn = sqlite3.connect(uri, uri=True)
            for table in body["tables"]:
                conn.execute(create_table(table))
                rows = case["data"].get(name, {}).get(table["name"], [])
                marks = ", ".join("?" for _ in table["columns"])
                conn.executemany(f'INSERT INTO "{table["name"]}" VALUES ({marks})', rows)
            conn.commit()
            self.uris[name], self.connections[name] = uri, conn

    def truth(self, view_sql: str) -> list[tuple]:
        """The view computed over all sources at once."""
        conn = sqlite3.connect("file:truth?mode=memory", uri=True)
        try:
            for name, uri in self.uris.items():
                conn.execute("ATTACH DATABASE ? AS " + exp.to_identifier(name, quoted=True).sql("sqlite"), (uri,))
            return conn.execute(sqlglot.transpile(view_sql, write="sqlite")[0]).fetchall()
        finally:
            conn.close()

    def run(self, source: str, sql: str, dialect: str) -> list[tuple]:
        if dialect != "sqlite":  # the test stands in a SQLite database for every source
            sql = sqlglot.transpile(sql, read=dialect, write="sqlite")[0]
        return self.connections[source].execute(sql).fetchall()

    def close(self) -> None:
        for conn in self.connections.values():
            conn.close()


def create_table(table: dict) -> str:
    columns = [
        f'"{c["name"]}" {SQLITE_TYPES[LogicalType.parse(c["type"]).kind]}'
        + ("" if c.get("nullable", True) else " NOT NULL")
        for c in table["columns"]
    ]
    if table.get("primary_key"):
        columns.append("PRIMARY KEY (" + ", ".join(f'"{k}"' for k in table["primary_key"]) + ")")
    return f'CREATE TABLE "{table["name"]}" ({", ".join(columns)})'


def spark_value(value, kind: str):
    """A value read from SQLite in the Python type Spark expects for the logical type."""
    if value is None:
        return None
    return {"float": float, "decimal": Decimal, "bool": bool}.get(kind, lambda v: v)(value)


@pytest.mark.parametrize("name", WITH_DATA)
def test_sites_and_assembly_compute_the_view(name, spark):
    case = CASES[name]
    view = analyze(name)
    schemas = schemas_of(case)
    sources = Sources(case)
    try:
        truth = sources.truth(case["view"])
        for i, site in enumerate(view.sites):
            schema = schemas[site.source]
            query = validate_site_query(site.sql, site.key, schema.tables, schema.dialect)
            rows = [
                tuple(spark_value(v, c.type.kind) for v, c in zip(row, site.columns))
                for row in sources.run(site.source, query.sql, schema.dialect)
            ]
            ddl = ", ".join(f"`{c.name.replace('`', '``')}` {c.type.spark_ddl()}" for c in site.columns)
            spark.createDataFrame(rows, ddl).createOrReplaceTempView(site_table(i))
        result = [tuple(row) for row in spark.sql(view.assembly).collect()]
    finally:
        sources.close()
        for i in range(len(view.sites)):
            spark.catalog.dropTempView(site_table(i))
    assert truth, "the case's data should give the view some rows"
    assert Counter(result) == Counter(truth)
